//! The AWS provider's rate model: EC2's table (`ec2_rates.rs`, which the
//! mock declares too), checked here against this crate's capabilities.

pub use crate::ec2_rates::rate_model;

#[cfg(test)]
mod tests {
    use ipam_provider_sdk::rate::{check, enabled_operations, operation_name};
    use ipam_provider_sdk::Provider;

    use super::*;
    use crate::AwsProvider;

    #[test]
    fn every_operation_the_capabilities_enable_has_a_cost_in_declared_buckets() {
        let info = AwsProvider::info();
        let model = &info.rate_model;
        for operation in enabled_operations(&info.capabilities) {
            let cost = model.costs.iter().find(|c| c.operation == operation);
            let cost = cost.unwrap_or_else(|| panic!("{} has no cost", operation_name(operation)));
            assert!(!cost.calls.is_empty(), "{}", operation_name(operation));
        }
        for call in model.costs.iter().flat_map(|c| &c.calls) {
            assert!(
                model.buckets.iter().any(|b| b.name == call.bucket),
                "{} names an undeclared bucket {}",
                call.name,
                call.bucket
            );
        }
        assert_eq!(check(&info), Ok(()));
    }

    #[test]
    fn each_action_has_its_own_bucket_of_ec2s_documented_size() {
        let model = rate_model();
        for call in model.costs.iter().flat_map(|c| &c.calls) {
            assert_eq!(call.name, call.bucket, "a bucket per action");
        }
        let size = |name: &str| {
            let found = model.buckets.iter().find(|b| b.name == name);
            found.map(|b| (b.burst, b.per_second))
        };
        for describe in [
            "DescribeVpcs",
            "DescribeSubnets",
            "DescribeSecurityGroups",
            "DescribeInstances",
            "DescribeNetworkInterfaces",
            "DescribeInstanceTypes",
        ] {
            assert_eq!(size(describe), Some((100, 20.0)), "{describe}");
        }
        for mutate in [
            "CreateNetworkInterface",
            "DeleteNetworkInterface",
            "AssignPrivateIpAddresses",
            "UnassignPrivateIpAddresses",
            "ModifyNetworkInterfaceAttribute",
        ] {
            assert_eq!(size(mutate), Some((100, 5.0)), "{mutate}");
        }
        for attach in ["AttachNetworkInterface", "DetachNetworkInterface"] {
            assert_eq!(size(attach), Some((50, 5.0)), "{attach}");
        }
        assert_eq!(model.buckets.len(), 13);
    }
}
