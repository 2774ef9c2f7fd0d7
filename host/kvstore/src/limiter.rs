//! The operator's own etcd traffic kept under a rate: a token bucket on
//! tokio's clock (so tests can pause it). etcd is shared with every agent
//! of the cluster; a GC round over 100,000 keys must not starve them.

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

#[derive(Debug)]
pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    bucket: Mutex<Bucket>,
}

impl RateLimiter {
    /// `per_second` and `burst` must be positive (checked by the config).
    pub fn new(per_second: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            per_second,
            burst,
            bucket: Mutex::new(Bucket {
                tokens: burst,
                refilled: Instant::now(),
            }),
        }
    }

    /// Take one token, waiting for it if the bucket is empty. Waiters are
    /// served in turn (the lock is fair), so none starves.
    pub async fn acquire(&self) {
        let mut bucket = self.bucket.lock().await;
        let now = Instant::now();
        let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.per_second).min(self.burst);
        bucket.refilled = now;
        if bucket.tokens < 1.0 {
            let wait = (1.0 - bucket.tokens) / self.per_second;
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            bucket.tokens = 1.0;
            bucket.refilled = Instant::now();
        }
        bucket.tokens -= 1.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_then_the_rate() {
        let limiter = RateLimiter::new(10.0, 5);
        let start = Instant::now();
        for _ in 0..5 {
            limiter.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst is free");
        for _ in 0..10 {
            limiter.acquire().await;
        }
        let took = start.elapsed().as_secs_f64();
        assert!(
            (took - 1.0).abs() < 0.01,
            "10 more at 10/s take a second: {took}"
        );
    }
}
