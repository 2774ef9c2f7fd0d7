//! A cloud that reads from the real one and changes nothing: every read is
//! passed on (and counted), every mutating operation is recorded as a
//! [`PlannedCall`] and answered as the cloud would answer a success, with
//! addresses no listing showed ([`FreeAddresses`]), so the engine goes on
//! planning from the state the change would leave. Nothing mutating is ever
//! passed to the real cloud: there is no code path that does.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use ipam_cloud::{
    Assigned, CloudApi, CloudError, CreateInterfaceRequest, Instance, InstanceLimits, IpRequest,
    Ipv4Net, NetworkInterface, Operation, ProviderError, ProviderInfo, SecurityGroup, Subnet, Tag,
    Vpc,
};

use super::free_addresses::FreeAddresses;

/// A change the plan would make, as the engine asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCall {
    pub operation: Operation,
    /// The interface acted on; for a create, the made-up id the plan gave it
    /// (`planned-N`).
    pub interface: String,
    pub subnet: Option<String>,
    /// Addresses and /28 prefixes assigned, unassigned, or created with.
    pub addresses: u32,
    pub prefixes: u32,
}

/// Prefix of the ids the dry run gives interfaces it pretends to create.
pub const PLANNED_INTERFACE_PREFIX: &str = "planned-";

#[derive(Default)]
struct Ledger {
    free: FreeAddresses,
    /// Subnet id: its CIDR and VPC, from the listing.
    subnets: BTreeMap<String, (Ipv4Net, String)>,
    /// Interface id: its subnet, from the listings and the planned creates.
    interface_subnets: BTreeMap<String, String>,
    calls: Vec<PlannedCall>,
    reads: BTreeMap<Operation, u32>,
    created: u32,
}

impl Ledger {
    fn saw_interface(&mut self, interface: &NetworkInterface) {
        self.free.taken(
            std::iter::once(interface.primary_ip).chain(interface.addresses.iter().copied()),
        );
        self.free.taken_prefixes(&interface.prefixes);
        self.interface_subnets
            .insert(interface.id.clone(), interface.subnet_id.clone());
    }

    fn subnet(&self, id: &str) -> Option<(Ipv4Net, String)> {
        self.subnets.get(id).cloned()
    }
}

pub struct DryRunCloud {
    inner: Arc<dyn CloudApi>,
    ledger: Mutex<Ledger>,
}

impl DryRunCloud {
    pub fn new(inner: Arc<dyn CloudApi>) -> Self {
        Self {
            inner,
            ledger: Mutex::new(Ledger::default()),
        }
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The changes recorded since the last call, in order.
    pub fn take_calls(&self) -> Vec<PlannedCall> {
        std::mem::take(&mut self.ledger().calls)
    }

    /// Reads passed to the real cloud so far, by operation.
    pub fn reads(&self) -> BTreeMap<Operation, u32> {
        self.ledger().reads.clone()
    }

    fn read(&self, operation: Operation) {
        *self.ledger().reads.entry(operation).or_default() += 1;
    }

    fn subnet_full(&self, subnet: &str, asked: String) -> CloudError {
        CloudError::Provider {
            provider: self.inner.info().name.clone(),
            error: ProviderError::SubnetFull(format!(
                "planned: subnet {subnet} has no {asked} left that the listing did not show in use"
            )),
        }
    }

    fn not_found(&self, what: String) -> CloudError {
        CloudError::Provider {
            provider: self.inner.info().name.clone(),
            error: ProviderError::NotFound(what),
        }
    }
}

/// Addresses and prefixes a request asks for, counted.
fn counts(request: IpRequest) -> (u32, u32) {
    match request {
        IpRequest::Addresses(n) => (n, 0),
        IpRequest::Prefixes(n) => (0, n),
    }
}

/// Hand out what `request` asks from the subnet, or nothing.
fn hand_out(
    free: &mut FreeAddresses,
    cidr: Ipv4Net,
    request: IpRequest,
) -> Option<(Vec<Ipv4Addr>, Vec<Ipv4Net>)> {
    match request {
        IpRequest::Addresses(n) => free.addresses(cidr, n).map(|a| (a, Vec::new())),
        IpRequest::Prefixes(n) => free.prefixes(cidr, n).map(|p| (Vec::new(), p)),
    }
}

#[async_trait]
impl CloudApi for DryRunCloud {
    fn info(&self) -> &ProviderInfo {
        self.inner.info()
    }

    async fn get_vpcs(&self) -> Result<Vec<Vpc>, CloudError> {
        self.read(Operation::GetVpcs);
        self.inner.get_vpcs().await
    }

    async fn get_subnets(&self) -> Result<Vec<Subnet>, CloudError> {
        self.read(Operation::GetSubnets);
        let subnets = self.inner.get_subnets().await?;
        let mut ledger = self.ledger();
        for subnet in &subnets {
            ledger
                .subnets
                .insert(subnet.id.clone(), (subnet.cidr, subnet.vpc_id.clone()));
        }
        Ok(subnets)
    }

