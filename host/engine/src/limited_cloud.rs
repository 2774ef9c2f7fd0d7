//! [`LimitedCloud`]: a [`CloudApi`] in front of another that keeps to the
//! cloud's rate model ([`RateLimits`]: buckets, what each operation costs,
//! retries) and retries what may be retried. One `LimitedCloud` wraps one
//! provider (one account and region), so its buckets are shared by every node
//! that provider serves. Which model applies is the per-cloud crate's
//! knowledge (`ipam-clouds`); the arithmetic is the pure core's. Every
//! attempt is recorded in the metrics (Cilium's cloud API families labelled
//! with the cloud calls the provider declares), throttling is told at info
//! level at most once a minute per operation ([`throttle_log`]), and each
//! call's final outcome feeds the `/readyz` problems ([`CloudProblems`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ipam_cloud::rate::{RateLimits, RetryPolicy};
use ipam_cloud::{
    Assigned, CloudApi, CloudError, CreateInterfaceRequest, Instance, InstanceLimits, IpRequest,
    Ipv4Net, NetworkInterface, Operation, ProviderError, ProviderInfo, SecurityGroup, Subnet, Tag,
    Vpc,
};
use ipam_pool::backoff::{jitter, retry_backoff, retryable};
use ipam_pool::rate_buckets::RateBuckets;
use tokio::time::Instant;

use crate::metrics::{operation_labels, Metrics};
use crate::problems::CloudProblems;

pub mod throttle_log;

use throttle_log::{Summary, ThrottleLog};

pub struct LimitedCloud<C> {
    inner: C,
    buckets: Mutex<RateBuckets>,
    /// The rate model's retry policy (read on every failure, without the lock).
    retry: RetryPolicy,
    /// Counts retries, for the jitter sequence.
    retries: AtomicU64,
    /// Where call durations and rate-limit waits are recorded.
    metrics: Option<Arc<Metrics>>,
    /// Each operation's label in Cilium's cloud API families.
    cloud_api_labels: BTreeMap<Operation, String>,
    /// Where final failures worth a `/readyz` line go.
    problems: Option<Arc<CloudProblems>>,
    throttles: Mutex<ThrottleLog>,
}

impl<C: CloudApi> LimitedCloud<C> {
    pub fn new(inner: C, limits: RateLimits) -> Self {
        let cloud_api_labels = operation_labels(inner.info().rate_model.as_ref());
        Self {
            inner,
            retry: limits.retry,
            buckets: Mutex::new(RateBuckets::new(limits, Instant::now().into_std())),
            retries: AtomicU64::new(0),
            metrics: None,
            cloud_api_labels,
            problems: None,
            throttles: Mutex::new(ThrottleLog::default()),
        }
    }

    /// Report each call's final failure worth telling (and clear it on the
    /// operation's next success) in `problems`.
    pub fn with_problems(mut self, problems: Arc<CloudProblems>) -> Self {
        self.problems = Some(problems);
        self
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
    fn reserve(&self, operation: Operation) -> Duration {
        let now = Instant::now().into_std();
        self.buckets().reserve(operation, now)
    }

    fn buckets(&self) -> std::sync::MutexGuard<'_, RateBuckets> {
        // A poisoned lock still holds valid buckets (updates are single
        // assignments); never let it switch rate limiting off.
        self.buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How long to wait before retrying after `error` on attempt `attempt`.
    fn backoff(&self, attempt: u32, error: &CloudError) -> Duration {
        let n = self.retries.fetch_add(1, Ordering::Relaxed) + 1;
        retry_backoff(self.retry, attempt, jitter(n), error)
    }

    async fn limited<T, F, Fut>(&self, operation: Operation, call: F) -> Result<T, CloudError>
    where
        F: Fn() -> Fut + Send + Sync,
        Fut: Future<Output = Result<T, CloudError>> + Send,
        T: Send,
    {
        let mut attempt = 0;
        loop {
            let wait = self.reserve(operation);
            if !wait.is_zero() {
                tracing::debug!(%operation, ?wait, "waiting for the cloud's rate limit");
                tokio::time::sleep(wait).await;
            }
            self.observe_wait(operation, wait);
            let started = Instant::now();
            let result = call().await;
            self.observe_call(operation, &result, started.elapsed());
            let throttled = matches!(
                result.as_ref().err().and_then(CloudError::provider_error),
                Some(ProviderError::Throttled(_))
            );
            match result {
                Err(error)
                    if attempt + 1 < self.retry.max_attempts && retryable(&error, operation) =>
                {
                    let backoff = self.backoff(attempt, &error);
                    tracing::debug!(%operation, attempt, ?backoff, %error, "retrying");
                    if throttled {
                        self.note_throttle(operation, backoff);
                    }
                    tokio::time::sleep(backoff).await;
                    attempt += 1;
                }
                result => {
                    self.settled(operation, &result, throttled);
                    return result;
                }
            }
        }
    }

    fn observe_wait(&self, operation: Operation, wait: Duration) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        metrics.observe_rate_limit_wait(operation, wait);
        if let Some(cloud_api) = &metrics.cloud_api {
            cloud_api.observe_wait(self.cloud_api_label(operation), wait);
        }
    }

