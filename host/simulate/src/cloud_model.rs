//! [`CloudModel`]: what a real cloud adds around the mock provider's state
//! machine: each operation takes time (and takes effect halfway through), and
//! the cloud keeps its own throttling table ([`CloudTable`]: a bucket per
//! API on EC2, read/write/delete buckets on ARM), refusing an operation with
//! `throttled` (EC2's RequestLimitExceeded, ARM's 429) when one of its API
//! calls finds its bucket empty. The table is the cloud's, given apart from
//! the limits the engine keeps to. With tokio's paused clock the latencies
//! cost no wall time, so a simulated hour runs in seconds.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use tokio::time::Instant;

use ipam_cloud::{
    Assigned, CloudApi, CloudError, CreateInterfaceRequest, Instance, InstanceLimits, IpRequest,
    NetworkInterface, Operation, ProviderError, ProviderInfo, SecurityGroup, Subnet, Tag, Vpc,
};

use crate::cloud_table::{CloudTable, Refusal, TableBuckets};

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

/// Calls that reached the model, by operation, how many it refused as
/// throttled, and the API calls the cloud made (admitted) by API name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelCounts {
    pub calls: BTreeMap<Operation, u64>,
    pub throttled: BTreeMap<Operation, u64>,
    /// Per API: calls that happened, those of a throttled operation before
    /// the refused one included.
    pub api_calls: BTreeMap<String, u64>,
}

impl ModelCounts {
    /// API calls that happened, in all and of those that change the cloud
    /// (as `table` marks them).
    pub fn api_totals(&self, table: &CloudTable) -> (u64, u64) {
        let all = self.api_calls.values().sum();
        let mutating = self
            .api_calls
            .iter()
            .filter(|(name, _)| table.api(name).is_some_and(|a| a.mutates))
            .map(|(_, n)| n)
            .sum();
        (all, mutating)
    }
}

pub struct CloudModel<C> {
    inner: C,
    /// The inner provider's, without the capabilities the table marks
    /// unsupported (a provider for that cloud would not declare them).
    info: ProviderInfo,
    latency: Latency,
    buckets: Mutex<TableBuckets>,
    counts: Mutex<ModelCounts>,
}

impl<C: CloudApi> CloudModel<C> {
    /// The cloud enforces `table` (the client keeps to limits of its own).
    pub fn new(inner: C, latency: Latency, table: CloudTable) -> Self {
        let mut info = inner.info().clone();
        let capabilities = &mut info.capabilities;
        capabilities.create_interface &= table.supports(Operation::CreateInterface);
        capabilities.delete_interface &= table.supports(Operation::DeleteInterface);
        Self {
            inner,
            info,
            latency,
            buckets: Mutex::new(TableBuckets::new(table, Instant::now().into_std())),
            counts: Mutex::new(ModelCounts::default()),
        }
    }

    pub fn inner(&self) -> &C {
        &self.inner
    }

    /// The table this cloud enforces.
    pub fn table(&self) -> CloudTable {
        self.buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .table()
            .clone()
    }

