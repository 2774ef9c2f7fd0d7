//! The mock's rate model: EC2's, as the AWS provider declares it, taken
//! from the AWS provider's own table (`providers/aws/src/ec2_rates.rs`) so
//! that a host serving the mock keeps to what it would keep to against EC2.
//! The mock makes no calls: the model only shapes the host's pace, as EC2's
//! would.

#[path = "../../aws/src/ec2_rates.rs"]
mod ec2_rates;

pub use ec2_rates::{rate_model, BUCKETS, COSTS};

#[cfg(test)]
mod tests {
    use ipam_provider_sdk::rate::{check, enabled_operations, OPERATIONS};
    use ipam_provider_sdk::{Operation, Provider};

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
