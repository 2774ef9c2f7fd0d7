//! The fake cloud's state and the rules a real cloud enforces, in plain Rust
//! and in the order the wasm mock provider checks them
//! (`providers/mock/src/cloud.rs`): interface count and device-index
//! conflicts per instance, address slots per interface (the primary address
//! counts, a /28 takes one), subnet capacity and /28 availability, and a call
//! either fully happens or changes nothing. Every map is ordered and every
//! id comes from a counter, so the same calls give the same answers.
//!
//! Errors are bare [`ProviderError`]s; the [`crate::FakeCloud`] wraps them as
//! a provider's.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipam_cloud::{
    Assigned, CreateInterfaceRequest, Instance, InstanceLimits, IpRequest, NetworkInterface,
    ProviderError, SecurityGroup, Subnet, Tag, Vpc,
};

use crate::addresses::{parse_network, prefix_text, AddressPool, PREFIX_LEN};

pub(crate) fn invalid(message: impl Into<String>) -> ProviderError {
    ProviderError::InvalidArgument(message.into())
}

fn not_found(message: impl Into<String>) -> ProviderError {
    ProviderError::NotFound(message.into())
}

#[derive(Debug)]
pub(crate) struct SubnetState {
    pub subnet: Subnet,
    pub pool: AddressPool,
}

#[derive(Debug)]
pub(crate) struct InstanceState {
    pub instance_type: String,
    pub zone: String,
    pub vpc_id: String,
}

#[derive(Debug, Clone)]
struct Eni {
    id: String,
    mac: String,
    index: u32,
    subnet_id: String,
    vpc_id: String,
    primary_ip: Ipv4Addr,
    addresses: Vec<Ipv4Addr>,
    prefixes: Vec<Ipv4Addr>,
    security_groups: Vec<String>,
    tags: Vec<Tag>,
    instance_id: Option<String>,
}

impl Eni {
    fn to_model(&self) -> NetworkInterface {
        NetworkInterface {
            id: self.id.clone(),
            mac: self.mac.clone(),
            index: self.index,
            subnet_id: self.subnet_id.clone(),
            vpc_id: self.vpc_id.clone(),
            primary_ip: self.primary_ip.to_string(),
            addresses: self.addresses.iter().map(Ipv4Addr::to_string).collect(),
            prefixes: self.prefixes.iter().copied().map(prefix_text).collect(),
            security_groups: self.security_groups.clone(),
            tags: self.tags.clone(),
            instance_id: self.instance_id.clone(),
        }
    }

    /// Address slots in use: the primary address, each secondary, each /28.
    fn slots_used(&self) -> u32 {
        1 + self.addresses.len() as u32 + self.prefixes.len() as u32
    }
}

/// The whole cloud. Built by [`crate::FakeCloudBuilder`], changed only by
/// the operations below.
#[derive(Debug, Default)]
pub(crate) struct World {
    pub vpcs: Vec<Vpc>,
    pub subnets: BTreeMap<String, SubnetState>,
    pub security_groups: BTreeMap<String, SecurityGroup>,
    pub instance_types: BTreeMap<String, InstanceLimits>,
    pub instances: BTreeMap<String, InstanceState>,
    interfaces: BTreeMap<String, Eni>,
    /// Interfaces created so far: the source of ids and MACs.
    created: u32,
}

/// What a create-interface does once its checks have passed.
pub(crate) enum Attach {
    /// Attach and assign, as asked.
    Yes,
    /// Leave the new interface detached and fail with this error (a provider
    /// that crashed between create and attach).
    Leak(ProviderError),
}

impl World {
    pub fn vpc(&self, id: &str) -> Result<&Vpc, ProviderError> {
        self.vpcs
            .iter()
            .find(|v| v.id == id)
            .ok_or_else(|| not_found(format!("vpc {id}")))
    }

    fn subnet(&self, id: &str) -> Result<&SubnetState, ProviderError> {
        self.subnets
            .get(id)
            .ok_or_else(|| not_found(format!("subnet {id}")))
    }

    fn limits_of(&self, instance_id: &str) -> Result<InstanceLimits, ProviderError> {
        let instance = self
            .instances
            .get(instance_id)
            .ok_or_else(|| not_found(format!("instance {instance_id}")))?;
        self.instance_types
            .get(&instance.instance_type)
            .copied()
            .ok_or_else(|| ProviderError::Other(format!("instance {instance_id}: type vanished")))
    }

