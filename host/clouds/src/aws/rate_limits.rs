//! EC2's request throttling as a rate model: the buckets EC2 documents for
//! an account and region, and what each WIT operation costs in them given
//! what the AWS provider component calls inside it (create-interface is
//! CreateNetworkInterface + AttachNetworkInterface +
//! ModifyNetworkInterfaceAttribute; delete-interface is detach + delete).

use ipam_cloud::rate::{BucketConfig, RateLimits};
use ipam_cloud::Operation;

/// Describe* burst 100, 20/s; mutating calls burst 100, 5/s; attach and
/// detach burst 50, 5/s.
pub fn rate_limits() -> RateLimits {
    let limits = RateLimits::new([
        (
            "describe",
            BucketConfig {
                burst: 100.0,
                per_second: 20.0,
            },
        ),
        (
            "mutate",
            BucketConfig {
                burst: 100.0,
                per_second: 5.0,
            },
        ),
        (
            "attach",
            BucketConfig {
                burst: 50.0,
                per_second: 5.0,
            },
        ),
    ]);
    Operation::ALL
        .into_iter()
        .fold(limits, |limits, operation| {
            let cost: &[(&str, f64)] = match operation {
                Operation::CreateInterface => &[("mutate", 2.0), ("attach", 1.0)],
                Operation::DeleteInterface => &[("mutate", 1.0), ("attach", 1.0)],
                Operation::AssignIps | Operation::UnassignIps => &[("mutate", 1.0)],
                Operation::GetVpcs
                | Operation::GetSubnets
                | Operation::GetSecurityGroups
                | Operation::GetInstances
                | Operation::GetDetachedInterfaces
                | Operation::GetInstanceLimits => &[("describe", 1.0)],
            };
            // The buckets are declared just above: a missing one is a bug here.
            limits
                .with_cost(operation, cost)
                .expect("EC2's cost table names only its own buckets")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_costs_something_and_create_takes_an_attach() {
        let limits = rate_limits();
        for operation in Operation::ALL {
            assert!(!limits.cost(operation).is_empty(), "{operation}");
        }
        assert_eq!(
            limits.cost(Operation::CreateInterface),
            &[(1, 2.0), (2, 1.0)]
        );
        assert_eq!(limits.buckets()[2].0, "attach");
    }
}
