//! A ready-made cloud like the wasm mock's default settings: one VPC, one /16 pod
//! subnet per zone, and `nodes` m5.large instances (`i-0000`, `i-0001`, ...
//! in order), the zones filled one after the other with as many nodes as a
//! /16 holds at full capacity, so no test of the engine runs out of subnet
//! by accident.

use ipam_cloud::InstanceLimits;

use crate::builder::{FakeCloudBuilder, InstanceSpec, SubnetSpec};
use crate::fake::FakeCloud;

pub const STANDARD_VPC: &str = "vpc-fake";
pub const STANDARD_SECURITY_GROUP: &str = "sg-nodes";
pub const STANDARD_INSTANCE_TYPE: &str = "m5.large";

/// AWS's m5.large: 3 interfaces of 10 IPv4 slots, prefix delegation.
pub const M5_LARGE: InstanceLimits = InstanceLimits {
    max_interfaces: 3,
    ipv4_per_interface: 10,
    ipv6_per_interface: 10,
    prefix_delegation: true,
};

/// Addresses one m5.large can take from its subnet: every interface's
/// primary address and nine /28s.
const PER_NODE: u32 = M5_LARGE.max_interfaces * (1 + (M5_LARGE.ipv4_per_interface - 1) * 16);
/// Usable addresses of a /16 (AWS reserves five).
const PER_SUBNET: u32 = (1 << 16) - 5;
const NODES_PER_ZONE: usize = (PER_SUBNET / PER_NODE) as usize;

/// Zone `k`'s letter (`a`, `b`, ...), or its number past `z`.
fn zone_suffix(k: usize) -> String {
    match u8::try_from(k) {
        Ok(k) if k < 26 => char::from(b'a' + k).to_string(),
        _ => k.to_string(),
    }
}

/// The availability zone of the `k`th zone: `zone-a`, `zone-b`, ...
pub fn standard_zone(k: usize) -> String {
    format!("zone-{}", zone_suffix(k))
}

/// The pod subnet of the `k`th zone: `subnet-a` (10.0.0.0/16), `subnet-b`
/// (10.1.0.0/16), ...
pub fn standard_subnet(k: usize) -> String {
    format!("subnet-{}", zone_suffix(k))
}

/// The id of the `n`th standard instance: `i-0000`, `i-0001`, ...
pub fn standard_instance(n: usize) -> String {
    format!("i-{n:04}")
}

impl FakeCloudBuilder {
    /// The standard cloud's declaration, to extend or change before
    /// building. Up to 256 zones (over 38,000 nodes).
    pub fn standard(nodes: usize) -> Self {
        let zones = nodes.div_ceil(NODES_PER_ZONE).clamp(1, 256);
        let mut builder = FakeCloudBuilder::new()
            .vpc(STANDARD_VPC, &["10.0.0.0/8"])
            .security_group(STANDARD_SECURITY_GROUP, STANDARD_VPC, &[("role", "nodes")])
            .instance_type(STANDARD_INSTANCE_TYPE, M5_LARGE);
        for k in 0..zones {
            let cidr = format!("10.{k}.0.0/16");
            builder = builder.subnet(
                SubnetSpec::new(&standard_subnet(k), STANDARD_VPC, &standard_zone(k), &cidr)
                    .tag("tier", "pods"),
            );
        }
        for n in 0..nodes {
            builder = builder.instance(
                InstanceSpec::new(
                    &standard_instance(n),
                    STANDARD_INSTANCE_TYPE,
                    &standard_subnet(n / NODES_PER_ZONE),
                )
                .security_group(STANDARD_SECURITY_GROUP),
            );
        }
        builder
    }
}

impl FakeCloud {
    /// The standard cloud with `nodes` instances.
    ///
    /// # Panics
    /// With more nodes than 256 zones hold (over 38,000).
    pub fn standard(nodes: usize) -> Self {
        match FakeCloudBuilder::standard(nodes).build() {
            Ok(cloud) => cloud,
            Err(error) => panic!("the standard fake cloud for {nodes} nodes: {error}"),
        }
    }
}
