//! A cloud's rate model as data: its token buckets, what each [`Operation`]
//! takes from which bucket, and how failed calls are retried. The engine's
//! `LimitedCloud` keeps to it and the simulation's cloud model enforces it;
//! which model applies is the per-cloud crate's knowledge (`ipam-clouds`),
//! never a table hard-coded for every provider.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::Operation;

/// One token bucket: `burst` tokens at once, `per_second` added back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketConfig {
    /// Tokens available at once.
    pub burst: f64,
    /// Tokens added per second.
    pub per_second: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubled each time, then jittered.
    pub base: Duration,
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base: Duration::from_millis(200),
            cap: Duration::from_secs(10),
        }
    }
}

/// A bucket named in a cost that the model does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{operation} costs tokens of bucket {bucket:?}, which the rate model does not declare")]
pub struct UnknownBucket {
    pub operation: Operation,
    pub bucket: String,
}

/// Buckets, costs and retries of one cloud account and region.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimits {
    buckets: Vec<(String, BucketConfig)>,
    /// Per operation: (index into `buckets`, tokens). An operation without an
    /// entry costs nothing.
    costs: BTreeMap<Operation, Vec<(usize, f64)>>,
    pub retry: RetryPolicy,
}

impl RateLimits {
    /// These buckets, no costs yet, the default retry policy.
    pub fn new(buckets: impl IntoIterator<Item = (impl Into<String>, BucketConfig)>) -> Self {
        Self {
            buckets: buckets.into_iter().map(|(n, b)| (n.into(), b)).collect(),
            costs: BTreeMap::new(),
            retry: RetryPolicy::default(),
        }
    }

    /// One bucket shared by every operation, one token a call: Cilium's own
    /// client-side limit (`limit-ipam-api-qps` 4, `limit-ipam-api-burst` 20)
    /// is this with those figures.
    pub fn shared_bucket(bucket: BucketConfig) -> Self {
        let mut limits = Self::new([("all", bucket)]);
        for operation in Operation::ALL {
            limits.costs.insert(operation, vec![(0, 1.0)]);
        }
        limits
    }

    /// `operation` takes `tokens` from each named bucket.
    pub fn with_cost(
        mut self,
        operation: Operation,
        cost: &[(&str, f64)],
    ) -> Result<Self, UnknownBucket> {
        let mut resolved = Vec::with_capacity(cost.len());
        for (bucket, tokens) in cost {
            let index = self
                .buckets
                .iter()
                .position(|(name, _)| name == bucket)
                .ok_or_else(|| UnknownBucket {
                    operation,
                    bucket: (*bucket).to_string(),
                })?;
            resolved.push((index, *tokens));
        }
        self.costs.insert(operation, resolved);
        Ok(self)
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The buckets, in declaration order (costs index into this).
    pub fn buckets(&self) -> &[(String, BucketConfig)] {
        &self.buckets
    }

    /// What one call of `operation` takes: (bucket index, tokens).
    pub fn cost(&self, operation: Operation) -> &[(usize, f64)] {
        self.costs.get(&operation).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: BucketConfig = BucketConfig {
        burst: 10.0,
        per_second: 1.0,
    };

    #[test]
    fn costs_name_declared_buckets_only() {
        let limits = RateLimits::new([("read", B), ("write", B)])
            .with_cost(Operation::AssignIps, &[("write", 2.0)])
            .unwrap();
        assert_eq!(limits.cost(Operation::AssignIps), &[(1, 2.0)]);
        assert_eq!(limits.cost(Operation::GetVpcs), &[]);
        let error = RateLimits::new([("read", B)])
            .with_cost(Operation::AssignIps, &[("wirte", 1.0)])
            .unwrap_err();
        assert_eq!(error.bucket, "wirte");
        assert!(error.to_string().contains("assign-ips"));
    }

    #[test]
    fn a_shared_bucket_charges_every_operation_one_token() {
        let limits = RateLimits::shared_bucket(B);
        for operation in Operation::ALL {
            assert_eq!(limits.cost(operation), &[(0, 1.0)]);
        }
    }
}
