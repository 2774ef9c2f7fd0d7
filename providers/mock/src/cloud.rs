//! The mock cloud's state and the rules a real cloud enforces: interface
//! count and device-index conflicts per instance, address slots per interface,
//! subnet capacity and /28 availability. Every map is ordered and every id
//! comes from a counter, so the same calls give the same answers.
//!
//! The component serves this [`Cloud`] behind the WIT exports; the host's
//! fake cloud (`ipam-fake-cloud`) runs it natively behind a mutex, converting
//! its SDK types to the host's model.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipam_provider_sdk::{
    Assigned, CreateInterfaceRequest, Error, Instance, IpRequest, Ipv4, Ipv4Net, Limits,
    NetworkInterface, SecurityGroup, Subnet, Tag, Vpc,
};

use crate::faults::Faults;
use crate::pool::{AddressPool, PREFIX_LEN};
use crate::settings::{InstanceTypeSpec, Settings, SubnetSpec};

#[derive(Debug)]
struct SubnetState {
    spec: SubnetSpec,
    cidr: Ipv4Net,
    pool: AddressPool,
}

#[derive(Debug)]
struct InstanceState {
    instance_type: String,
    zone: String,
    vpc_id: String,
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
    /// The first address of each /28.
    prefixes: Vec<Ipv4Addr>,
    security_groups: Vec<String>,
    tags: Vec<Tag>,
    instance_id: Option<String>,
}

/// The whole mock cloud: built from [`Settings`] by [`Cloud::new`], changed
/// only by its operations. Injected faults of the WIT operations are checked
/// by the caller (`faults.check`) before calling; `attach-interface` faults
/// fire inside [`Cloud::create_interface`].
#[derive(Debug, Default)]
pub struct Cloud {
    vpcs: Vec<Vpc>,
    subnets: BTreeMap<String, SubnetState>,
    security_groups: BTreeMap<String, SecurityGroup>,
    instance_types: BTreeMap<String, InstanceTypeSpec>,
    instances: BTreeMap<String, InstanceState>,
    interfaces: BTreeMap<String, Eni>,
    created: u32,
    pub faults: Faults,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidArgument(message.into())
}

