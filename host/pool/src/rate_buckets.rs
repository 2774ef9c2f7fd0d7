//! The token buckets of one rate model ([`RateLimits`]) and what an
//! operation costs in them: a client reserves (and waits), a cloud admits
//! all of an operation's tokens or none (and refuses). `LimitedCloud` and
//! the simulation's cloud model are the two users.

use std::time::{Duration, Instant};

use ipam_cloud::rate::RateLimits;
use ipam_cloud::Operation;

use crate::token_bucket::TokenBucket;

#[derive(Debug, Clone)]
pub struct RateBuckets {
    limits: RateLimits,
    buckets: Vec<TokenBucket>,
}

impl RateBuckets {
    /// Every bucket of `limits`, full at `now`.
    pub fn new(limits: RateLimits, now: Instant) -> Self {
        let buckets = limits
            .buckets()
            .iter()
            .map(|(_, config)| TokenBucket::new(*config, now))
            .collect();
        Self { limits, buckets }
    }

    /// Take `operation`'s tokens; how long to wait before calling (the
    /// longest of its buckets' waits).
    pub fn reserve(&mut self, operation: Operation, now: Instant) -> Duration {
        let Self { limits, buckets } = self;
        limits
            .cost(operation)
            .iter()
            .filter_map(|&(bucket, tokens)| Some(buckets.get_mut(bucket)?.reserve(tokens, now)))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// Take all of `operation`'s tokens if every bucket has them now;
    /// otherwise take none and say how long until they would be there.
    pub fn admit(&mut self, operation: Operation, now: Instant) -> Result<(), Duration> {
        let mut trial = self.buckets.clone();
        let mut refused = Duration::ZERO;
        for &(bucket, tokens) in self.limits.cost(operation) {
            if let Some(Err(wait)) = trial.get_mut(bucket).map(|b| b.try_take(tokens, now)) {
                refused = refused.max(wait);
            }
        }
        if refused.is_zero() {
            self.buckets = trial;
            Ok(())
        } else {
            Err(refused)
        }
    }
}

#[cfg(test)]
mod tests {
    use ipam_cloud::rate::BucketConfig;

    use super::*;

    /// A read bucket of 2 and a write bucket of 1, one token a second;
    /// assign-ips takes one of each, get-subnets one read.
    fn buckets(now: Instant) -> RateBuckets {
        let bucket = |burst| BucketConfig {
            burst,
            per_second: 1.0,
        };
        let limits = RateLimits::new([("read", bucket(2.0)), ("write", bucket(1.0))])
            .with_cost(Operation::AssignIps, &[("read", 1.0), ("write", 1.0)])
            .and_then(|l| l.with_cost(Operation::GetSubnets, &[("read", 1.0)]))
            .unwrap();
        RateBuckets::new(limits, now)
    }

    #[test]
    fn reserving_waits_for_the_slowest_bucket() {
        let t0 = Instant::now();
        let mut b = buckets(t0);
        assert_eq!(b.reserve(Operation::AssignIps, t0), Duration::ZERO);
        assert_eq!(b.reserve(Operation::AssignIps, t0), Duration::from_secs(1));
        assert_eq!(
            b.reserve(Operation::GetVpcs, t0),
            Duration::ZERO,
            "costs nothing"
        );
    }

    #[test]
    fn admitting_takes_every_token_or_none() {
        let t0 = Instant::now();
        let mut b = buckets(t0);
        assert_eq!(b.admit(Operation::AssignIps, t0), Ok(()));
        assert_eq!(
            b.admit(Operation::AssignIps, t0),
            Err(Duration::from_secs(1)),
            "the write bucket is empty"
        );
        // The refusal took no read token: one is left for a read.
        assert_eq!(b.admit(Operation::GetSubnets, t0), Ok(()));
        assert_eq!(
            b.admit(Operation::GetSubnets, t0),
            Err(Duration::from_secs(1))
        );
    }
}
