//! The rate model a provider declares in [`ProviderInfo`]: the cloud's token
//! buckets, and the calls each operation makes in them. The host keeps its
//! calls within these buckets, so declare what your cloud documents for an
//! account and the calls your code really makes on an operation's ordinary
//! success path (a call made twice is listed twice). An operation your
//! capabilities enable without a cost is refused when the provider is loaded.
//!
//! ```
//! use ipam_provider_sdk::rate::{bucket, check, cost, cost_in_own_buckets};
//! use ipam_provider_sdk::{Operation, RateModel};
//!
//! // A cloud whose API throttles reads and writes on two buckets:
//! let model = RateModel {
//!     buckets: vec![bucket("read", 100, 20.0), bucket("write", 50, 5.0)],
//!     costs: vec![
//!         cost(Operation::GetVpcs, &[("GET /networks", "read")]),
//!         cost(
//!             Operation::CreateInterface,
//!             &[("POST /nics", "write"), ("POST /nics/attach", "write")],
//!         ),
//!     ],
//! };
//! // One that throttles each API on its own bucket, as EC2 does:
//! let ec2 = cost_in_own_buckets(
//!     Operation::GetInstances,
//!     &["DescribeInstances", "DescribeNetworkInterfaces"],
//! );
//! assert_eq!(ec2.calls[1].bucket, "DescribeNetworkInterfaces");
//! ```

use crate::{ApiCall, Capabilities, Operation, OperationCost, ProviderInfo, RateBucket};

/// Every operation of the `provider` interface that reaches the cloud.
pub const OPERATIONS: [Operation; 10] = [
    Operation::GetVpcs,
    Operation::GetSubnets,
    Operation::GetSecurityGroups,
    Operation::GetInstances,
    Operation::GetDetachedInterfaces,
    Operation::GetInstanceLimits,
    Operation::CreateInterface,
    Operation::DeleteInterface,
    Operation::AssignIps,
    Operation::UnassignIps,
];

/// The operation's WIT name (`create-interface`).
pub fn operation_name(operation: Operation) -> &'static str {
    match operation {
        Operation::GetVpcs => "get-vpcs",
        Operation::GetSubnets => "get-subnets",
        Operation::GetSecurityGroups => "get-security-groups",
        Operation::GetInstances => "get-instances",
        Operation::GetDetachedInterfaces => "get-detached-interfaces",
        Operation::GetInstanceLimits => "get-instance-limits",
        Operation::CreateInterface => "create-interface",
        Operation::DeleteInterface => "delete-interface",
        Operation::AssignIps => "assign-ips",
        Operation::UnassignIps => "unassign-ips",
    }
}

/// A bucket: `burst` calls at once, then `per_second` more each second.
pub fn bucket(name: &str, burst: u32, per_second: f64) -> RateBucket {
    RateBucket {
        name: name.to_string(),
        burst,
        per_second,
    }
}

/// What `operation` costs: its calls, each as (the cloud's name for the
/// call, the bucket it takes a token of).
pub fn cost(operation: Operation, calls: &[(&str, &str)]) -> OperationCost {
    OperationCost {
        operation,
        calls: calls
            .iter()
            .map(|(name, bucket)| ApiCall {
                name: name.to_string(),
                bucket: bucket.to_string(),
            })
            .collect(),
    }
}

/// What `operation` costs on a cloud that throttles each API on a bucket of
/// its own, named after it (EC2): each call takes a token of the bucket of
/// its name.
pub fn cost_in_own_buckets(operation: Operation, calls: &[&str]) -> OperationCost {
    let calls: Vec<(&str, &str)> = calls.iter().map(|call| (*call, *call)).collect();
    cost(operation, &calls)
}

/// The operations a provider with these capabilities may be asked for, which
/// its rate model must cost: every read, assign-ips (no capability gates it),
/// and create-interface, delete-interface and unassign-ips (`release`) when
/// declared.
pub fn enabled_operations(capabilities: &Capabilities) -> Vec<Operation> {
    OPERATIONS
        .into_iter()
        .filter(|operation| match operation {
            Operation::CreateInterface => capabilities.create_interface,
            Operation::DeleteInterface => capabilities.delete_interface,
            Operation::UnassignIps => capabilities.release,
            _ => true,
        })
        .collect()
}