fn tags_of(map: &BTreeMap<String, String>) -> Vec<Tag> {
    map.iter()
        .map(|(key, value)| Tag {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

impl Cloud {
    /// The cloud the settings describe, or invalid-argument naming what is
    /// wrong with them.
    pub fn new(settings: Settings) -> Result<Self, Error> {
        let mut cloud = Cloud {
            faults: Faults::new(settings.faults).map_err(invalid)?,
            ..Default::default()
        };
        for vpc in settings.vpcs {
            let cidrs = vpc
                .cidrs
                .iter()
                .map(|cidr| cidr.parse::<Ipv4Net>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(format!("vpc {}: {e}", vpc.id)))?;
            let primary = *cidrs
                .first()
                .ok_or_else(|| invalid(format!("vpc {}: no cidrs", vpc.id)))?;
            if cloud.vpcs.iter().any(|v| v.id == vpc.id) {
                return Err(invalid(format!("vpc {}: defined twice", vpc.id)));
            }
            cloud.vpcs.push(Vpc {
                id: vpc.id,
                primary_cidr: primary,
                cidrs,
            });
        }
        for spec in settings.subnets {
            cloud
                .vpc(&spec.vpc_id)
                .map_err(|_| invalid(format!("subnet {}: unknown vpc", spec.id)))?;
            let cidr: Ipv4Net = spec
                .cidr
                .parse()
                .map_err(|e| invalid(format!("subnet {}: {e}", spec.id)))?;
            let mut pool =
                AddressPool::new(cidr).map_err(|e| invalid(format!("subnet {}: {e}", spec.id)))?;
            for addr in &spec.occupied {
                let ip: Ipv4Addr = addr
                    .parse()
                    .map_err(|_| invalid(format!("subnet {}: bad address {addr}", spec.id)))?;
                if !pool.take(ip) {
                    return Err(invalid(format!(
                        "subnet {}: occupied {addr} is not a free usable address",
                        spec.id
                    )));
                }
            }
            let id = spec.id.clone();
            if cloud
                .subnets
                .insert(id.clone(), SubnetState { spec, cidr, pool })
                .is_some()
            {
                return Err(invalid(format!("subnet {id}: defined twice")));
            }
        }
        for sg in settings.security_groups {
            cloud
                .vpc(&sg.vpc_id)
                .map_err(|_| invalid(format!("security group {}: unknown vpc", sg.id)))?;
            let group = SecurityGroup {
                id: sg.id.clone(),
                vpc_id: sg.vpc_id,
                tags: tags_of(&sg.tags),
            };
            if cloud.security_groups.insert(sg.id.clone(), group).is_some() {
                return Err(invalid(format!("security group {}: defined twice", sg.id)));
            }
        }
        for (name, limits) in &settings.instance_types {
            if limits.max_interfaces == 0 || limits.ipv4_per_interface == 0 {
                return Err(invalid(format!(
                    "instance type {name}: limits must be at least 1"
                )));
            }
        }
        cloud.instance_types = settings.instance_types;
        for spec in settings.instances {
            if !cloud.instance_types.contains_key(&spec.instance_type) {
                return Err(invalid(format!(
                    "instance {}: unknown type {}",
                    spec.id, spec.instance_type
                )));
            }
            if cloud.instances.contains_key(&spec.id) {
                return Err(invalid(format!("instance {}: defined twice", spec.id)));
            }
            let subnet = cloud
                .subnet(&spec.subnet_id)
                .map_err(|_| invalid(format!("instance {}: unknown subnet", spec.id)))?;
            let (zone, vpc_id) = (
                subnet.spec.availability_zone.clone(),
                subnet.spec.vpc_id.clone(),
            );
            cloud
                .check_security_groups(&spec.security_groups, &vpc_id)
                .map_err(|e| invalid(format!("instance {}: {e:?}", spec.id)))?;
            cloud.instances.insert(
                spec.id.clone(),
                InstanceState {
                    instance_type: spec.instance_type,
                    zone,
                    vpc_id,
                },
            );
            let eni = cloud.new_interface(
                &spec.subnet_id,
                spec.security_groups,
                Vec::new(),
                Some(spec.id.clone()),
                0,
            )?;
            cloud.interfaces.insert(eni.id.clone(), eni);
        }
        Ok(cloud)
    }

    fn vpc(&self, id: &str) -> Result<&Vpc, Error> {
        self.vpcs
            .iter()
            .find(|v| v.id == id)
            .ok_or_else(|| Error::NotFound(format!("vpc {id}")))
    }

    fn subnet(&self, id: &str) -> Result<&SubnetState, Error> {
        self.subnets
            .get(id)
            .ok_or_else(|| Error::NotFound(format!("subnet {id}")))
    }

    fn limits_of(&self, instance_id: &str) -> Result<InstanceTypeSpec, Error> {
        let instance = self
            .instances
            .get(instance_id)
            .ok_or_else(|| Error::NotFound(format!("instance {instance_id}")))?;
        self.instance_types
            .get(&instance.instance_type)
            .copied()
            .ok_or_else(|| Error::Other(format!("instance {instance_id}: type vanished")))
    }

    fn check_security_groups(&self, ids: &[String], vpc_id: &str) -> Result<(), Error> {
        for id in ids {
            let group = self
                .security_groups
                .get(id)
                .ok_or_else(|| Error::NotFound(format!("security group {id}")))?;
            if group.vpc_id != vpc_id {
                return Err(invalid(format!("security group {id} is not in {vpc_id}")));
            }
        }
        Ok(())
    }

    /// Create an interface with its primary address; the caller inserts it.
    fn new_interface(
        &mut self,
        subnet_id: &str,
        security_groups: Vec<String>,
        tags: Vec<Tag>,
        instance_id: Option<String>,
        index: u32,
    ) -> Result<Eni, Error> {
        let subnet = self
            .subnets
            .get_mut(subnet_id)
            .ok_or_else(|| Error::NotFound(format!("subnet {subnet_id}")))?;
        let primary_ip = subnet
            .pool
            .take_any()
            .ok_or_else(|| Error::SubnetFull(format!("subnet {subnet_id}")))?;
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
            vpc_id: subnet.spec.vpc_id.clone(),
            primary_ip,
            addresses: Vec::new(),
            prefixes: Vec::new(),
            security_groups,
            tags,
            instance_id,
        })
    }

    pub fn vpcs(&self) -> Vec<Vpc> {
        self.vpcs.clone()
    }

    pub fn subnets(&self) -> Vec<Subnet> {
        self.subnets
            .values()
            .map(|s| Subnet {
                id: s.spec.id.clone(),
                cidr: s.cidr,
                availability_zone: s.spec.availability_zone.clone(),
                vpc_id: s.spec.vpc_id.clone(),
                available_addresses: s.pool.available(),
                tags: tags_of(&s.spec.tags),
            })
            .collect()
    }

    pub fn security_groups(&self) -> Vec<SecurityGroup> {
        self.security_groups.values().cloned().collect()
    }

    pub fn instances(&self, ids: &[String]) -> Vec<Instance> {
        let wanted = |id: &str| ids.is_empty() || ids.iter().any(|i| i == id);
        // One pass over the interfaces, grouped by instance: a listing of
        // thousands of instances must not scan every interface per instance.
        let mut attached: BTreeMap<&str, Vec<NetworkInterface>> = BTreeMap::new();
        for eni in self.interfaces.values() {
            if let Some(instance) = eni.instance_id.as_deref().filter(|id| wanted(id)) {
                attached
                    .entry(instance)
                    .or_default()
                    .push(wit_interface(eni));
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

    pub fn detached_interfaces(&self, tags: &[Tag]) -> Vec<NetworkInterface> {
        self.interfaces
            .values()
            .filter(|e| {
                e.instance_id.is_none()
                    && tags.iter().all(|t| {
                        e.tags
                            .iter()
                            .any(|have| have.key == t.key && have.value == t.value)
                    })
            })
            .map(wit_interface)
            .collect()
    }

    pub fn instance_limits(&self, instance_type: &str) -> Result<Limits, Error> {
        let spec = self
            .instance_types
            .get(instance_type)
            .ok_or_else(|| Error::NotFound(format!("instance type {instance_type}")))?;
        Ok(Limits {
            max_interfaces: spec.max_interfaces,
            ipv4_per_interface: spec.ipv4_per_interface,
            ipv6_per_interface: spec.ipv6_per_interface,
            prefix_delegation: spec.prefix_delegation,
        })
    }

    /// Check that `subnet_id` can give `count` addresses (or /28s) plus
    /// `extra` single addresses, without taking any.
    fn check_subnet_room(
        &self,
        subnet_id: &str,
        count: u32,
        prefixes: bool,
        extra: u32,
    ) -> Result<(), Error> {
        let subnet = self.subnet(subnet_id)?;
        if prefixes {
            if subnet.pool.available() < extra {
                return Err(Error::SubnetFull(format!("subnet {subnet_id}")));
            }
            if subnet.pool.free_prefixes() < count {
                return Err(Error::InsufficientPrefixes(format!(
                    "subnet {subnet_id} has {} free /28 blocks, {count} asked",
                    subnet.pool.free_prefixes()
                )));
            }
        } else if subnet.pool.available() < count + extra {
            return Err(Error::SubnetFull(format!(
                "subnet {subnet_id} has {} free addresses, {} asked",
                subnet.pool.available(),
                count + extra
            )));
        }
        Ok(())
    }

    fn check_slots(
        &self,
        limits: &InstanceTypeSpec,
        used: u32,
        count: u32,
        prefixes: bool,
    ) -> Result<(), Error> {
        if prefixes && !limits.prefix_delegation {
            return Err(invalid(
                "this instance type does not support prefix delegation",
            ));
        }
        if used + count > limits.ipv4_per_interface {
            return Err(Error::AddressLimit(format!(
                "interface has {used} of {} address slots in use, {count} more asked",
                limits.ipv4_per_interface
            )));
        }
        Ok(())
    }

    pub fn create_interface(
        &mut self,
        request: CreateInterfaceRequest,
    ) -> Result<NetworkInterface, Error> {
        let limits = self.limits_of(&request.instance_id)?;
        let instance = &self.instances[&request.instance_id];
        let subnet = self.subnet(&request.subnet_id)?;
        if subnet.spec.vpc_id != instance.vpc_id || subnet.spec.availability_zone != instance.zone {
            return Err(invalid(format!(
                "subnet {} is not in the instance's VPC and zone",
                request.subnet_id
            )));
        }
        let vpc_id = instance.vpc_id.clone();
        self.check_security_groups(&request.security_groups, &vpc_id)?;
        let attached: Vec<&Eni> = self
            .interfaces
            .values()
            .filter(|e| e.instance_id.as_deref() == Some(&request.instance_id))
            .collect();
        if attached.len() as u32 >= limits.max_interfaces {
            return Err(Error::InterfaceLimit(format!(
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
            return Err(Error::Conflict(format!(
                "instance {} already has an interface at device index {}",
                request.instance_id, request.index
            )));
        }
        self.check_slots(&limits, 1, request.ipv4_count, request.use_prefixes)?;
        self.check_subnet_room(
            &request.subnet_id,
            request.ipv4_count,
            request.use_prefixes,
            1,
        )?;

        let mut eni = self.new_interface(
            &request.subnet_id,
            request.security_groups,
            request.tags,
            None,
            request.index,
        )?;
        if let Some(fault) = self.faults.check("attach-interface") {
            if fault.leak {
                self.interfaces.insert(eni.id.clone(), eni);
            } else {
                self.free_interface_addresses(&eni);
            }
            return Err(fault.error);
        }
        eni.instance_id = Some(request.instance_id);
        let id = eni.id.clone();
        self.interfaces.insert(id.clone(), eni);
        let request_ips = if request.use_prefixes {
            IpRequest::Prefixes(request.ipv4_count)
        } else {
            IpRequest::Addresses(request.ipv4_count)
        };
        if request.ipv4_count > 0 {
            if let Err(error) = self.assign_ips(&id, request_ips) {
                // All or nothing: undo the interface this call created.
                if let Some(eni) = self.interfaces.remove(&id) {
                    self.free_interface_addresses(&eni);
                }
                return Err(error);
            }
        }
        Ok(wit_interface(&self.interfaces[&id]))
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

    pub fn delete_interface(&mut self, id: &str) -> Result<(), Error> {
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

    pub fn assign_ips(&mut self, id: &str, request: IpRequest) -> Result<Assigned, Error> {
        let eni = self
            .interfaces
            .get(id)
            .ok_or_else(|| Error::NotFound(format!("interface {id}")))?;
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
        let used = 1 + eni.addresses.len() as u32 + eni.prefixes.len() as u32;
        self.check_slots(&limits, used, count, prefixes)?;
        let subnet_id = eni.subnet_id.clone();
        self.check_subnet_room(&subnet_id, count, prefixes, 0)?;

        let pool = &mut self
            .subnets
            .get_mut(&subnet_id)
            .ok_or_else(|| Error::NotFound(subnet_id.clone()))?
            .pool;
        let mut assigned = Assigned {
            addresses: Vec::new(),
            prefixes: Vec::new(),
        };
        let mut taken = Vec::new();
        for _ in 0..count {
            // check_subnet_room made sure these succeed.
            let next = if prefixes {
                pool.take_prefix()
            } else {
                pool.take_any()
            };
            match next {
                Some(addr) => taken.push(addr),
                None => return Err(Error::Other("subnet ran out mid-assignment".into())),
            }
        }
        let eni = self
            .interfaces
            .get_mut(id)
            .ok_or_else(|| Error::NotFound(format!("interface {id}")))?;
        if prefixes {
            assigned.prefixes = taken.iter().map(prefix_net).collect();
            eni.prefixes.extend(taken);
        } else {
            assigned.addresses = taken.iter().copied().map(Ipv4::from).collect();
            eni.addresses.extend(taken);
        }
        Ok(assigned)
    }

    pub fn unassign_ips(
        &mut self,
        id: &str,
        addresses: &[Ipv4],
        prefixes: &[Ipv4Net],
    ) -> Result<(), Error> {
        let eni = self
            .interfaces
            .get(id)
            .ok_or_else(|| Error::NotFound(format!("interface {id}")))?;
        let parsed_addresses: Vec<Ipv4Addr> =
            addresses.iter().copied().map(Ipv4Addr::from).collect();
        let parsed_prefixes = prefixes
            .iter()
            .map(|p| {
                p.check().map_err(|e| invalid(e.to_string()))?;
                if p.length != PREFIX_LEN {
                    return Err(invalid(format!("{p} is not a /{PREFIX_LEN}")));
                }
                Ok(p.addr())
            })
            .collect::<Result<Vec<_>, _>>()?;
        if parsed_addresses.contains(&eni.primary_ip) {
            return Err(invalid(format!(
                "{} is the primary address of {id}",
                eni.primary_ip
            )));
        }
        let subnet_id = eni.subnet_id.clone();
        let eni = self
            .interfaces
            .get_mut(id)
            .ok_or_else(|| Error::NotFound(format!("interface {id}")))?;
        let removed_addresses: Vec<Ipv4Addr> = eni
            .addresses
            .iter()
            .copied()
            .filter(|a| parsed_addresses.contains(a))
            .collect();
        let removed_prefixes: Vec<Ipv4Addr> = eni
            .prefixes
            .iter()
            .copied()
            .filter(|p| parsed_prefixes.contains(p))
            .collect();
        eni.addresses.retain(|a| !parsed_addresses.contains(a));
        eni.prefixes.retain(|p| !parsed_prefixes.contains(p));
        if let Some(subnet) = self.subnets.get_mut(&subnet_id) {
            removed_addresses
                .iter()
                .for_each(|a| subnet.pool.release(*a));
            removed_prefixes
                .iter()
                .for_each(|p| subnet.pool.release_prefix(*p));
        }
        Ok(())
    }
}

/// A /28 the pool handed out, by its first address.
fn prefix_net(first: &Ipv4Addr) -> Ipv4Net {
    Ipv4Net {
        address: Ipv4::from(*first),
        length: PREFIX_LEN,
    }
}

fn wit_interface(eni: &Eni) -> NetworkInterface {
    NetworkInterface {
        id: eni.id.clone(),
        mac: eni.mac.clone(),
        index: eni.index,
        subnet_id: eni.subnet_id.clone(),
        vpc_id: eni.vpc_id.clone(),
        primary_ip: Ipv4::from(eni.primary_ip),
        addresses: eni.addresses.iter().copied().map(Ipv4::from).collect(),
        prefixes: eni.prefixes.iter().map(prefix_net).collect(),
        security_groups: eni.security_groups.clone(),
        tags: eni.tags.clone(),
        instance_id: eni.instance_id.clone(),
    }
}
