//! EC2's rate table, as the AWS provider declares it in its `info`: EC2's
//! request throttling as EC2 documents it for an account and region, and
//! the EC2 calls each operation makes. EC2 throttles each API action on a token
//! bucket of its own, so each bucket is named after its action. The costs
//! are the calls this crate's code makes on an operation's ordinary success
//! path (`read.rs`, `interfaces.rs`), a call made twice listed twice; the
//! host keeps its calls within these buckets. The mock provider declares the
//! same model from this very file (`providers/mock/src/rate_model.rs` takes
//! it by path), so the two cannot drift apart; it is plain data on the SDK's
//! types and names nothing else of this crate.

use ipam_provider_sdk::rate::{bucket, cost_in_own_buckets};
use ipam_provider_sdk::{Operation, RateModel};

/// Describe* actions: burst 100, refill 20 per second.
const DESCRIBE: (u32, f64) = (100, 20.0);
/// Mutating actions: burst 100, refill 5 per second.
const MUTATE: (u32, f64) = (100, 5.0);
/// Attach and detach: burst 50, refill 5 per second.
const ATTACH: (u32, f64) = (50, 5.0);

/// EC2's bucket of each action this provider calls: (action, (burst,
/// refill per second)).
pub const BUCKETS: &[(&str, (u32, f64))] = &[
    ("DescribeVpcs", DESCRIBE),
    ("DescribeSubnets", DESCRIBE),
    ("DescribeSecurityGroups", DESCRIBE),
    ("DescribeInstances", DESCRIBE),
    ("DescribeNetworkInterfaces", DESCRIBE),
    ("DescribeInstanceTypes", DESCRIBE),
    ("CreateNetworkInterface", MUTATE),
    ("DeleteNetworkInterface", MUTATE),
    ("AssignPrivateIpAddresses", MUTATE),
    ("UnassignPrivateIpAddresses", MUTATE),
    ("ModifyNetworkInterfaceAttribute", MUTATE),
    ("AttachNetworkInterface", ATTACH),
    ("DetachNetworkInterface", ATTACH),
];

/// The EC2 calls of each operation that succeeds the ordinary way, in the
/// order it makes them. A Describe call makes one request per page
/// (`page-size`, 1000 by default) and per 200 ids; these count one.
pub const COSTS: &[(Operation, &[&str])] = &[
    (Operation::GetVpcs, &["DescribeVpcs"]),
    (Operation::GetSubnets, &["DescribeSubnets"]),
    (Operation::GetSecurityGroups, &["DescribeSecurityGroups"]),
    // The instances, then their interfaces (DescribeInstances has no
    // interface tags).
    (
        Operation::GetInstances,
        &["DescribeInstances", "DescribeNetworkInterfaces"],
    ),
    (
        Operation::GetDetachedInterfaces,
        &["DescribeNetworkInterfaces"],
    ),
    (Operation::GetInstanceLimits, &["DescribeInstanceTypes"]),
    (
        Operation::CreateInterface,
        &[
            // Whether the asked device index is taken, before creating.
            "DescribeNetworkInterfaces",
            "CreateNetworkInterface",
            "AttachNetworkInterface",
            // DeleteOnTermination.
            "ModifyNetworkInterfaceAttribute",
        ],
    ),
    (
        Operation::DeleteInterface,
        &[
            // The interface and its attachment.
            "DescribeNetworkInterfaces",
            "DetachNetworkInterface",
            // The first delete meets the interface still detaching (EC2
            // takes seconds to detach) and is refused; the provider retries
            // once a second, so a slower detach makes more.
            "DeleteNetworkInterface",
            "DeleteNetworkInterface",
        ],
    ),
    // SecondaryPrivateIpAddressCount or Ipv4PrefixCount: one call.
    (Operation::AssignIps, &["AssignPrivateIpAddresses"]),
    // One call per kind: two when both addresses and prefixes are given.
    (Operation::UnassignIps, &["UnassignPrivateIpAddresses"]),
];

/// [`BUCKETS`] and [`COSTS`] as the WIT record.
pub fn rate_model() -> RateModel {
    RateModel {
        buckets: BUCKETS
            .iter()
            .map(|&(name, (burst, per_second))| bucket(name, burst, per_second))
            .collect(),
        costs: COSTS
            .iter()
            .map(|&(operation, calls)| cost_in_own_buckets(operation, calls))
            .collect(),
    }
}
