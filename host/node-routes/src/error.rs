//! Typed errors: wanted routes that cannot be planned, and what failed on
//! the host, naming what was being done.

use std::net::Ipv4Addr;

use crate::Mac;

/// Wanted pod routes that cannot be turned into rules and routes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("interface number {interface_number} overflows the routing table id (10 + number)")]
    TableOverflow { interface_number: u32 },
    #[error("interface number {interface_number} gives table {table}, which the kernel reserves")]
    ReservedTable { interface_number: u32, table: u32 },
    #[error(
        "table {table} is wanted for two interfaces: MAC {first_mac} gateway {first_gateway} \
         and MAC {second_mac} gateway {second_gateway}"
    )]
    ConflictingTable {
        table: u32,
        first_mac: Mac,
        first_gateway: Ipv4Addr,
        second_mac: Mac,
        second_gateway: Ipv4Addr,
    },
    #[error(
        "pod address {address} is wanted on two interface tables, {first_table} and {second_table}"
    )]
    ConflictingAddress {
        address: Ipv4Addr,
        first_table: u32,
        second_table: u32,
    },
}

/// What went wrong changing the host's routing.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("no interface has MAC address {mac}")]
    InterfaceNotFound { mac: Mac },
    #[error("opening a netlink socket: {0}")]
    Connect(#[source] std::io::Error),
    #[error("no tokio runtime to drive the netlink connection")]
    NoRuntime,
    #[error("netlink: {doing}: {source}")]
    Netlink {
        doing: String,
        #[source]
        source: rtnetlink::Error,
    },
}
