//! The mock's rate model: EC2's, as the AWS provider declares it
//! (`providers/aws/src/rate_model.rs`), so that a host serving the mock keeps
//! to what it would keep to against EC2. EC2 throttles each API action on a
//! token bucket of its own; each bucket here is named after its action, with
//! the size EC2 documents for an account and region, and each operation
//! lists the calls the AWS provider makes on its ordinary success path. The
//! mock makes no calls: the model only shapes the host's pace, as EC2's
//! would.

use ipam_provider_sdk::rate::{bucket, cost_in_own_buckets};
use ipam_provider_sdk::{Operation, RateModel};

/// EC2's buckets for the actions the AWS provider calls: (action, burst,
/// refill per second).
pub const BUCKETS: &[(&str, u32, f64)] = &[
    ("DescribeVpcs", 100, 20.0),
    ("DescribeSubnets", 100, 20.0),
    ("DescribeSecurityGroups", 100, 20.0),
    ("DescribeInstances", 100, 20.0),
    ("DescribeNetworkInterfaces", 100, 20.0),
    ("DescribeInstanceTypes", 100, 20.0),
    ("CreateNetworkInterface", 100, 5.0),
    ("DeleteNetworkInterface", 100, 5.0),
    ("AssignPrivateIpAddresses", 100, 5.0),
    ("UnassignPrivateIpAddresses", 100, 5.0),
    ("ModifyNetworkInterfaceAttribute", 100, 5.0),
    ("AttachNetworkInterface", 50, 5.0),
    ("DetachNetworkInterface", 50, 5.0),
];

/// The EC2 calls the AWS provider makes in each operation that succeeds the
/// ordinary way, in order.
pub const COSTS: &[(Operation, &[&str])] = &[
    (Operation::GetVpcs, &["DescribeVpcs"]),
    (Operation::GetSubnets, &["DescribeSubnets"]),
    (Operation::GetSecurityGroups, &["DescribeSecurityGroups"]),
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
            // takes seconds); the provider retries once a second.
            "DeleteNetworkInterface",
            "DeleteNetworkInterface",
        ],
    ),
    (Operation::AssignIps, &["AssignPrivateIpAddresses"]),
    (Operation::UnassignIps, &["UnassignPrivateIpAddresses"]),
];

/// [`BUCKETS`] and [`COSTS`] as the WIT record.
pub fn rate_model() -> RateModel {
    RateModel {
        buckets: BUCKETS
            .iter()
            .map(|&(name, burst, per_second)| bucket(name, burst, per_second))
            .collect(),
        costs: COSTS
            .iter()
            .map(|&(operation, calls)| cost_in_own_buckets(operation, calls))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use ipam_provider_sdk::rate::{check, enabled_operations, OPERATIONS};
    use ipam_provider_sdk::Provider;

    use super::*;
    use crate::MockProvider;

    #[test]
    fn the_model_costs_every_operation_in_declared_buckets() {
        let info = MockProvider::info();
        assert_eq!(check(&info), Ok(()));
        assert_eq!(enabled_operations(&info.capabilities), OPERATIONS);
    }

    /// The calls of one operation, by name.
    fn calls(operation: Operation) -> Vec<String> {
        let model = rate_model();
        let cost = model.costs.into_iter().find(|c| c.operation == operation);
        cost.map(|c| c.calls.into_iter().map(|call| call.name).collect())
            .unwrap_or_default()
    }

    #[test]
    fn every_api_has_its_own_bucket_of_ec2s_size() {
        let model = rate_model();
        for call in model.costs.iter().flat_map(|c| &c.calls) {
            assert_eq!(call.name, call.bucket);
        }
        let size = |name: &str| {
            let b = model.buckets.iter().find(|b| b.name == name).unwrap();
            (b.burst, b.per_second)
        };
        assert_eq!(size("DescribeInstances"), (100, 20.0));
        assert_eq!(size("CreateNetworkInterface"), (100, 5.0));
        assert_eq!(size("AttachNetworkInterface"), (50, 5.0));
        assert_eq!(size("DetachNetworkInterface"), (50, 5.0));
        assert_eq!(
            calls(Operation::CreateInterface),
            [
                "DescribeNetworkInterfaces",
                "CreateNetworkInterface",
                "AttachNetworkInterface",
                "ModifyNetworkInterfaceAttribute"
            ]
        );
        assert_eq!(
            calls(Operation::GetInstances),
            ["DescribeInstances", "DescribeNetworkInterfaces"]
        );
    }
}
