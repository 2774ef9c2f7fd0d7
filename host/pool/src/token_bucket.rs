//! A token bucket that reserves: taking tokens never blocks the bucket, it
//! says how long the caller must wait before its call, so the lock around a
//! bucket is held for arithmetic only, never across a wait or a cloud call.

use std::time::{Duration, Instant};

use ipam_cloud::rate::BucketConfig;

#[derive(Debug, Clone)]
pub struct TokenBucket {
    config: BucketConfig,
    /// May go below zero: tokens already promised to waiting callers.
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    pub fn new(config: BucketConfig, now: Instant) -> Self {
        Self {
            config,
            tokens: config.burst,
            updated: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.config.per_second).min(self.config.burst);
        self.updated = now;
    }

    /// Take `cost` tokens if they are there now (a cloud refusing a call, as
    /// EC2 does with RequestLimitExceeded); else how long until they are.
    pub fn try_take(&mut self, cost: f64, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= cost || self.config.per_second <= 0.0 {
            self.tokens -= cost;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (cost - self.tokens) / self.config.per_second,
            ))
        }
    }

    /// Take `cost` tokens; the wait before they are really there.
    pub fn reserve(&mut self, cost: f64, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= cost;
        if self.tokens >= 0.0 || self.config.per_second <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.config.per_second)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(burst: f64, per_second: f64, now: Instant) -> TokenBucket {
        TokenBucket::new(BucketConfig { burst, per_second }, now)
    }

    #[test]
    fn try_take_refuses_without_debt() {
        let t0 = Instant::now();
        let mut bucket = bucket(2.0, 4.0, t0);
        assert_eq!(bucket.try_take(2.0, t0), Ok(()));
        assert_eq!(bucket.try_take(1.0, t0), Err(Duration::from_millis(250)));
        assert_eq!(
            bucket.try_take(1.0, t0),
            Err(Duration::from_millis(250)),
            "a refusal takes nothing"
        );
        assert_eq!(
            bucket.try_take(1.0, t0 + Duration::from_millis(250)),
            Ok(())
        );
    }

    #[test]
    fn try_take_waits_only_for_the_missing_part() {
        let t0 = Instant::now();
        let mut bucket = bucket(2.0, 4.0, t0);
        assert_eq!(bucket.try_take(1.5, t0), Ok(()));
        assert_eq!(
            bucket.try_take(1.0, t0),
            Err(Duration::from_millis(125)),
            "half a token left: half a token to wait for"
        );
    }

    #[test]
    fn burst_then_rate() {
        let t0 = Instant::now();
        let mut bucket = bucket(3.0, 2.0, t0);
        let waits: Vec<Duration> = (0..5).map(|_| bucket.reserve(1.0, t0)).collect();
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(
            ms,
            vec![0, 0, 0, 500, 1000],
            "three at once, then one every half second"
        );
    }

    #[test]
    fn refills_up_to_the_burst_only() {
        let t0 = Instant::now();
        let mut bucket = bucket(2.0, 10.0, t0);
        assert_eq!(bucket.reserve(2.0, t0), Duration::ZERO);
        let later = t0 + Duration::from_secs(60);
        assert_eq!(bucket.reserve(2.0, later), Duration::ZERO);
        assert_eq!(
            bucket.reserve(1.0, later),
            Duration::from_millis(100),
            "a minute idle does not bank more than the burst"
        );
    }

    #[test]
    fn a_cost_above_one_waits_for_all_its_tokens() {
        let t0 = Instant::now();
        let mut bucket = bucket(1.0, 4.0, t0);
        assert_eq!(bucket.reserve(3.0, t0), Duration::from_millis(500));
    }
}