/// Check `info`'s rate model against the rules the WIT states: every
/// operation its capabilities enable ([`enabled_operations`]) has a cost, at
/// most one; every bucket a call names is declared, once; a bucket's burst is
/// at least 1 and its refill a finite number above 0. The error lists every
/// problem, separated by `; `.
pub fn check(info: &ProviderInfo) -> Result<(), String> {
    let model = &info.rate_model;
    let mut problems = Vec::new();
    for (i, bucket) in model.buckets.iter().enumerate() {
        if model.buckets[..i].iter().any(|b| b.name == bucket.name) {
            problems.push(format!("bucket {:?} is declared twice", bucket.name));
        }
        if bucket.burst < 1 {
            problems.push(format!("bucket {:?} has a burst of 0", bucket.name));
        }
        if !(bucket.per_second.is_finite() && bucket.per_second > 0.0) {
            problems.push(format!(
                "bucket {:?} refills {} per second",
                bucket.name, bucket.per_second
            ));
        }
    }
    for operation in enabled_operations(&info.capabilities) {
        if !model.costs.iter().any(|c| c.operation == operation) {
            problems.push(format!("{} has no cost", operation_name(operation)));
        }
    }
    for (i, cost) in model.costs.iter().enumerate() {
        let name = operation_name(cost.operation);
        if model.costs[..i]
            .iter()
            .any(|c| c.operation == cost.operation)
        {
            problems.push(format!("{name} has two costs"));
        }
        for call in &cost.calls {
            if !model.buckets.iter().any(|b| b.name == call.bucket) {
                problems.push(format!(
                    "{name}: call {} names bucket {:?}, which is not declared",
                    call.name, call.bucket
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RateModel;

    fn info(capabilities: Capabilities, rate_model: RateModel) -> ProviderInfo {
        ProviderInfo {
            name: "test".into(),
            version: "0.1.0".into(),
            capabilities,
            max_concurrency: 1,
            rate_model,
        }
    }

    fn all(on: bool) -> Capabilities {
        Capabilities {
            create_interface: on,
            release: on,
            prefixes: on,
            delete_interface: on,
        }
    }

    fn one_call_each(operations: &[Operation]) -> RateModel {
        RateModel {
            buckets: vec![bucket("api", 10, 2.0)],
            costs: operations
                .iter()
                .map(|&op| cost(op, &[("call", "api")]))
                .collect(),
        }
    }

    #[test]
    fn operation_names_are_the_wit_names_and_all_ten_are_listed() {
        let names: Vec<&str> = OPERATIONS.into_iter().map(operation_name).collect();
        assert_eq!(
            names,
            [
                "get-vpcs",
                "get-subnets",
                "get-security-groups",
                "get-instances",
                "get-detached-interfaces",
                "get-instance-limits",
                "create-interface",
                "delete-interface",
                "assign-ips",
                "unassign-ips"
            ]
        );
    }

    #[test]
    fn capabilities_enable_their_operations_and_the_rest_always_are() {
        let read_only = enabled_operations(&all(false));
        assert_eq!(read_only.len(), 7);
        assert!(read_only.contains(&Operation::AssignIps));
        assert!(!read_only.contains(&Operation::CreateInterface));
        assert!(!read_only.contains(&Operation::DeleteInterface));
        assert!(!read_only.contains(&Operation::UnassignIps));
        assert_eq!(enabled_operations(&all(true)), OPERATIONS);
    }

    #[test]
    fn a_model_costing_every_enabled_operation_passes() {
        assert_eq!(check(&info(all(true), one_call_each(&OPERATIONS))), Ok(()));
        let read_only = enabled_operations(&all(false));
        assert_eq!(check(&info(all(false), one_call_each(&read_only))), Ok(()));
    }

    #[test]
    fn an_enabled_operation_without_a_cost_is_named() {
        let read_only = enabled_operations(&all(false));
        assert_eq!(
            check(&info(all(true), one_call_each(&read_only))),
            Err(
                "create-interface has no cost; delete-interface has no cost; \
                 unassign-ips has no cost"
                    .into()
            )
        );
    }

    #[test]
    fn buckets_must_be_declared_once_with_a_burst_and_a_refill() {
        let mut model = one_call_each(&OPERATIONS);
        model.buckets.push(bucket("api", 5, 1.0));
        model.buckets.push(bucket("empty", 0, 1.0));
        model.buckets.push(bucket("still", 1, 0.0));
        model.buckets.push(bucket("nan", 1, f64::NAN));
        model.costs[0] = cost(Operation::GetVpcs, &[("DescribeVpcs", "describe")]);
        model.costs.push(cost(Operation::AssignIps, &[]));
        assert_eq!(
            check(&info(all(true), model)),
            Err(
                "bucket \"api\" is declared twice; bucket \"empty\" has a burst of 0; \
                 bucket \"still\" refills 0 per second; bucket \"nan\" refills NaN per second; \
                 get-vpcs: call DescribeVpcs names bucket \"describe\", which is not declared; \
                 assign-ips has two costs"
                    .into()
            )
        );
    }

    #[test]
    fn a_cost_in_own_buckets_names_each_calls_bucket_after_it() {
        let cost = cost_in_own_buckets(
            Operation::DeleteInterface,
            &["DetachNetworkInterface", "DeleteNetworkInterface"],
        );
        let calls: Vec<(&str, &str)> = cost
            .calls
            .iter()
            .map(|c| (c.name.as_str(), c.bucket.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                ("DetachNetworkInterface", "DetachNetworkInterface"),
                ("DeleteNetworkInterface", "DeleteNetworkInterface")
            ]
        );
    }
}