    pub fn check_security_groups(&self, ids: &[String], vpc_id: &str) -> Result<(), ProviderError> {
        for id in ids {
            let group = self
                .security_groups
                .get(id)
                .ok_or_else(|| not_found(format!("security group {id}")))?;
            if group.vpc_id != vpc_id {
                return Err(invalid(format!("security group {id} is not in {vpc_id}")));
            }
        }
        Ok(())
    }

    /// A new interface with its primary address from the subnet; the caller
    /// inserts it (or gives the address back).
    fn new_interface(
        &mut self,
        subnet_id: &str,
        security_groups: Vec<String>,
        tags: Vec<Tag>,
        instance_id: Option<String>,
        index: u32,
    ) -> Result<Eni, ProviderError> {
        let subnet = self
            .subnets
            .get_mut(subnet_id)
            .ok_or_else(|| not_found(format!("subnet {subnet_id}")))?;
        let primary_ip = subnet
            .pool
            .take_any()
            .ok_or_else(|| ProviderError::SubnetFull(format!("subnet {subnet_id}")))?;
        self.created += 1;
        let n = self.created;
        Ok(Eni {
            id: format!("eni-{n:08x}"),
            mac: format!(
                "02:00:00:{:02x}:{:02x}:{:02x}",
                (n >> 16) & 0xff,
                (n >> 8) & 0xff,
                n & 0xff
            ),
            index,
            subnet_id: subnet_id.to_string(),
            vpc_id: subnet.subnet.vpc_id.clone(),
            primary_ip,
            addresses: Vec::new(),
            prefixes: Vec::new(),
            security_groups,
            tags,
            instance_id,
        })
    }

    /// Create an instance's primary interface (index 0), at build time.
    pub fn add_primary_interface(
        &mut self,
        instance_id: &str,
        subnet_id: &str,
        security_groups: Vec<String>,
    ) -> Result<(), ProviderError> {
        let eni = self.new_interface(
            subnet_id,
            security_groups,
            Vec::new(),
            Some(instance_id.to_string()),
            0,
        )?;
        self.interfaces.insert(eni.id.clone(), eni);
        Ok(())
    }

    fn free_interface_addresses(&mut self, eni: &Eni) {
        if let Some(subnet) = self.subnets.get_mut(&eni.subnet_id) {
            subnet.pool.release(eni.primary_ip);
            for addr in &eni.addresses {
                subnet.pool.release(*addr);
            }
            for prefix in &eni.prefixes {
                subnet.pool.release_prefix(*prefix);
            }
        }
    }

    pub fn subnets(&self) -> Vec<Subnet> {
        self.subnets
            .values()
            .map(|s| Subnet {
                available_addresses: s.pool.available(),
                ..s.subnet.clone()
            })
            .collect()
    }

    /// All instances when `ids` is empty, else those named (unknown ids are
    /// left out); interfaces ordered by device index.
    pub fn instances(&self, ids: &[String]) -> Vec<Instance> {
        let wanted = |id: &str| ids.is_empty() || ids.iter().any(|i| i == id);
        let mut attached: BTreeMap<&str, Vec<NetworkInterface>> = BTreeMap::new();
        for eni in self.interfaces.values() {
            if let Some(instance) = eni.instance_id.as_deref().filter(|id| wanted(id)) {
                attached.entry(instance).or_default().push(eni.to_model());
            }
        }
        self.instances
            .iter()
            .filter(|(id, _)| wanted(id))
            .map(|(id, state)| {
                let mut interfaces = attached.remove(id.as_str()).unwrap_or_default();
                interfaces.sort_by_key(|i| i.index);
                Instance {
                    id: id.clone(),
                    instance_type: state.instance_type.clone(),
                    availability_zone: state.zone.clone(),
                    vpc_id: state.vpc_id.clone(),
                    interfaces,
                }
            })
            .collect()
    }

    /// Detached interfaces carrying every one of `tags`.
    pub fn detached_interfaces(&self, tags: &[Tag]) -> Vec<NetworkInterface> {
        self.interfaces
            .values()
            .filter(|e| e.instance_id.is_none() && tags.iter().all(|t| e.tags.contains(t)))
            .map(Eni::to_model)
            .collect()
    }

    pub fn instance_limits(&self, instance_type: &str) -> Result<InstanceLimits, ProviderError> {
        self.instance_types
            .get(instance_type)
            .copied()
            .ok_or_else(|| not_found(format!("instance type {instance_type}")))
    }

