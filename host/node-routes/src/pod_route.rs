//! What one pod address on a secondary interface needs, as plain data.
//!
//! As Cilium's agent does in ENI mode: traffic to the pod is looked up in
//! the main table (rule priority 20) and traffic from the pod in a table of
//! its interface's own (rule priority 111, table `10 + interface number`),
//! which routes everything via that interface's subnet gateway.

use std::fmt;
use std::net::Ipv4Addr;

use crate::{Mac, PlanError};

/// Priority of the `to <pod>/32 lookup main` rule (Cilium's ingress rule).
pub const TO_POD_PRIORITY: u32 = 20;
/// Priority of the `from <pod>/32 lookup <table>` rule (Cilium's egress rule).
pub const FROM_POD_PRIORITY: u32 = 111;
/// The interface's table is this plus its interface number (device index).
pub const TABLE_OFFSET: u32 = 10;
/// The kernel's main routing table.
pub const MAIN_TABLE: u32 = 254;

/// Table ids the kernel gives a meaning of its own: unspec, and default,
/// main and local. An interface table landing on one would send pods'
/// traffic through, or wipe, the host's own routes.
const RESERVED_TABLES: [u32; 4] = [0, 253, MAIN_TABLE, 255];

/// One pod address given from a secondary interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PodRoute {
    pub address: Ipv4Addr,
    /// Finds the interface on the host: names can change, the MAC cannot.
    pub interface_mac: Mac,
    /// The cloud's number for the interface (the ENI's device index).
    pub interface_number: u32,
    /// The interface subnet's gateway (on AWS, the subnet's first address).
    pub gateway: Ipv4Addr,
}

impl PodRoute {
    /// The interface's routing table.
    pub fn table(&self) -> Result<u32, PlanError> {
        route_table(self.interface_number)
    }

    /// The two rules this pod address needs.
    pub fn rules(&self) -> Result<[PodRule; 2], PlanError> {
        Ok([
            PodRule::to_pod(self.address),
            PodRule::from_pod(self.address, self.table()?),
        ])
    }

    /// The routes its interface's table needs.
    pub fn table_routes(&self) -> Result<TableRoutes, PlanError> {
        Ok(TableRoutes {
            table: self.table()?,
            interface_mac: self.interface_mac,
            gateway: self.gateway,
        })
    }
}

/// `10 + interface_number`, refusing numbers that overflow or land on a
/// table the kernel reserves.
pub fn route_table(interface_number: u32) -> Result<u32, PlanError> {
    let table = interface_number
        .checked_add(TABLE_OFFSET)
        .ok_or(PlanError::TableOverflow { interface_number })?;
    if RESERVED_TABLES.contains(&table) {
        return Err(PlanError::ReservedTable {
            interface_number,
            table,
        });
    }
    Ok(table)
}

pub(crate) fn is_reserved_table(table: u32) -> bool {
    RESERVED_TABLES.contains(&table)
}

/// Which way a pod rule selects traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// `to <pod>/32`, priority 20, main table.
    ToPod,
    /// `from <pod>/32`, priority 111, the interface's table.
    FromPod,
}

/// One policy rule for one pod address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRule {
    pub direction: Direction,
    pub address: Ipv4Addr,
    pub table: u32,
}

impl PodRule {
    pub fn to_pod(address: Ipv4Addr) -> Self {
        Self {
            direction: Direction::ToPod,
            address,
            table: MAIN_TABLE,
        }
    }

    pub fn from_pod(address: Ipv4Addr, table: u32) -> Self {
        Self {
            direction: Direction::FromPod,
            address,
            table,
        }
    }

    pub fn priority(&self) -> u32 {
        match self.direction {
            Direction::ToPod => TO_POD_PRIORITY,
            Direction::FromPod => FROM_POD_PRIORITY,
        }
    }
}

impl fmt::Display for PodRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let selector = match self.direction {
            Direction::ToPod => "to",
            Direction::FromPod => "from",
        };
        write!(
            f,
            "priority {} {selector} {}/32 lookup {}",
            self.priority(),
            self.address,
            self.table
        )
    }
}

/// The routes of one interface table: `<gateway>/32 scope link dev <if>`
/// and `default via <gateway> dev <if>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TableRoutes {
    pub table: u32,
    pub interface_mac: Mac,
    pub gateway: Ipv4Addr,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_ten_plus_the_interface_number_and_never_a_reserved_one() {
        let cases = [
            (0, Ok(10)),
            (1, Ok(11)),
            (2, Ok(12)),
            (242, Ok(252)),
            (
                243,
                Err(PlanError::ReservedTable {
                    interface_number: 243,
                    table: 253,
                }),
            ),
            (
                244,
                Err(PlanError::ReservedTable {
                    interface_number: 244,
                    table: 254,
                }),
            ),
            (
                245,
                Err(PlanError::ReservedTable {
                    interface_number: 245,
                    table: 255,
                }),
            ),
            (246, Ok(256)),
            (
                u32::MAX - 9,
                Err(PlanError::TableOverflow {
                    interface_number: u32::MAX - 9,
                }),
            ),
            (u32::MAX - 10, Ok(u32::MAX)),
        ];
        for (number, want) in cases {
            assert_eq!(route_table(number), want, "interface {number}");
        }
    }

    #[test]
    fn a_pod_route_needs_a_to_rule_in_main_and_a_from_rule_in_its_table() {
        let route = PodRoute {
            address: Ipv4Addr::new(192, 168, 1, 10),
            interface_mac: Mac([2, 0, 0, 0, 0, 1]),
            interface_number: 1,
            gateway: Ipv4Addr::new(192, 168, 1, 1),
        };
        let [to, from] = route.rules().unwrap();
        assert_eq!(to.to_string(), "priority 20 to 192.168.1.10/32 lookup 254");
        assert_eq!(
            from.to_string(),
            "priority 111 from 192.168.1.10/32 lookup 11"
        );
        assert_eq!(
            route.table_routes().unwrap(),
            TableRoutes {
                table: 11,
                interface_mac: route.interface_mac,
                gateway: route.gateway
            }
        );
    }
}