    fn observe_call<T>(
        &self,
        operation: Operation,
        result: &Result<T, CloudError>,
        took: Duration,
    ) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        let code = result
            .as_ref()
            .map_or_else(CloudError::response_code, |_| "ok");
        metrics.observe_api_call(operation, code, took);
        if let Some(cloud_api) = &metrics.cloud_api {
            cloud_api.observe_call(self.cloud_api_label(operation), result.is_ok(), took);
        }
    }

    fn cloud_api_label(&self, operation: Operation) -> &str {
        self.cloud_api_labels
            .get(&operation)
            .map_or(operation.wit_name(), String::as_str)
    }

    /// The call's final outcome: the throttling summary, the problems.
    fn settled<T>(&self, operation: Operation, result: &Result<T, CloudError>, throttled: bool) {
        let now = Instant::now();
        let line = {
            let mut throttles = self.throttles.lock().unwrap_or_else(|p| p.into_inner());
            match throttled {
                true => throttles.throttled(operation, Duration::ZERO, now),
                false => throttles.settled(operation, now),
            }
        };
        if let Some(line) = line {
            log_throttling(&line);
        }
        if let Some(problems) = &self.problems {
            match result {
                Ok(_) => problems.succeeded(operation),
                Err(error) => problems.failed(operation, error, now),
            }
        }
    }

    /// A throttled attempt, retried after `backoff`.
    fn note_throttle(&self, operation: Operation, backoff: Duration) {
        let line = self
            .throttles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .throttled(operation, backoff, Instant::now());
        if let Some(line) = line {
            log_throttling(&line);
        }
    }
}

fn log_throttling(line: &Summary) {
    tracing::info!(
        operation = %line.operation,
        throttled = line.count,
        waited_seconds = line.waited.as_secs_f64(),
        "{}",
        line.message()
    );
}

#[async_trait]
impl<C: CloudApi> CloudApi for LimitedCloud<C> {
    fn info(&self) -> &ProviderInfo {
        self.inner.info()
    }

    async fn get_vpcs(&self) -> Result<Vec<Vpc>, CloudError> {
        self.limited(Operation::GetVpcs, || self.inner.get_vpcs())
            .await
    }

    async fn get_subnets(&self) -> Result<Vec<Subnet>, CloudError> {
        self.limited(Operation::GetSubnets, || self.inner.get_subnets())
            .await
    }

    async fn get_security_groups(&self) -> Result<Vec<SecurityGroup>, CloudError> {
        self.limited(Operation::GetSecurityGroups, || {
            self.inner.get_security_groups()
        })
        .await
    }

    async fn get_instances(&self, ids: &[String]) -> Result<Vec<Instance>, CloudError> {
        self.limited(Operation::GetInstances, || self.inner.get_instances(ids))
            .await
    }

    async fn get_detached_interfaces(
        &self,
        tags: &[Tag],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.limited(Operation::GetDetachedInterfaces, || {
            self.inner.get_detached_interfaces(tags)
        })
        .await
    }

    async fn get_instance_limits(&self, instance_type: &str) -> Result<InstanceLimits, CloudError> {
        self.limited(Operation::GetInstanceLimits, || {
            self.inner.get_instance_limits(instance_type)
        })
        .await
    }

    async fn create_interface(
        &self,
        request: &CreateInterfaceRequest,
    ) -> Result<NetworkInterface, CloudError> {
        self.limited(Operation::CreateInterface, || {
            self.inner.create_interface(request)
        })
        .await
    }

    async fn delete_interface(&self, interface_id: &str) -> Result<(), CloudError> {
        self.limited(Operation::DeleteInterface, || {
            self.inner.delete_interface(interface_id)
        })
        .await
    }

    async fn assign_ips(
        &self,
        interface_id: &str,
        request: IpRequest,
    ) -> Result<Assigned, CloudError> {
        self.limited(Operation::AssignIps, || {
            self.inner.assign_ips(interface_id, request)
        })
        .await
    }

    async fn unassign_ips(
        &self,
        interface_id: &str,
        addresses: &[Ipv4Addr],
        prefixes: &[Ipv4Net],
    ) -> Result<(), CloudError> {
        self.limited(Operation::UnassignIps, || {
            self.inner.unassign_ips(interface_id, addresses, prefixes)
        })
        .await
    }
}

#[cfg(test)]
mod tests;
