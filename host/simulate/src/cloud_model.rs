//! [`CloudModel`]: what a real cloud adds around the mock provider's state
//! machine: each operation takes time (and takes effect halfway through), and the cloud keeps its own token
//! buckets, refusing a call with `throttled` (EC2's RequestLimitExceeded)
//! when its bucket is empty. With tokio's paused clock the latencies cost no
//! wall time, so a simulated hour runs in seconds.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use tokio::time::Instant;

use ipam_cloud::rate::RateLimits;
use ipam_cloud::{
    Assigned, CloudApi, CloudError, CreateInterfaceRequest, Instance, InstanceLimits, IpRequest,
    NetworkInterface, Operation, ProviderError, ProviderInfo, SecurityGroup, Subnet, Tag, Vpc,
};
use ipam_pool::rate_buckets::RateBuckets;

/// Milliseconds each operation takes (keyed by WIT names in a scenario
/// file; an unknown name is refused); unnamed ones take `default`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Latency {
    #[serde(default = "Latency::default_ms")]
    pub default_ms: u64,
    #[serde(default, deserialize_with = "operation_map")]
    pub operations: BTreeMap<Operation, u64>,
}

/// A map keyed by WIT operation names, each checked.
fn operation_map<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<Operation, u64>, D::Error> {
    BTreeMap::<String, u64>::deserialize(deserializer)?
        .into_iter()
        .map(|(name, ms)| match Operation::from_wit_name(&name) {
            Some(operation) => Ok((operation, ms)),
            None => Err(serde::de::Error::custom(format!(
                "unknown operation {name:?}; the operations are {}",
                Operation::ALL.map(Operation::wit_name).join(", ")
            ))),
        })
        .collect()
}

impl Latency {
    fn default_ms() -> u64 {
        100
    }

    /// Latencies seen from EC2 clients: Describe* ~0.1-0.2 s, assign and
    /// unassign ~0.3 s, create + attach + modify ~1.5 s, detach + delete ~1 s.
    pub fn ec2_like() -> Self {
        let operations = [
            (Operation::GetInstances, 200),
            (Operation::AssignIps, 300),
            (Operation::UnassignIps, 300),
            (Operation::CreateInterface, 1500),
            (Operation::DeleteInterface, 1000),
        ]
        .into();
        Self {
            default_ms: 150,
            operations,
        }
    }

    pub fn of(&self, operation: Operation) -> Duration {
        Duration::from_millis(
            self.operations
                .get(&operation)
                .copied()
                .unwrap_or(self.default_ms),
        )
    }
}

impl Default for Latency {
    fn default() -> Self {
        Self::ec2_like()
    }
}

/// Calls that reached the model, by operation, and how many it refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelCounts {
    pub calls: BTreeMap<Operation, u64>,
    pub throttled: BTreeMap<Operation, u64>,
}

pub struct CloudModel<C> {
    inner: C,
    latency: Latency,
    buckets: Mutex<RateBuckets>,
    counts: Mutex<ModelCounts>,
}

impl<C: CloudApi> CloudModel<C> {
    /// The cloud enforces `limits` (the client may keep to others).
    pub fn new(inner: C, latency: Latency, limits: RateLimits) -> Self {
        Self {
            inner,
            latency,
            buckets: Mutex::new(RateBuckets::new(limits, Instant::now().into_std())),
            counts: Mutex::new(ModelCounts::default()),
        }
    }

    pub fn inner(&self) -> &C {
        &self.inner
    }

    pub fn counts(&self) -> ModelCounts {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Admit the call or refuse it as throttled. All of an operation's
    /// tokens are taken together or none are.
    fn admit(&self, operation: Operation) -> Result<(), CloudError> {
        let admitted = self
            .buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(operation, Instant::now().into_std());
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        *counts.calls.entry(operation).or_default() += 1;
        admitted.map_err(|refused| {
            *counts.throttled.entry(operation).or_default() += 1;
            CloudError::Provider {
                provider: self.inner.info().name.clone(),
                error: ProviderError::Throttled(refused),
            }
        })
    }

    async fn call<T, Fut>(&self, operation: Operation, call: Fut) -> Result<T, CloudError>
    where
        Fut: std::future::Future<Output = Result<T, CloudError>>,
    {
        self.admit(operation)?;
        // The call takes effect halfway: a listing is as old as half its
        // latency when it arrives, as a real cloud's is.
        let half = self.latency.of(operation) / 2;
        tokio::time::sleep(half).await;
        let result = call.await;
        tokio::time::sleep(half).await;
        result
    }
}

#[async_trait]
impl<C: CloudApi> CloudApi for CloudModel<C> {
    fn info(&self) -> &ProviderInfo {
        self.inner.info()
    }

    async fn get_vpcs(&self) -> Result<Vec<Vpc>, CloudError> {
        self.call(Operation::GetVpcs, self.inner.get_vpcs()).await
    }

    async fn get_subnets(&self) -> Result<Vec<Subnet>, CloudError> {
        self.call(Operation::GetSubnets, self.inner.get_subnets())
            .await
    }

    async fn get_security_groups(&self) -> Result<Vec<SecurityGroup>, CloudError> {
        self.call(
            Operation::GetSecurityGroups,
            self.inner.get_security_groups(),
        )
        .await
    }

    async fn get_instances(&self, ids: &[String]) -> Result<Vec<Instance>, CloudError> {
        self.call(Operation::GetInstances, self.inner.get_instances(ids))
            .await
    }

    async fn get_detached_interfaces(
        &self,
        tags: &[Tag],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.call(
            Operation::GetDetachedInterfaces,
            self.inner.get_detached_interfaces(tags),
        )
        .await
    }

    async fn get_instance_limits(&self, instance_type: &str) -> Result<InstanceLimits, CloudError> {
        self.call(
            Operation::GetInstanceLimits,
            self.inner.get_instance_limits(instance_type),
        )
        .await
    }

    async fn create_interface(
        &self,
        request: &CreateInterfaceRequest,
    ) -> Result<NetworkInterface, CloudError> {
        self.call(
            Operation::CreateInterface,
            self.inner.create_interface(request),
        )
        .await
    }

    async fn delete_interface(&self, interface_id: &str) -> Result<(), CloudError> {
        self.call(
            Operation::DeleteInterface,
            self.inner.delete_interface(interface_id),
        )
        .await
    }

    async fn assign_ips(
        &self,
        interface_id: &str,
        request: IpRequest,
    ) -> Result<Assigned, CloudError> {
        self.call(
            Operation::AssignIps,
            self.inner.assign_ips(interface_id, request),
        )
        .await
    }

    async fn unassign_ips(
        &self,
        interface_id: &str,
        addresses: &[std::net::Ipv4Addr],
        prefixes: &[ipam_cloud::Ipv4Net],
    ) -> Result<(), CloudError> {
        self.call(
            Operation::UnassignIps,
            self.inner.unassign_ips(interface_id, addresses, prefixes),
        )
        .await
    }
}
