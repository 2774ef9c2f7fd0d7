//! [`LimitedCloud`]: a [`CloudApi`] in front of another that keeps to the
//! cloud's per-operation rate limits and retries what may be retried. One
//! `LimitedCloud` wraps one provider (one account and region), so its buckets
//! are shared by every node that provider serves. Cilium uses one global
//! bucket for every call (4/s, burst 20); EC2 documents one per kind of
//! operation (design.md section 4), which these mirror.

mod token_bucket;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

pub use token_bucket::{BucketConfig, TokenBucket};

use crate::cloud::{
    Assigned, CloudApi, CloudError, CreateInterfaceRequest, Instance, IpRequest, Limits,
    NetworkInterface, ProviderError, ProviderInfo, SecurityGroup, Subnet, Tag, Vpc,
};
use crate::metrics::Metrics;

/// The kinds of cloud call that have a bucket of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Describe,
    Mutate,
    Attach,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubled each time, then jittered.
    pub base: Duration,
    pub cap: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitsConfig {
    pub describe: BucketConfig,
    pub mutate: BucketConfig,
    pub attach: BucketConfig,
    pub retry: RetryPolicy,
}

impl LimitsConfig {
    /// EC2's documented buckets: Describe* burst 100, 20/s; mutating calls
    /// burst 100, 5/s; attach and detach burst 50, 5/s.
    pub fn aws() -> Self {
        Self {
            describe: BucketConfig {
                burst: 100.0,
                per_second: 20.0,
            },
            mutate: BucketConfig {
                burst: 100.0,
                per_second: 5.0,
            },
            attach: BucketConfig {
                burst: 50.0,
                per_second: 5.0,
            },
            retry: RetryPolicy {
                max_attempts: 5,
                base: Duration::from_millis(200),
                cap: Duration::from_secs(10),
            },
        }
    }
}

/// What one operation of the WIT costs in cloud calls of each kind: a
/// provider's create-interface is create + attach + modify-attribute, its
/// delete-interface detach + delete.
pub fn cost(operation: &str) -> &'static [(Kind, f64)] {
    match operation {
        "create-interface" => &[(Kind::Mutate, 2.0), (Kind::Attach, 1.0)],
        "delete-interface" => &[(Kind::Mutate, 1.0), (Kind::Attach, 1.0)],
        "assign-ips" | "unassign-ips" => &[(Kind::Mutate, 1.0)],
        _ => &[(Kind::Describe, 1.0)],
    }
}

/// Whether an error may be retried: a throttled call did not happen, so it
/// always may; a transient failure, timeout or host error may have happened,
/// so only an idempotent operation is repeated.
fn retryable(error: &CloudError, idempotent: bool) -> bool {
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
        | CloudError::Host { .. } => idempotent,
        _ => false,
    }
}

pub struct LimitedCloud<C> {
    inner: C,
    config: LimitsConfig,
    buckets: Mutex<[TokenBucket; 3]>,
    seed: AtomicU64,
    /// Where call durations and rate-limit waits are recorded.
    metrics: Option<Arc<Metrics>>,
}

impl<C: CloudApi> LimitedCloud<C> {
    pub fn new(inner: C, config: LimitsConfig) -> Self {
        let now = Instant::now();
        let buckets = [
            TokenBucket::new(config.describe, now),
            TokenBucket::new(config.mutate, now),
            TokenBucket::new(config.attach, now),
        ];
        Self {
            inner,
            config,
            buckets: Mutex::new(buckets),
            seed: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
            metrics: None,
        }
    }

