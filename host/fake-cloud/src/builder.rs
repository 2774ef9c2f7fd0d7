//! Declaring a fake cloud: VPCs, subnets, security groups, instance types
//! and instances (each with its primary interface at index 0), checked as
//! the wasm mock checks its settings. Declaration order does not matter;
//! `build` adds VPCs, then subnets, groups, types and instances.

use ipam_cloud::{Capabilities, InstanceLimits, ProviderError, SecurityGroup, Subnet, Tag, Vpc};

use crate::addresses::{parse_network, AddressPool};
use crate::fake::FakeCloud;
use crate::world::{invalid, InstanceState, SubnetState, World};

fn tag(key: &str, value: &str) -> Tag {
    Tag {
        key: key.into(),
        value: value.into(),
    }
}

/// A subnet to declare.
#[derive(Debug, Clone)]
pub struct SubnetSpec {
    id: String,
    vpc_id: String,
    availability_zone: String,
    cidr: String,
    tags: Vec<Tag>,
    occupied: Vec<String>,
}

impl SubnetSpec {
    pub fn new(id: &str, vpc_id: &str, availability_zone: &str, cidr: &str) -> Self {
        Self {
            id: id.into(),
            vpc_id: vpc_id.into(),
            availability_zone: availability_zone.into(),
            cidr: cidr.into(),
            tags: Vec::new(),
            occupied: Vec::new(),
        }
    }

    pub fn tag(mut self, key: &str, value: &str) -> Self {
        self.tags.push(tag(key, value));
        self
    }

    /// An address taken by something outside the cluster: it fragments the
    /// subnet, so /28 prefixes can run out while single addresses remain.
    pub fn occupied(mut self, address: &str) -> Self {
        self.occupied.push(address.into());
        self
    }
}

/// An instance to declare; its zone and VPC are those of the subnet of its
/// primary interface.
#[derive(Debug, Clone)]
pub struct InstanceSpec {
    id: String,
    instance_type: String,
    subnet_id: String,
    security_groups: Vec<String>,
}

impl InstanceSpec {
    pub fn new(id: &str, instance_type: &str, subnet_id: &str) -> Self {
        Self {
            id: id.into(),
            instance_type: instance_type.into(),
            subnet_id: subnet_id.into(),
            security_groups: Vec::new(),
        }
    }

    /// A security group of the primary interface.
    pub fn security_group(mut self, id: &str) -> Self {
        self.security_groups.push(id.into());
        self
    }
}

/// Everything a fake cloud is made of, before it exists.
#[derive(Debug, Clone)]
pub struct FakeCloudBuilder {
    vpcs: Vec<(String, Vec<String>)>,
    subnets: Vec<SubnetSpec>,
    security_groups: Vec<SecurityGroup>,
    instance_types: Vec<(String, InstanceLimits)>,
    instances: Vec<InstanceSpec>,
    capabilities: Capabilities,
    max_concurrency: u32,
}

impl Default for FakeCloudBuilder {
    fn default() -> Self {
        Self {
            vpcs: Vec::new(),
            subnets: Vec::new(),
            security_groups: Vec::new(),
            instance_types: Vec::new(),
            instances: Vec::new(),
            capabilities: Capabilities {
                create_interface: true,
                release: true,
                prefixes: true,
                delete_interface: true,
            },
            max_concurrency: 16,
        }
    }
}

impl FakeCloud {
    /// Declare a cloud from scratch.
    pub fn builder() -> FakeCloudBuilder {
        FakeCloudBuilder::new()
    }
}

impl FakeCloudBuilder {
    /// An empty cloud with every capability.
    pub fn new() -> Self {
        Self::default()
    }

    /// A VPC; the first CIDR is its primary one.
    pub fn vpc(mut self, id: &str, cidrs: &[&str]) -> Self {
        self.vpcs
            .push((id.into(), cidrs.iter().map(|c| c.to_string()).collect()));
        self
    }

    pub fn subnet(mut self, spec: SubnetSpec) -> Self {
        self.subnets.push(spec);
        self
    }

    pub fn security_group(mut self, id: &str, vpc_id: &str, tags: &[(&str, &str)]) -> Self {
        self.security_groups.push(SecurityGroup {
            id: id.into(),
            vpc_id: vpc_id.into(),
            tags: tags.iter().map(|(k, v)| tag(k, v)).collect(),
        });
        self
    }

