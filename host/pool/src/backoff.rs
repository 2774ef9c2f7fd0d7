//! Retry and backoff arithmetic: which failed calls may be repeated, how
//! long to wait before the next attempt, and how long a node whose pass
//! failed is left alone. The randomness comes in as a number.

use std::time::Duration;

use ipam_cloud::rate::RetryPolicy;
use ipam_cloud::{CloudError, Operation, ProviderError};

/// Whether an error may be retried: a throttled call did not happen, so it
/// always may; a transient failure, timeout or host error may have happened,
/// so only an idempotent operation is repeated.
pub fn retryable(error: &CloudError, operation: Operation) -> bool {
    match error {
        CloudError::Provider {
            error: ProviderError::Throttled(_),
            ..
        } => true,
        CloudError::Provider {
            error: ProviderError::Transient(_),
            ..
        }
        | CloudError::Timeout { .. }
        | CloudError::Host { .. } => operation.is_idempotent(),
        _ => false,
    }
}

/// Exponential backoff with equal jitter (`jitter` in [0, 1)), never shorter
/// than the provider's retry-after.
pub fn retry_backoff(
    policy: RetryPolicy,
    attempt: u32,
    jitter: f64,
    error: &CloudError,
) -> Duration {
    let exponential = policy
        .base
        .saturating_mul(2u32.saturating_pow(attempt))
        .min(policy.cap);
    let jittered = exponential.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0));
    match error {
        CloudError::Provider {
            error: ProviderError::Throttled(after),
            ..
        } => jittered.max(*after),
        _ => jittered,
    }
}

/// The `n`th number of a splitmix64 sequence, in [0, 1): enough to spread
/// retries apart.
pub fn jitter(n: u64) -> f64 {
    let mut z = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as f64 / (u64::MAX as f64 + 1.0)
}

/// How long a node is left alone after `failures` failed passes in a row:
/// `first`, doubled per failure, at most `cap`.
pub fn failure_backoff(first: Duration, cap: Duration, failures: u32) -> Duration {
    first
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)))
        .min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(error: ProviderError) -> CloudError {
        CloudError::Provider {
            provider: "p".into(),
            error,
        }
    }

    #[test]
    fn retry_table() {
        let throttled = provider(ProviderError::Throttled(Duration::ZERO));
        let transient = provider(ProviderError::Transient("502".into()));
        let full = provider(ProviderError::SubnetFull("s".into()));
        let rows = [
            (&throttled, Operation::AssignIps, true),
            (&transient, Operation::GetInstances, true),
            (&transient, Operation::UnassignIps, true),
            (&transient, Operation::AssignIps, false),
            (&transient, Operation::CreateInterface, false),
            (&full, Operation::GetSubnets, false),
        ];
        for (error, operation, want) in rows {
            assert_eq!(retryable(error, operation), want, "{error} in {operation}");
        }
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_honours_retry_after() {
        let policy = RetryPolicy {
            max_attempts: 5,
            base: Duration::from_millis(200),
            cap: Duration::from_secs(1),
        };
        let transient = provider(ProviderError::Transient("x".into()));
        let waits: Vec<u128> = (0..4)
            .map(|a| retry_backoff(policy, a, 0.999_999, &transient).as_millis())
            .collect();
        assert_eq!(waits, [199, 399, 799, 999]);
        assert_eq!(
            retry_backoff(policy, 0, 0.0, &transient),
            Duration::from_millis(100),
            "equal jitter: at least half"
        );
        let slow_down = provider(ProviderError::Throttled(Duration::from_secs(3)));
        assert_eq!(
            retry_backoff(policy, 0, 0.5, &slow_down),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn jitter_is_splitmix64() {
        // splitmix64's first outputs from state 0 (its reference sequence).
        let first = 0xe220_a839_7b1d_cdaf_u64 as f64 / (u64::MAX as f64 + 1.0);
        let second = 0x6e78_9e6a_a1b9_65f4_u64 as f64 / (u64::MAX as f64 + 1.0);
        assert!((jitter(1) - first).abs() < 1e-12, "{}", jitter(1));
        assert!((jitter(2) - second).abs() < 1e-12, "{}", jitter(2));
    }

    #[test]
    fn jitter_stays_in_the_unit_interval_and_varies() {
        let values: Vec<f64> = (1..100).map(jitter).collect();
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)));
        assert!(values.windows(2).all(|w| w[0] != w[1]));
    }

    #[test]
    fn failure_backoff_doubles_per_failure_up_to_the_cap() {
        let (first, cap) = (Duration::from_secs(1), Duration::from_secs(60));
        let waits: Vec<u64> = [1, 2, 3, 7, 30]
            .map(|n| failure_backoff(first, cap, n).as_secs())
            .to_vec();
        assert_eq!(waits, [1, 2, 4, 60, 60]);
    }
}
