//! The mock's settings: the whole cloud it models, as a JSON document. The
//! host's fake cloud (`ipam-fake-cloud`) builds them in Rust instead.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Settings {
    #[serde(default)]
    pub vpcs: Vec<VpcSpec>,
    #[serde(default)]
    pub subnets: Vec<SubnetSpec>,
    #[serde(default)]
    pub security_groups: Vec<SecurityGroupSpec>,
    #[serde(default)]
    pub instance_types: BTreeMap<String, InstanceTypeSpec>,
    #[serde(default)]
    pub instances: Vec<InstanceSpec>,
    #[serde(default)]
    pub faults: Vec<FaultSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct VpcSpec {
    pub id: String,
    /// The first is the primary CIDR.
    pub cidrs: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SubnetSpec {
    pub id: String,
    pub vpc_id: String,
    pub cidr: String,
    pub availability_zone: String,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Addresses taken by something outside the cluster; they fragment the
    /// subnet so that /28 prefixes can run out while /32s remain.
    #[serde(default)]
    pub occupied: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SecurityGroupSpec {
    pub id: String,
    pub vpc_id: String,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct InstanceTypeSpec {
    pub max_interfaces: u32,
    pub ipv4_per_interface: u32,
    #[serde(default)]
    pub ipv6_per_interface: u32,
    #[serde(default)]
    pub prefix_delegation: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct InstanceSpec {
    pub id: String,
    pub instance_type: String,
    /// Subnet of the primary interface; the instance's zone and VPC follow.
    pub subnet_id: String,
    #[serde(default)]
    pub security_groups: Vec<String>,
}

/// Make `operation` fail `times` times with `error`, after letting `after`
/// calls of it succeed. Operations are the WIT names (`assign-ips`, ...) plus
/// `attach-interface`: the attach step inside create-interface, which fails
/// after the interface was created (the mock then deletes it, unless `leak`
/// says to leave it detached, as a provider that crashed would).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FaultSpec {
    pub operation: String,
    pub error: String,
    #[serde(default = "one")]
    pub times: u32,
    #[serde(default)]
    pub after: u32,
    #[serde(default)]
    pub retry_after_ms: u64,
    #[serde(default)]
    pub leak: bool,
}

fn one() -> u32 {
    1
}
