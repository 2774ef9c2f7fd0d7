//! What a plan's changes cost under the cloud's rate model: the tokens each
//! bucket gives, and how long the bucket takes to refill what goes beyond
//! its burst. A pure function over the declared limits.

use ipam_cloud::rate::RateLimits;

use super::dry_run_cloud::PlannedCall;

/// One bucket's share of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketCost {
    pub bucket: String,
    pub tokens: f64,
    pub burst: f64,
    pub per_second: f64,
}

impl BucketCost {
    /// Seconds of refill the plan needs beyond a full burst (0: it fits in
    /// the burst). Other callers of the same account share the bucket, so
    /// this is the least the plan can take.
    pub fn seconds_beyond_burst(&self) -> f64 {
        ((self.tokens - self.burst) / self.per_second).max(0.0)
    }
}

/// Tokens per bucket the `calls` take, in the order the buckets are
/// declared; buckets no call touches are left out.
pub fn bucket_costs(calls: &[PlannedCall], limits: &RateLimits) -> Vec<BucketCost> {
    let mut tokens = vec![0.0; limits.buckets().len()];
    for call in calls {
        for (bucket, taken) in limits.cost(call.operation) {
            if let Some(sum) = tokens.get_mut(*bucket) {
                *sum += taken;
            }
        }
    }
    limits
        .buckets()
        .iter()
        .zip(tokens)
        .filter(|(_, tokens)| *tokens > 0.0)
        .map(|((name, config), tokens)| BucketCost {
            bucket: name.clone(),
            tokens,
            burst: config.burst,
            per_second: config.per_second,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_cloud::rate::BucketConfig;
    use ipam_cloud::Operation;

    fn call(operation: Operation) -> PlannedCall {
        PlannedCall {
            operation,
            interface: "eni-1".into(),
            subnet: None,
            addresses: 1,
            prefixes: 0,
        }
    }

    #[test]
    fn each_bucket_is_charged_what_the_declared_costs_say() {
        let bucket = |burst, per_second| BucketConfig { burst, per_second };
        let limits = RateLimits::new([
            ("mutating", bucket(2.0, 0.5)),
            ("describe", bucket(100.0, 20.0)),
            ("unused", bucket(10.0, 1.0)),
        ])
        .with_cost(Operation::CreateInterface, &[("mutating", 2.0)])
        .unwrap()
        .with_cost(Operation::AssignIps, &[("mutating", 1.0)])
        .unwrap();
        let costs = bucket_costs(
            &[
                call(Operation::CreateInterface),
                call(Operation::AssignIps),
                call(Operation::AssignIps),
            ],
            &limits,
        );
        assert_eq!(
            costs,
            vec![BucketCost {
                bucket: "mutating".into(),
                tokens: 4.0,
                burst: 2.0,
                per_second: 0.5
            }],
            "untouched buckets are left out"
        );
        assert_eq!(costs[0].seconds_beyond_burst(), 4.0);
        assert!(bucket_costs(&[], &limits).is_empty());
        let within = BucketCost {
            tokens: 1.0,
            ..costs[0].clone()
        };
        assert_eq!(within.seconds_beyond_burst(), 0.0, "fits in the burst");
    }
}
