//! Declaring a fake cloud: the wasm mock's [`Settings`] (VPCs, subnets,
//! security groups, instance types and instances, each with its primary
//! interface at index 0), built in Rust instead of JSON, and checked by the
//! mock's own `Cloud::new` as its `configure` checks them. Declaration order
//! does not matter.

use std::collections::BTreeMap;

use ipam_cloud::{Capabilities, InstanceLimits, ProviderError};
use mock_provider::{Cloud, InstanceTypeSpec, SecurityGroupSpec, Settings, VpcSpec};

use crate::convert::{self, IntoModel};
use crate::fake::FakeCloud;

/// A subnet to declare: the mock's subnet settings.
#[derive(Debug, Clone)]
pub struct SubnetSpec(mock_provider::SubnetSpec);

impl SubnetSpec {
    pub fn new(id: &str, vpc_id: &str, availability_zone: &str, cidr: &str) -> Self {
        Self(mock_provider::SubnetSpec {
            id: id.into(),
            vpc_id: vpc_id.into(),
            cidr: cidr.into(),
            availability_zone: availability_zone.into(),
            tags: BTreeMap::new(),
            occupied: Vec::new(),
        })
    }

    /// A tag (the mock keeps tags by key, listed in key order).
    pub fn tag(mut self, key: &str, value: &str) -> Self {
        self.0.tags.insert(key.into(), value.into());
        self
    }

    /// An address taken by something outside the cluster: it fragments the
    /// subnet, so /28 prefixes can run out while single addresses remain.
    pub fn occupied(mut self, address: &str) -> Self {
        self.0.occupied.push(address.into());
        self
    }
}

/// An instance to declare, as the mock's settings have it; its zone and VPC
/// are those of the subnet of its primary interface.
#[derive(Debug, Clone)]
pub struct InstanceSpec(mock_provider::InstanceSpec);

impl InstanceSpec {
    pub fn new(id: &str, instance_type: &str, subnet_id: &str) -> Self {
        Self(mock_provider::InstanceSpec {
            id: id.into(),
            instance_type: instance_type.into(),
            subnet_id: subnet_id.into(),
            security_groups: Vec::new(),
        })
    }

    /// A security group of the primary interface.
    pub fn security_group(mut self, id: &str) -> Self {
        self.0.security_groups.push(id.into());
        self
    }
}

/// Everything a fake cloud is made of, before it exists: the mock's
/// settings, and what the fake declares of itself.
#[derive(Debug, Clone)]
pub struct FakeCloudBuilder {
    settings: Settings,
    /// Declared instance types, in order: the settings' map cannot hold a
    /// name twice, and a name declared twice is a mistake to report.
    instance_types: Vec<(String, InstanceTypeSpec)>,
    capabilities: Capabilities,
    max_concurrency: u32,
}

impl Default for FakeCloudBuilder {
    fn default() -> Self {
        Self {
            settings: Settings {
                vpcs: Vec::new(),
                subnets: Vec::new(),
                security_groups: Vec::new(),
                instance_types: BTreeMap::new(),
                instances: Vec::new(),
                faults: Vec::new(),
            },
            instance_types: Vec::new(),
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
        self.settings.vpcs.push(VpcSpec {
            id: id.into(),
            cidrs: cidrs.iter().map(|c| c.to_string()).collect(),
        });
        self
    }

    pub fn subnet(mut self, spec: SubnetSpec) -> Self {
        self.settings.subnets.push(spec.0);
        self
    }

    pub fn security_group(mut self, id: &str, vpc_id: &str, tags: &[(&str, &str)]) -> Self {
        self.settings.security_groups.push(SecurityGroupSpec {
            id: id.into(),
            vpc_id: vpc_id.into(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        });
        self
    }

    pub fn instance_type(mut self, name: &str, limits: InstanceLimits) -> Self {
        self.instance_types
            .push((name.into(), convert::instance_type(limits)));
        self
    }

    pub fn instance(mut self, spec: InstanceSpec) -> Self {
        self.settings.instances.push(spec.0);
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
        let mut settings = self.settings;
        for (name, limits) in self.instance_types {
            if settings
                .instance_types
                .insert(name.clone(), limits)
                .is_some()
            {
                return Err(ProviderError::InvalidArgument(format!(
                    "instance type {name}: defined twice"
                )));
            }
        }
        let cloud = Cloud::new(settings).map_err(IntoModel::into_model)?;
        Ok(FakeCloud::new(
            cloud,
            self.capabilities,
            self.max_concurrency,
        ))
    }
}
