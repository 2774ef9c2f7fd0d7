//! A cloud's rate model as data. A provider declares it ([`RateModel`]:
//! the cloud's buckets and the API calls each [`Operation`] makes); the
//! operator's configuration may raise a bucket or add a global cap
//! ([`RateSettings`]); [`RateLimits::from_model`] checks the declaration and
//! turns it into what the engine's `LimitedCloud` keeps to: buckets, what
//! each operation takes from which, and how failed calls are retried.
//! Nothing here knows any cloud: the tables are the providers'.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::Operation;

mod model;

pub use model::{ApiCall, DeclaredBucket, OperationCost, RateModel, RateModelError, RateSettings};

/// One token bucket: `burst` tokens at once, `per_second` added back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketConfig {
    /// Tokens available at once.
    pub burst: f64,
    /// Tokens added per second.
    pub per_second: f64,
}

/// A bucket given as `BURST:PER_SECOND` (`100:10`: 100 at once, 10 a second)
/// that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a bucket: {problem} (write BURST:PER_SECOND, e.g. 100:10)")]
pub struct BadBucketText {
    pub text: String,
    pub problem: &'static str,
}

impl BucketConfig {
    /// Why these figures are not a bucket the host can keep to, if they are not.
    pub fn problem(&self) -> Option<&'static str> {
        if !(self.burst.is_finite() && self.burst >= 1.0) {
            Some("the burst must be at least 1")
        } else if !(self.per_second.is_finite() && self.per_second > 0.0) {
            Some("the refill must be a number of tokens per second above 0")
        } else {
            None
        }
    }
}

impl FromStr for BucketConfig {
    type Err = BadBucketText;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |problem| BadBucketText {
            text: text.to_string(),
            problem,
        };
        let (burst, per_second) = text.split_once(':').ok_or_else(|| bad("no ':'"))?;
        let bucket = BucketConfig {
            burst: burst
                .trim()
                .parse()
                .map_err(|_| bad("the burst is not a number"))?,
            per_second: per_second
                .trim()
                .parse()
                .map_err(|_| bad("the refill is not a number"))?,
        };
        match bucket.problem() {
            Some(problem) => Err(bad(problem)),
            None => Ok(bucket),
        }
    }
}

impl fmt::Display for BucketConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.burst, self.per_second)
    }
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

    /// One line for the log: each bucket with its figures.
    pub fn summary(&self) -> String {
        self.buckets
            .iter()
            .map(|(name, bucket)| format!("{name} {bucket}"))
            .collect::<Vec<_>>()
            .join(", ")
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