    /// Whether `subnet_id` can give `count` addresses (or /28s) plus `extra`
    /// single addresses, without taking any.
    fn check_subnet_room(
        &self,
        subnet_id: &str,
        count: u32,
        prefixes: bool,
        extra: u32,
    ) -> Result<(), ProviderError> {
        let pool = &self.subnet(subnet_id)?.pool;
        if prefixes {
            if pool.available() < extra {
                return Err(ProviderError::SubnetFull(format!("subnet {subnet_id}")));
            }
            if pool.free_prefixes() < count {
                return Err(ProviderError::InsufficientPrefixes(format!(
                    "subnet {subnet_id} has {} free /28 blocks, {count} asked",
                    pool.free_prefixes()
                )));
            }
        } else if pool.available() < count + extra {
            return Err(ProviderError::SubnetFull(format!(
                "subnet {subnet_id} has {} free addresses, {} asked",
                pool.available(),
                count + extra
            )));
        }
        Ok(())
    }

    /// Whether an interface with `used` slots taken has room for `count` more.
    fn check_slots(
        limits: &InstanceLimits,
        used: u32,
        count: u32,
        prefixes: bool,
    ) -> Result<(), ProviderError> {
        if prefixes && !limits.prefix_delegation {
            return Err(invalid(
                "this instance type does not support prefix delegation",
            ));
        }
        if used + count > limits.ipv4_per_interface {
            return Err(ProviderError::AddressLimit(format!(
                "interface has {used} of {} address slots in use, {count} more asked",
                limits.ipv4_per_interface
            )));
        }
        Ok(())
    }

    pub fn create_interface(
        &mut self,
        request: &CreateInterfaceRequest,
        attach: impl FnOnce() -> Attach,
    ) -> Result<NetworkInterface, ProviderError> {
        let limits = self.limits_of(&request.instance_id)?;
        let instance = &self.instances[&request.instance_id];
        let subnet = &self.subnet(&request.subnet_id)?.subnet;
        if subnet.vpc_id != instance.vpc_id || subnet.availability_zone != instance.zone {
            return Err(invalid(format!(
                "subnet {} is not in the instance's VPC and zone",
                request.subnet_id
            )));
        }
        self.check_security_groups(&request.security_groups, &instance.vpc_id)?;
        let attached: Vec<&Eni> = self
            .interfaces
            .values()
            .filter(|e| e.instance_id.as_deref() == Some(&request.instance_id))
            .collect();
        if attached.len() as u32 >= limits.max_interfaces {
            return Err(ProviderError::InterfaceLimit(format!(
                "instance {} has {} of {} interfaces",
                request.instance_id,
                attached.len(),
                limits.max_interfaces
            )));
        }
        if request.index >= limits.max_interfaces {
            return Err(invalid(format!(
                "device index {} is beyond the type's {} interfaces",
                request.index, limits.max_interfaces
            )));
        }
        if attached.iter().any(|e| e.index == request.index) {
            return Err(ProviderError::Conflict(format!(
                "instance {} already has an interface at device index {}",
                request.instance_id, request.index
            )));
        }
        Self::check_slots(&limits, 1, request.ipv4_count, request.use_prefixes)?;
        self.check_subnet_room(
            &request.subnet_id,
            request.ipv4_count,
            request.use_prefixes,
            1,
        )?;

        let mut eni = self.new_interface(
            &request.subnet_id,
            request.security_groups.clone(),
            request.tags.clone(),
            None,
            request.index,
        )?;
        if let Attach::Leak(error) = attach() {
            self.interfaces.insert(eni.id.clone(), eni);
            return Err(error);
        }
        eni.instance_id = Some(request.instance_id.clone());
        let id = eni.id.clone();
        self.interfaces.insert(id.clone(), eni);
        if request.ipv4_count > 0 {
            let ips = if request.use_prefixes {
                IpRequest::Prefixes(request.ipv4_count)
            } else {
                IpRequest::Addresses(request.ipv4_count)
            };
            if let Err(error) = self.assign_ips(&id, ips) {
                // All or nothing: undo the interface this call created.
                if let Some(eni) = self.interfaces.remove(&id) {
                    self.free_interface_addresses(&eni);
                }
                return Err(error);
            }
        }
        Ok(self.interfaces[&id].to_model())
    }