    /// Record every attempt's duration and response code, and every wait
    /// for a bucket, in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    pub fn inner(&self) -> &C {
        &self.inner
    }

    /// Reserve this operation's tokens; how long to wait before calling.
    fn reserve(&self, operation: &str) -> Duration {
        let now = Instant::now();
        // A poisoned lock still holds valid buckets (updates are single
        // assignments); never let it switch rate limiting off.
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        cost(operation)
            .iter()
            .map(|(kind, tokens)| {
                let index = match kind {
                    Kind::Describe => 0,
                    Kind::Mutate => 1,
                    Kind::Attach => 2,
                };
                buckets[index].reserve(*tokens, now)
            })
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// A number in [0, 1) (splitmix64): enough to spread retries apart.
    fn jitter(&self) -> f64 {
        let mut z = self
            .seed
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as f64 / (u64::MAX as f64 + 1.0)
    }

    /// Exponential backoff with equal jitter, never shorter than the
    /// provider's retry-after.
    fn backoff(&self, attempt: u32, error: &CloudError) -> Duration {
        let retry = self.config.retry;
        let exponential = retry
            .base
            .saturating_mul(2u32.saturating_pow(attempt))
            .min(retry.cap);
        let jittered = exponential.mul_f64(0.5 + 0.5 * self.jitter());
        match error {
            CloudError::Provider {
                error: ProviderError::Throttled(after),
                ..
            } => jittered.max(*after),
            _ => jittered,
        }
    }

    async fn limited<T, F, Fut>(
        &self,
        operation: &'static str,
        idempotent: bool,
        call: F,
    ) -> Result<T, CloudError>
    where
        F: Fn() -> Fut + Send + Sync,
        Fut: Future<Output = Result<T, CloudError>> + Send,
        T: Send,
    {
        let mut attempt = 0;
        loop {
            let wait = self.reserve(operation);
            if !wait.is_zero() {
                tracing::debug!(operation, ?wait, "waiting for the cloud's rate limit");
                tokio::time::sleep(wait).await;
            }
            if let Some(metrics) = &self.metrics {
                metrics.observe_rate_limit_wait(operation, wait);
            }
            let started = Instant::now();
            let result = call().await;
            if let Some(metrics) = &self.metrics {
                let code = result
                    .as_ref()
                    .map_or_else(CloudError::response_code, |_| "ok");
                metrics.observe_api_call(operation, code, started.elapsed());
            }
            match result {
                Err(error)
                    if attempt + 1 < self.config.retry.max_attempts
                        && retryable(&error, idempotent) =>
                {
                    let backoff = self.backoff(attempt, &error);
                    tracing::debug!(operation, attempt, ?backoff, %error, "retrying");
                    tokio::time::sleep(backoff).await;
                    attempt += 1;
                }
                result => return result,
            }
        }
    }
}

#[async_trait]
impl<C: CloudApi> CloudApi for LimitedCloud<C> {
    fn info(&self) -> &ProviderInfo {
        self.inner.info()
    }

    async fn get_vpcs(&self) -> Result<Vec<Vpc>, CloudError> {
        self.limited("get-vpcs", true, || self.inner.get_vpcs())
            .await
    }

    async fn get_subnets(&self) -> Result<Vec<Subnet>, CloudError> {
        self.limited("get-subnets", true, || self.inner.get_subnets())
            .await
    }

    async fn get_security_groups(&self) -> Result<Vec<SecurityGroup>, CloudError> {
        self.limited("get-security-groups", true, || {
            self.inner.get_security_groups()
        })
        .await
    }

    async fn get_instances(&self, ids: &[String]) -> Result<Vec<Instance>, CloudError> {
        self.limited("get-instances", true, || self.inner.get_instances(ids))
            .await
    }

    async fn get_detached_interfaces(
        &self,
        tags: &[Tag],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.limited("get-detached-interfaces", true, || {
            self.inner.get_detached_interfaces(tags)
        })
        .await
    }

    async fn get_instance_limits(&self, instance_type: &str) -> Result<Limits, CloudError> {
        self.limited("get-instance-limits", true, || {
            self.inner.get_instance_limits(instance_type)
        })
        .await
    }

    async fn create_interface(
        &self,
        request: &CreateInterfaceRequest,
    ) -> Result<NetworkInterface, CloudError> {
        self.limited("create-interface", false, || {
            self.inner.create_interface(request)
        })
        .await
    }

    async fn delete_interface(&self, interface_id: &str) -> Result<(), CloudError> {
        self.limited("delete-interface", true, || {
            self.inner.delete_interface(interface_id)
        })
        .await
    }

    async fn assign_ips(
        &self,
        interface_id: &str,
        request: IpRequest,
    ) -> Result<Assigned, CloudError> {
        self.limited("assign-ips", false, || {
            self.inner.assign_ips(interface_id, request)
        })
        .await
    }

    async fn unassign_ips(
        &self,
        interface_id: &str,
        addresses: &[String],
        prefixes: &[String],
    ) -> Result<(), CloudError> {
        self.limited("unassign-ips", true, || {
            self.inner.unassign_ips(interface_id, addresses, prefixes)
        })
        .await
    }
}

#[cfg(test)]
mod tests;