    pub fn instance_type(mut self, name: &str, limits: InstanceLimits) -> Self {
        self.instance_types.push((name.into(), limits));
        self
    }

    pub fn instance(mut self, spec: InstanceSpec) -> Self {
        self.instances.push(spec);
        self
    }

    /// What the provider declares it can do; operations it cannot do fail
    /// with invalid-argument, as the WIT says.
    pub fn capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    pub fn max_concurrency(mut self, max_concurrency: u32) -> Self {
        self.max_concurrency = max_concurrency;
        self
    }

    /// The cloud, or what is wrong with the declaration (invalid-argument,
    /// as the mock's `configure` answers).
    pub fn build(self) -> Result<FakeCloud, ProviderError> {
        let mut world = World::default();
        for (id, cidrs) in self.vpcs {
            let primary = cidrs
                .first()
                .cloned()
                .ok_or_else(|| invalid(format!("vpc {id}: no cidrs")))?;
            for cidr in &cidrs {
                parse_network(cidr).map_err(invalid)?;
            }
            if world.vpc(&id).is_ok() {
                return Err(invalid(format!("vpc {id}: defined twice")));
            }
            world.vpcs.push(Vpc {
                id,
                primary_cidr: primary,
                cidrs,
            });
        }
        for spec in self.subnets {
            world
                .vpc(&spec.vpc_id)
                .map_err(|_| invalid(format!("subnet {}: unknown vpc", spec.id)))?;
            let mut pool = AddressPool::new(&spec.cidr)
                .map_err(|e| invalid(format!("subnet {}: {e}", spec.id)))?;
            for address in &spec.occupied {
                let taken = address.parse().is_ok_and(|ip| pool.take(ip));
                if !taken {
                    return Err(invalid(format!(
                        "subnet {}: occupied {address} is not a free usable address",
                        spec.id
                    )));
                }
            }
            let subnet = Subnet {
                id: spec.id.clone(),
                cidr: spec.cidr,
                availability_zone: spec.availability_zone,
                vpc_id: spec.vpc_id,
                available_addresses: pool.available(),
                tags: spec.tags,
            };
            if world
                .subnets
                .insert(spec.id.clone(), SubnetState { subnet, pool })
                .is_some()
            {
                return Err(invalid(format!("subnet {}: defined twice", spec.id)));
            }
        }
        for group in self.security_groups {
            world
                .vpc(&group.vpc_id)
                .map_err(|_| invalid(format!("security group {}: unknown vpc", group.id)))?;
            let id = group.id.clone();
            if world.security_groups.insert(id.clone(), group).is_some() {
                return Err(invalid(format!("security group {id}: defined twice")));
            }
        }
        for (name, limits) in self.instance_types {
            if limits.max_interfaces == 0 || limits.ipv4_per_interface == 0 {
                return Err(invalid(format!(
                    "instance type {name}: limits must be at least 1"
                )));
            }
            if world.instance_types.insert(name.clone(), limits).is_some() {
                return Err(invalid(format!("instance type {name}: defined twice")));
            }
        }
        for spec in self.instances {
            if !world.instance_types.contains_key(&spec.instance_type) {
                return Err(invalid(format!(
                    "instance {}: unknown type {}",
                    spec.id, spec.instance_type
                )));
            }
            if world.instances.contains_key(&spec.id) {
                return Err(invalid(format!("instance {}: defined twice", spec.id)));
            }
            let subnet = &world
                .subnets
                .get(&spec.subnet_id)
                .ok_or_else(|| invalid(format!("instance {}: unknown subnet", spec.id)))?
                .subnet;
            let state = InstanceState {
                instance_type: spec.instance_type,
                zone: subnet.availability_zone.clone(),
                vpc_id: subnet.vpc_id.clone(),
            };
            world
                .check_security_groups(&spec.security_groups, &state.vpc_id)
                .map_err(|e| invalid(format!("instance {}: {e}", spec.id)))?;
            world.instances.insert(spec.id.clone(), state);
            world.add_primary_interface(&spec.id, &spec.subnet_id, spec.security_groups)?;
        }
        Ok(FakeCloud::new(
            world,
            self.capabilities,
            self.max_concurrency,
        ))
    }
}
