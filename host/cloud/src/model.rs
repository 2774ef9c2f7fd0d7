//! The plain data a cloud answers with and is asked for: the WIT's records
//! as the host models them, addresses and networks typed. A value of these
//! types has been parsed; whether it makes sense (an address in its subnet,
//! one interface per device index) is `answer`'s to check. No behaviour
//! beyond what the types say.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use crate::rate::RateModel;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag {
    pub key: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vpc {
    pub id: String,
    pub primary_cidr: Ipv4Net,
    pub cidrs: Vec<Ipv4Net>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet {
    pub id: String,
    pub cidr: Ipv4Net,
    pub availability_zone: String,
    pub vpc_id: String,
    pub available_addresses: u32,
    pub tags: Vec<Tag>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityGroup {
    pub id: String,
    pub vpc_id: String,
    pub tags: Vec<Tag>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkInterface {
    pub id: String,
    pub mac: String,
    /// Device index on its instance; 0 is the primary interface.
    pub index: u32,
    pub subnet_id: String,
    pub vpc_id: String,
    pub primary_ip: Ipv4Addr,
    /// Secondary addresses (the primary is not repeated).
    pub addresses: Vec<Ipv4Addr>,
    /// Delegated prefixes (/28 on AWS).
    pub prefixes: Vec<Ipv4Net>,
    pub security_groups: Vec<String>,
    pub tags: Vec<Tag>,
    pub instance_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    pub instance_type: String,
    pub availability_zone: String,
    pub vpc_id: String,
    pub interfaces: Vec<NetworkInterface>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceLimits {
    pub max_interfaces: u32,
    /// Address slots per interface, the primary included; a /28 takes one.
    pub ipv4_per_interface: u32,
    pub ipv6_per_interface: u32,
    pub prefix_delegation: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    pub create_interface: bool,
    pub release: bool,
    pub prefixes: bool,
    pub delete_interface: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProviderInfo {
    pub name: String,
    pub version: String,
    pub capabilities: Capabilities,
    pub max_concurrency: u32,
    /// How the cloud throttles the provider's calls, as the provider declares
    /// it (WIT 0.2.0 on); `None` from a provider built before providers
    /// declared one.
    pub rate_model: Option<RateModel>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateInterfaceRequest {
    pub instance_id: String,
    pub index: u32,
    pub subnet_id: String,
    pub security_groups: Vec<String>,
    pub description: String,
    pub tags: Vec<Tag>,
    pub delete_on_termination: bool,
    pub ipv4_count: u32,
    pub use_prefixes: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpRequest {
    Addresses(u32),
    Prefixes(u32),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assigned {
    pub addresses: Vec<Ipv4Addr>,
    pub prefixes: Vec<Ipv4Net>,
}
