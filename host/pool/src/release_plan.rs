//! What one release round for a node should do. Excess addresses go through
//! the release-ips handshake ([`handshake::step`]) and only those the agent
//! declared ready leave the cloud. Single secondary addresses are unassigned,
//! one call per interface; an interface of ours whose every address is
//! excess and unused is chosen whole ([`select::interface_to_free`]) and
//! deleted once the agent has released all of it. Prefix addresses only ever
//! go with their interface. The engine executes plans.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use ipam_ciliumnode::{AllocationIp, CiliumNode};
use ipam_cloud::{Capabilities, Instance, NetworkInterface};

use crate::handshake::{self, HandshakeInput};
use crate::node_view::NodeView;
use crate::pool::count;
use crate::select;
use crate::tags::Ownership;
use crate::watermarks;

#[derive(Debug, Clone, Copy)]
pub struct ReleasePlanInput<'a> {
    pub node: &'a CiliumNode,
    pub instance: &'a Instance,
    /// The node's pool as its instance gives it now.
    pub pool: &'a BTreeMap<String, AllocationIp>,
    /// Pods waiting for an address on the node: the free addresses they are
    /// about to take are not excess.
    pub pending_pods: u32,
    pub capabilities: Capabilities,
    /// The operator's setting: delete interfaces of ours that hold nothing
    /// needed (only when the provider can delete interfaces).
    pub free_interfaces: bool,
    /// Which interfaces are this operator's to free.
    pub ownership: &'a Ownership,
    /// When the operator first saw each candidate as excess.
    pub first_seen: &'a BTreeMap<String, Instant>,
    pub now: Instant,
    pub release_delay: Duration,
}

/// Addresses to unassign from one interface in one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unassign {
    pub interface: String,
    pub subnet: String,
    pub addresses: Vec<Ipv4Addr>,
}

/// An interface to delete, and the pool addresses that go with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeInterface {
    pub interface: String,
    pub index: u32,
    pub subnet: String,
    pub addresses: Vec<String>,
}

/// What leaves the cloud this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseAction {
    /// Every address of the interface is released by the agent (or it has
    /// none): the interface goes, and its addresses with it.
    FreeInterface(FreeInterface),
    /// The ready single addresses, grouped by interface.
    Unassign(Vec<Unassign>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleasePlan {
    /// The memory of first-seen times for the next round.
    pub first_seen: BTreeMap<String, Instant>,
    /// release-ips entries to set to `marked-for-release`.
    pub mark: Vec<String>,
    /// release-ips entries to remove (cancelled, or refused by the agent).
    pub unmark: Vec<String>,
    pub action: ReleaseAction,
}

/// This round's release candidates: a whole interface when one can be freed,
/// else unused secondaries from the emptiest interface. The interface to free,
/// if that is the choice.
fn candidates<'a>(
    node: &CiliumNode,
    instance: &'a Instance,
    pool: &BTreeMap<String, AllocationIp>,
    pending_pods: u32,
    free_interfaces: bool,
    ownership: &Ownership,
) -> (BTreeSet<String>, Option<&'a NetworkInterface>) {
    let used: BTreeSet<String> = node.status.ipam.used.keys().cloned().collect();
    let excess = watermarks::excess(
        node.watermarks(),
        count(pool.len()),
        count(used.len()).saturating_add(pending_pods),
    );
    let exclude = node.exclude_interface_tags();
    let first = node.first_interface_index();
    if free_interfaces {
        if let Some(choice) = select::interface_to_free(
            &instance.interfaces,
            &used,
            excess,
            first,
            &exclude,
            ownership,
            node.spec.eni.use_primary_address,
        ) {
            return (
                choice.addresses.into_iter().collect(),
                Some(choice.interface),
            );
        }
    }
    let addresses =
        select::addresses_to_release(&instance.interfaces, &used, excess, first, &exclude)
            .map(|choice| choice.addresses.into_iter().collect())
            .unwrap_or_default();
    (addresses, None)
}

/// Ready addresses grouped by the interface that has them; addresses no
/// interface has (any more, or ever: text that is no address) are left out.
fn unassign_groups(instance: &Instance, ready: &[String]) -> Vec<Unassign> {
    let mut by_interface: BTreeMap<&str, Unassign> = BTreeMap::new();
    for ip in ready.iter().filter_map(|ip| ip.parse::<Ipv4Addr>().ok()) {
        if let Some(interface) = instance
            .interfaces
            .iter()
            .find(|i| i.addresses.contains(&ip))
        {
            by_interface
                .entry(&interface.id)
                .or_insert_with(|| Unassign {
                    interface: interface.id.clone(),
                    subnet: interface.subnet_id.clone(),
                    addresses: Vec::new(),
                })
                .addresses
                .push(ip);
        }
    }
    by_interface.into_values().collect()
}

pub fn plan(input: &ReleasePlanInput<'_>) -> ReleasePlan {
    let node = input.node;
    let (candidates, whole) = if input.capabilities.release {
        candidates(
            node,
            input.instance,
            input.pool,
            input.pending_pods,
            input.free_interfaces && input.capabilities.delete_interface,
            input.ownership,
        )
    } else {
        (BTreeSet::new(), None)
    };
    let step = handshake::step(HandshakeInput {
        candidates: &candidates,
        status: &node.status.ipam.release_ips,
        pool: input.pool,
        first_seen: input.first_seen,
        now: input.now,
        delay: input.release_delay,
    });
    let ready: BTreeSet<&String> = step.unassign.iter().collect();
    let action = match whole {
        Some(interface) if candidates.iter().all(|ip| ready.contains(ip)) => {
            ReleaseAction::FreeInterface(FreeInterface {
                interface: interface.id.clone(),
                index: interface.index,
                subnet: interface.subnet_id.clone(),
                addresses: select::pool_addresses(interface, node.spec.eni.use_primary_address),
            })
        }
        _ => ReleaseAction::Unassign(unassign_groups(input.instance, &step.unassign)),
    };
    ReleasePlan {
        first_seen: step.first_seen,
        mark: step.mark,
        unmark: step.unmark,
        action,
    }
}

#[cfg(test)]
mod tests;