    async fn get_security_groups(&self) -> Result<Vec<SecurityGroup>, CloudError> {
        self.read(Operation::GetSecurityGroups);
        self.inner.get_security_groups().await
    }

    async fn get_instances(&self, ids: &[String]) -> Result<Vec<Instance>, CloudError> {
        self.read(Operation::GetInstances);
        let instances = self.inner.get_instances(ids).await?;
        let mut ledger = self.ledger();
        for interface in instances.iter().flat_map(|i| &i.interfaces) {
            ledger.saw_interface(interface);
        }
        Ok(instances)
    }

    async fn get_detached_interfaces(
        &self,
        tags: &[Tag],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.read(Operation::GetDetachedInterfaces);
        let interfaces = self.inner.get_detached_interfaces(tags).await?;
        let mut ledger = self.ledger();
        for interface in &interfaces {
            ledger.saw_interface(interface);
        }
        Ok(interfaces)
    }

    async fn get_instance_limits(&self, instance_type: &str) -> Result<InstanceLimits, CloudError> {
        self.read(Operation::GetInstanceLimits);
        self.inner.get_instance_limits(instance_type).await
    }

    async fn create_interface(
        &self,
        request: &CreateInterfaceRequest,
    ) -> Result<NetworkInterface, CloudError> {
        let mut ledger = self.ledger();
        let Some((cidr, vpc_id)) = ledger.subnet(&request.subnet_id) else {
            return Err(self.not_found(format!("subnet {}", request.subnet_id)));
        };
        let ask = match request.use_prefixes {
            true => IpRequest::Prefixes(request.ipv4_count),
            false => IpRequest::Addresses(request.ipv4_count),
        };
        let Some(primary) = ledger.free.addresses(cidr, 1) else {
            return Err(self.subnet_full(&request.subnet_id, "address".into()));
        };
        let Some((addresses, prefixes)) = hand_out(&mut ledger.free, cidr, ask) else {
            return Err(self.subnet_full(&request.subnet_id, format!("{ask:?}")));
        };
        ledger.created += 1;
        let id = format!("{PLANNED_INTERFACE_PREFIX}{}", ledger.created);
        let (count_addresses, count_prefixes) = counts(ask);
        ledger.calls.push(PlannedCall {
            operation: Operation::CreateInterface,
            interface: id.clone(),
            subnet: Some(request.subnet_id.clone()),
            addresses: count_addresses,
            prefixes: count_prefixes,
        });
        ledger
            .interface_subnets
            .insert(id.clone(), request.subnet_id.clone());
        Ok(NetworkInterface {
            id,
            mac: String::new(),
            index: request.index,
            subnet_id: request.subnet_id.clone(),
            vpc_id,
            primary_ip: primary[0],
            addresses,
            prefixes,
            security_groups: request.security_groups.clone(),
            tags: request.tags.clone(),
            instance_id: Some(request.instance_id.clone()),
        })
    }

    async fn delete_interface(&self, interface_id: &str) -> Result<(), CloudError> {
        let mut ledger = self.ledger();
        let subnet = ledger.interface_subnets.get(interface_id).cloned();
        ledger.calls.push(PlannedCall {
            operation: Operation::DeleteInterface,
            interface: interface_id.to_string(),
            subnet,
            addresses: 0,
            prefixes: 0,
        });
        Ok(())
    }

    async fn assign_ips(
        &self,
        interface_id: &str,
        request: IpRequest,
    ) -> Result<Assigned, CloudError> {
        let mut ledger = self.ledger();
        let Some(subnet) = ledger.interface_subnets.get(interface_id).cloned() else {
            return Err(self.not_found(format!("interface {interface_id}")));
        };
        let Some((cidr, _)) = ledger.subnet(&subnet) else {
            return Err(self.not_found(format!("subnet {subnet}")));
        };
        let Some((addresses, prefixes)) = hand_out(&mut ledger.free, cidr, request) else {
            return Err(self.subnet_full(&subnet, format!("{request:?}")));
        };
        let (count_addresses, count_prefixes) = counts(request);
        ledger.calls.push(PlannedCall {
            operation: Operation::AssignIps,
            interface: interface_id.to_string(),
            subnet: Some(subnet),
            addresses: count_addresses,
            prefixes: count_prefixes,
        });
        Ok(Assigned {
            addresses,
            prefixes,
        })
    }

    async fn unassign_ips(
        &self,
        interface_id: &str,
        addresses: &[Ipv4Addr],
        prefixes: &[Ipv4Net],
    ) -> Result<(), CloudError> {
        let mut ledger = self.ledger();
        let subnet = ledger.interface_subnets.get(interface_id).cloned();
        ledger.calls.push(PlannedCall {
            operation: Operation::UnassignIps,
            interface: interface_id.to_string(),
            subnet,
            addresses: u32::try_from(addresses.len()).unwrap_or(u32::MAX),
            prefixes: u32::try_from(prefixes.len()).unwrap_or(u32::MAX),
        });
        Ok(())
    }
}
