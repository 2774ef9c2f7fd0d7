//! The operations of the WIT contract, typed: a misspelled name is a compile
//! error, not a call that silently costs the wrong rate-limit token.

use std::fmt;

/// One operation a provider exports (`wit/0.1.0/provider.wit`), besides
/// `info` and `configure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    GetVpcs,
    GetSubnets,
    GetSecurityGroups,
    GetInstances,
    GetDetachedInterfaces,
    GetInstanceLimits,
    CreateInterface,
    DeleteInterface,
    AssignIps,
    UnassignIps,
}

impl Operation {
    pub const ALL: [Operation; 10] = [
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

    /// The operation's name in the WIT (kebab-case), as metrics and logs
    /// label it.
    pub const fn wit_name(self) -> &'static str {
        match self {
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

    /// The operation named so in the WIT.
    pub fn from_wit_name(name: &str) -> Option<Operation> {
        Operation::ALL.into_iter().find(|op| op.wit_name() == name)
    }

    /// Whether calling it twice has the effect of calling it once (the WIT
    /// promises this for reads, delete-interface and unassign-ips), so a
    /// failure that may have happened can be retried.
    pub const fn is_idempotent(self) -> bool {
        !matches!(self, Operation::CreateInterface | Operation::AssignIps)
    }

    /// Whether it changes the cloud.
    pub const fn is_mutating(self) -> bool {
        matches!(
            self,
            Operation::CreateInterface
                | Operation::DeleteInterface
                | Operation::AssignIps
                | Operation::UnassignIps
        )
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.wit_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_only_create_and_assign_are_not_idempotent() {
        for op in Operation::ALL {
            assert_eq!(Operation::from_wit_name(op.wit_name()), Some(op));
        }
        assert_eq!(Operation::from_wit_name("get-vpc"), None);
        let not_idempotent: Vec<_> = Operation::ALL
            .into_iter()
            .filter(|op| !op.is_idempotent())
            .collect();
        assert_eq!(
            not_idempotent,
            [Operation::CreateInterface, Operation::AssignIps]
        );
        assert_eq!(
            Operation::ALL.iter().filter(|op| op.is_mutating()).count(),
            4
        );
    }
}
