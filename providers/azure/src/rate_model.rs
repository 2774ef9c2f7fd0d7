//! ARM's rate model: its token buckets per subscription and region (reads,
//! writes, deletes), and the calls each operation makes on its ordinary
//! path (`README.md` has the table). get-subnets' VirtualNetworks.List is
//! an upper bound: the get-subnets that follows a get-vpcs within a second
//! on the same instance takes get-vpcs' listing and calls nothing
//! (`kept_networks`).

use ipam_provider_sdk::rate::{bucket, cost};
use ipam_provider_sdk::{Operation, RateModel};

pub const READS: &str = "arm-reads";
pub const WRITES: &str = "arm-writes";
pub const DELETES: &str = "arm-deletes";

/// Polling a long-running operation is a GET: a read.
const POLL: (&str, &str) = ("AsyncOperation.Get", READS);

pub fn rate_model() -> RateModel {
    let vnets = ("VirtualNetworks.List", READS);
    RateModel {
        buckets: vec![
            bucket(READS, 250, 25.0),
            bucket(WRITES, 200, 10.0),
            // Declared as ARM documents it; no operation deletes (an address
            // is released by a PUT without its configuration).
            bucket(DELETES, 200, 10.0),
        ],
        costs: vec![
            cost(Operation::GetVpcs, &[vnets]),
            // An upper bound: none right after get-vpcs (`kept_networks`).
            cost(Operation::GetSubnets, &[vnets]),
            cost(
                Operation::GetSecurityGroups,
                &[("NetworkSecurityGroups.List", READS)],
            ),
            cost(
                Operation::GetInstances,
                &[
                    ("VirtualMachineScaleSets.List", READS),
                    ("VirtualMachineScaleSetVMs.List", READS),
                    (
                        "NetworkInterfaces.ListVirtualMachineScaleSetNetworkInterfaces",
                        READS,
                    ),
                    ("VirtualMachines.List", READS),
                    ("NetworkInterfaces.List", READS),
                ],
            ),
            cost(
                Operation::GetInstanceLimits,
                &[("ResourceSkus.List", READS)],
            ),
            // No call: the provider creates no NICs, so none of its own are
            // ever left detached.
            cost(Operation::GetDetachedInterfaces, &[]),
            // The scale-set path; a standalone NIC's (NetworkInterfaces.Get,
            // CreateOrUpdate, the poll, Get) takes one read fewer. The NIC is
            // read first for its Failed configurations, which the VM's model
            // does not show. An operation that ends Failed is undone (the
            // NIC read, the VM read, a write and its poll more): off the
            // ordinary path, not declared.
            cost(
                Operation::AssignIps,
                &[
                    (
                        "NetworkInterfaces.GetVirtualMachineScaleSetNetworkInterface",
                        READS,
                    ),
                    ("VirtualMachineScaleSetVMs.Get", READS),
                    ("VirtualMachineScaleSetVMs.Update", WRITES),
                    POLL,
                    (
                        "NetworkInterfaces.GetVirtualMachineScaleSetNetworkInterface",
                        READS,
                    ),
                ],
            ),
            cost(
                Operation::UnassignIps,
                &[
                    (
                        "NetworkInterfaces.GetVirtualMachineScaleSetNetworkInterface",
                        READS,
                    ),
                    ("VirtualMachineScaleSetVMs.Get", READS),
                    ("VirtualMachineScaleSetVMs.Update", WRITES),
                    POLL,
                ],
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use ipam_provider_sdk::rate::{check, enabled_operations, operation_name};
    use ipam_provider_sdk::Provider;

    use super::*;
    use crate::AzureProvider;

    #[test]
    fn every_enabled_operation_has_a_cost_in_declared_buckets() {
        let info = AzureProvider::info();
        assert_eq!(check(&info), Ok(()));
        for operation in enabled_operations(&info.capabilities) {
            let cost = info
                .rate_model
                .costs
                .iter()
                .find(|c| c.operation == operation);
            let reaches_arm = operation != Operation::GetDetachedInterfaces;
            assert!(
                cost.is_some_and(|c| c.calls.is_empty() != reaches_arm),
                "{}",
                operation_name(operation)
            );
        }
    }

    #[test]
    fn the_buckets_are_arms_per_subscription_and_region() {
        let model = rate_model();
        let size = |name: &str| {
            model
                .buckets
                .iter()
                .find(|b| b.name == name)
                .map(|b| (b.burst, b.per_second))
        };
        assert_eq!(size(READS), Some((250, 25.0)));
        assert_eq!(size(WRITES), Some((200, 10.0)));
        assert_eq!(size(DELETES), Some((200, 10.0)));
        let calls = |operation, bucket: &str| {
            model
                .costs
                .iter()
                .filter(|c| c.operation == operation)
                .flat_map(|c| &c.calls)
                .filter(|call| call.bucket == bucket)
                .count()
        };
        assert_eq!(calls(Operation::AssignIps, WRITES), 1);
        assert_eq!(calls(Operation::UnassignIps, WRITES), 1);
        assert_eq!(calls(Operation::GetInstances, WRITES), 0);
        // The scale-set path: the NIC, the VM, the poll, the NIC again.
        assert_eq!(calls(Operation::AssignIps, READS), 4);
        assert_eq!(calls(Operation::UnassignIps, READS), 3);
    }
}
