//! The policy routes of pod addresses on secondary interfaces, as the agent
//! needs them: which route an allocation wants (from where the operator
//! says its address lives), and the table that installs them. The netlink
//! implementation is `ipam-node-routes`'; `--routing=false` uses none.

use std::net::IpAddr;

use async_trait::async_trait;
use ipam_ciliumnode::CiliumNode;
use ipam_node_routes::{Mac, PodRoute};
use ipam_pool::agent::allocator::{Allocation, Allocations};
use ipam_pool::agent::placement::placement;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RouteError(pub String);

#[async_trait]
pub trait RouteTable: Send + Sync {
    /// Install one address's rules and its table's routes (idempotent).
    async fn install(&self, route: &PodRoute) -> Result<(), RouteError>;
    /// Remove every route of exactly these addresses and install the
    /// missing ones of `wanted`: after a restart, and after a DEL.
    async fn reconcile(&self, wanted: &[PodRoute]) -> Result<(), RouteError>;
}

/// The route an allocation wants: an IPv4 address on a secondary interface
/// the operator has published with a gateway. None otherwise (the primary
/// interface's addresses route through the main table).
pub fn wanted_route(node: &CiliumNode, ip: IpAddr, allocation: &Allocation) -> Option<PodRoute> {
    let IpAddr::V4(address) = ip else {
        return None;
    };
    let placed = placement(node, allocation.resource.as_deref(), ip)?;
    if !placed.is_secondary() {
        return None;
    }
    let Some(IpAddr::V4(gateway)) = placed.gateway else {
        return None;
    };
    let Ok(interface_mac) = placed.mac.parse::<Mac>() else {
        tracing::warn!(%ip, mac = %placed.mac, "the interface's MAC in the CiliumNode is malformed: no routes");
        return None;
    };
    Some(PodRoute {
        address,
        interface_mac,
        interface_number: placed.interface_number,
        gateway,
    })
}

/// Every allocation's wanted route.
pub fn wanted_routes(node: &CiliumNode, allocations: &Allocations) -> Vec<PodRoute> {
    allocations
        .iter()
        .filter_map(|(ip, allocation)| wanted_route(node, *ip, allocation))
        .collect()
}

/// No routes at all (`--routing=false`: another component routes).
pub struct NoRoutes;

#[async_trait]
impl RouteTable for NoRoutes {
    async fn install(&self, _: &PodRoute) -> Result<(), RouteError> {
        Ok(())
    }
    async fn reconcile(&self, _: &[PodRoute]) -> Result<(), RouteError> {
        Ok(())
    }
}