    /// Idempotent: an interface that no longer exists is success.
    pub fn delete_interface(&mut self, id: &str) -> Result<(), ProviderError> {
        let Some(eni) = self.interfaces.get(id) else {
            return Ok(());
        };
        if eni.index == 0 && eni.instance_id.is_some() {
            return Err(invalid(format!("{id} is an instance's primary interface")));
        }
        if let Some(eni) = self.interfaces.remove(id) {
            self.free_interface_addresses(&eni);
        }
        Ok(())
    }

    /// All or nothing: the lowest free addresses (or /28s) of the subnet.
    pub fn assign_ips(&mut self, id: &str, request: IpRequest) -> Result<Assigned, ProviderError> {
        let eni = self
            .interfaces
            .get(id)
            .ok_or_else(|| not_found(format!("interface {id}")))?;
        let instance_id = eni
            .instance_id
            .clone()
            .ok_or_else(|| invalid(format!("{id} is not attached")))?;
        let limits = self.limits_of(&instance_id)?;
        let (count, prefixes) = match request {
            IpRequest::Addresses(n) => (n, false),
            IpRequest::Prefixes(n) => (n, true),
        };
        if count == 0 {
            return Err(invalid("assign-ips needs a count of at least 1"));
        }
        Self::check_slots(&limits, eni.slots_used(), count, prefixes)?;
        let subnet_id = eni.subnet_id.clone();
        self.check_subnet_room(&subnet_id, count, prefixes, 0)?;

        let pool = &mut self
            .subnets
            .get_mut(&subnet_id)
            .ok_or_else(|| not_found(format!("subnet {subnet_id}")))?
            .pool;
        // check_subnet_room made sure every take succeeds.
        let taken: Vec<Ipv4Addr> = (0..count)
            .map_while(|_| {
                if prefixes {
                    pool.take_prefix()
                } else {
                    pool.take_any()
                }
            })
            .collect();
        if taken.len() as u32 != count {
            return Err(ProviderError::Other("subnet ran out mid-assignment".into()));
        }
        let eni = self
            .interfaces
            .get_mut(id)
            .ok_or_else(|| not_found(format!("interface {id}")))?;
        let mut assigned = Assigned::default();
        if prefixes {
            assigned.prefixes = taken.iter().copied().map(prefix_text).collect();
            eni.prefixes.extend(taken);
        } else {
            assigned.addresses = taken.iter().map(Ipv4Addr::to_string).collect();
            eni.addresses.extend(taken);
        }
        Ok(assigned)
    }

    /// Idempotent: addresses or prefixes no longer on the interface are
    /// ignored. The primary address cannot be unassigned.
    pub fn unassign_ips(
        &mut self,
        id: &str,
        addresses: &[String],
        prefixes: &[String],
    ) -> Result<(), ProviderError> {
        let eni = self
            .interfaces
            .get(id)
            .ok_or_else(|| not_found(format!("interface {id}")))?;
        let addresses = addresses
            .iter()
            .map(|a| {
                a.parse::<Ipv4Addr>()
                    .map_err(|_| invalid(format!("bad address {a}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let prefixes = prefixes
            .iter()
            .map(|p| {
                let net = parse_network(p).map_err(invalid)?;
                if net.prefix_len() != PREFIX_LEN {
                    return Err(invalid(format!("{p} is not a /{PREFIX_LEN}")));
                }
                Ok(net.network())
            })
            .collect::<Result<Vec<_>, _>>()?;
        if addresses.contains(&eni.primary_ip) {
            return Err(invalid(format!(
                "{} is the primary address of {id}",
                eni.primary_ip
            )));
        }
        let subnet_id = eni.subnet_id.clone();
        let eni = self
            .interfaces
            .get_mut(id)
            .ok_or_else(|| not_found(format!("interface {id}")))?;
        let (gone_addresses, kept): (Vec<_>, Vec<_>) =
            eni.addresses.iter().partition(|a| addresses.contains(a));
        eni.addresses = kept;
        let (gone_prefixes, kept): (Vec<_>, Vec<_>) =
            eni.prefixes.iter().partition(|p| prefixes.contains(p));
        eni.prefixes = kept;
        if let Some(subnet) = self.subnets.get_mut(&subnet_id) {
            gone_addresses
                .into_iter()
                .for_each(|a| subnet.pool.release(a));
            gone_prefixes
                .into_iter()
                .for_each(|p| subnet.pool.release_prefix(p));
        }
        Ok(())
    }
}