    pub fn counts(&self) -> ModelCounts {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Make the operation's API calls in order or refuse it: throttled at
    /// the first call whose bucket is empty (the calls before it happened
    /// and keep their tokens), invalid-argument when the cloud does not
    /// support it. A refused operation never reaches the inner cloud.
    fn admit(&self, operation: Operation) -> Result<(), CloudError> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let admitted = buckets.admit(operation, Instant::now().into_std());
        let made = match &admitted {
            Ok(()) => usize::MAX,
            Err(Refusal::Throttled { made, .. }) => *made,
            Err(Refusal::Unsupported) => 0,
        };
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        *counts.calls.entry(operation).or_default() += 1;
        for api in buckets.table().calls(operation).take(made) {
            *counts.api_calls.entry(api.name.clone()).or_default() += 1;
        }
        let error = match admitted {
            Ok(()) => return Ok(()),
            Err(Refusal::Throttled { retry_after, .. }) => {
                *counts.throttled.entry(operation).or_default() += 1;
                ProviderError::Throttled(retry_after)
            }
            Err(Refusal::Unsupported) => ProviderError::InvalidArgument(format!(
                "{operation} is not supported by {}",
                buckets.table().name()
            )),
        };
        Err(CloudError::Provider {
            provider: self.info.name.clone(),
            error,
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
        &self.info
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

#[cfg(test)]
mod tests {
    use ipam_fake_cloud::{standard_instance, standard_subnet, FakeCloud};

    use super::*;
    use crate::cloud_table::EC2_TABLE;

    /// No latency: the paused clock stands still, so no bucket refills
    /// between calls.
    fn instant() -> Latency {
        Latency {
            default_ms: 0,
            operations: BTreeMap::new(),
        }
    }

    fn create(node: usize) -> CreateInterfaceRequest {
        CreateInterfaceRequest {
            instance_id: standard_instance(node),
            index: 1,
            subnet_id: standard_subnet(0),
            security_groups: Vec::new(),
            description: "test".into(),
            tags: Vec::new(),
            delete_on_termination: true,
            ipv4_count: 1,
            use_prefixes: false,
        }
    }

    fn throttled_after(result: Result<NetworkInterface, CloudError>) -> Option<Duration> {
        match result {
            Err(CloudError::Provider {
                error: ProviderError::Throttled(wait),
                ..
            }) => Some(wait),
            _ => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_attach_bucket_refuses_the_create_with_its_create_call_spent() {
        // EC2's table with an attach bucket of one token.
        let text = EC2_TABLE.replace(
            "AttachNetworkInterface: {burst: 50, per-second: 5}",
            "AttachNetworkInterface: {burst: 1, per-second: 5}",
        );
        let table = CloudTable::parse(&text).unwrap();
        let model = CloudModel::new(FakeCloud::standard(3), instant(), table);
        model.create_interface(&create(0)).await.unwrap();
        assert_eq!(
            throttled_after(model.create_interface(&create(1)).await),
            Some(Duration::from_millis(200)),
            "the attach bucket has its next token in 1/5 s"
        );
        assert_eq!(
            model.inner().calls(Operation::CreateInterface),
            1,
            "the refused create never reached the cloud"
        );
        assert!(model
            .inner()
            .instance(&standard_instance(1))
            .is_some_and(|i| i.interfaces.len() == 1));
        let counts = model.counts();
        assert_eq!(counts.calls[&Operation::CreateInterface], 2);
        assert_eq!(counts.throttled[&Operation::CreateInterface], 1);
        let api = |name: &str| counts.api_calls.get(name).copied().unwrap_or(0);
        assert_eq!(
            api("CreateNetworkInterface"),
            2,
            "the refused one's happened"
        );
        assert_eq!(api("AttachNetworkInterface"), 1);
        assert_eq!(api("ModifyNetworkInterfaceAttribute"), 1);

        // Other APIs have buckets of their own; the attach refills.
        model.get_instances(&[]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        model.create_interface(&create(2)).await.unwrap();
        let counts = model.counts();
        let api = |name: &str| counts.api_calls.get(name).copied().unwrap_or(0);
        assert_eq!(api("DescribeInstances"), 1);
        // One listing, and the taken-index check of each of the three creates.
        assert_eq!(api("DescribeNetworkInterfaces"), 4);
        assert_eq!(api("CreateNetworkInterface"), 3);
        assert_eq!(api("AttachNetworkInterface"), 2);
        let table = model.table();
        assert_eq!(counts.api_totals(&table), (12, 7), "(all, mutating)");
    }

    #[tokio::test(start_paused = true)]
    async fn arm_refuses_interface_creation_and_counts_three_calls_per_assign() {
        let model = CloudModel::new(
            FakeCloud::standard(1),
            instant(),
            CloudTable::arm().unwrap(),
        );
        let refused = model.create_interface(&create(0)).await.unwrap_err();
        assert_eq!(refused.response_code(), "invalid-argument", "{refused}");
        assert_eq!(model.inner().calls(Operation::CreateInterface), 0);
        let instance = model.get_instances(&[]).await.unwrap().remove(0);
        let primary = &instance.interfaces[0].id;
        model
            .assign_ips(primary, IpRequest::Addresses(2))
            .await
            .unwrap();
        let counts = model.counts();
        assert_eq!(counts.throttled.values().sum::<u64>(), 0);
        assert_eq!(counts.api_calls["NetworkInterfaces_Get"], 1);
        assert_eq!(counts.api_calls["NetworkInterfaces_CreateOrUpdate"], 1);
        assert_eq!(counts.api_calls["AzureAsyncOperation_Get"], 1);
        assert_eq!(counts.api_totals(&model.table()), (5, 1));
    }
}
