//! The release half of per-node pool maintenance, executed: ask the pure
//! core for a plan ([`ipam_pool::release_plan`]), write the handshake's marks,
//! unassign what the agent released or delete the interface freed whole,
//! record it in the cache, announce it, and mark what left as `released`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use ipam_ciliumnode::{CiliumNode, NodeUpdate, ReleaseState};
use ipam_pool::release_plan::{self, FreeInterface, ReleaseAction, ReleasePlanInput, Unassign};
use tokio::time::Instant;

use crate::error::MaintainError;
use crate::metrics::{step_type, DurationLabel, SubnetLabel};
use crate::node_store::Announcement;
use crate::parts::Parts;
use crate::publish::{publish, write};

/// What the operator remembers between rounds: when each node's candidates
/// were first seen as excess.
#[derive(Default)]
pub struct ReleaseMemory(Mutex<BTreeMap<String, BTreeMap<String, std::time::Instant>>>);

impl ReleaseMemory {
    fn get(&self, node: &str) -> BTreeMap<String, std::time::Instant> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(node)
            .cloned()
            .unwrap_or_default()
    }

    fn set(&self, node: &str, first_seen: BTreeMap<String, std::time::Instant>) {
        let mut memory = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if first_seen.is_empty() {
            memory.remove(node);
        } else {
            memory.insert(node.to_string(), first_seen);
        }
    }

    /// No candidate of this node is waiting out the delay.
    pub fn is_empty(&self, node: &str) -> bool {
        !self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(node)
    }

    /// Addresses that left the cloud are no longer candidates.
    fn forget_addresses(&self, node: &str, addresses: &[String]) {
        if addresses.is_empty() {
            return;
        }
        let mut memory = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(first_seen) = memory.get_mut(node) {
            first_seen.retain(|ip, _| !addresses.contains(ip));
            if first_seen.is_empty() {
                memory.remove(node);
            }
        }
    }

    pub fn forget(&self, node: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(node);
    }
}

/// What one round did to a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseRound {
    pub marked: Vec<String>,
    pub unmarked: Vec<String>,
    /// Addresses that left the cloud (unassigned, or with their interface).
    pub released: Vec<String>,
    /// Interfaces deleted because nothing on them was needed.
    pub freed_interfaces: Vec<String>,
}

/// One release round for a node with `pending_pods` waiting for addresses,
/// at `now`; the round and the node as it is afterwards.
pub async fn release_round(
    parts: &Parts,
    memory: &ReleaseMemory,
    node: CiliumNode,
    pending_pods: u32,
    now: Instant,
) -> Result<(ReleaseRound, CiliumNode), MaintainError> {
    let Some(instance) = parts.cache.instance(&node.spec.instance_id) else {
        return Ok((ReleaseRound::default(), node));
    };
    let pool = ipam_pool::pool::pool_of(&node, &instance, &parts.cache.withheld());
    let plan = release_plan::plan(&ReleasePlanInput {
        node: &node,
        instance: &instance,
        pool: &pool,
        pending_pods,
        capabilities: parts.cloud.info().capabilities,
        free_interfaces: parts.settings.free_interfaces,
        ownership: &parts.settings.ownership(),
        first_seen: &memory.get(&node.name),
        now: now.into_std(),
        release_delay: parts.settings.release_delay,
    });

    // Kept before anything is tried: a failed call must not restart the
    // delay of the candidates first seen this round.
    memory.set(&node.name, plan.first_seen.clone());

    let mut round = ReleaseRound {
        marked: plan.mark.clone(),
        unmarked: plan.unmark.clone(),
        ..ReleaseRound::default()
    };
    let mut states: BTreeMap<String, Option<ReleaseState>> = BTreeMap::new();
    for ip in plan.mark {
        states.insert(ip, Some(ReleaseState::MarkedForRelease));
    }
    for ip in plan.unmark {
        states.insert(ip, None);
    }
    match plan.action {
        ReleaseAction::FreeInterface(interface) => {
            free_interface(parts, &node, interface, &mut round).await?;
        }
        ReleaseAction::Unassign(groups) => {
            for group in groups {
                unassign(parts, &node, group, &mut round).await?;
            }
        }
    }
    for ip in &round.released {
        states.insert(ip.clone(), Some(ReleaseState::Released));
    }
    // What left the cloud is no candidate any more: remembered, it would
    // keep the node's release pending for a round with nothing to do.
    memory.forget_addresses(&node.name, &round.released);
    let changed = !round.released.is_empty() || !round.freed_interfaces.is_empty();
    let ready_at = Instant::now();
    let mut node = node;
    if !states.is_empty() {
        let update = NodeUpdate {
            release_ips: states,
            ..Default::default()
        };
        node = write(parts, &node.name, &update, ready_at).await?;
    }
    if changed {
        if let Some(updated) = publish(parts, &node, None, ready_at).await? {
            node = updated;
        }
    }
    Ok((round, node))
}

async fn free_interface(
    parts: &Parts,
    node: &CiliumNode,
    interface: FreeInterface,
    round: &mut ReleaseRound,
) -> Result<(), MaintainError> {
    let started = Instant::now();
    let result = parts.cloud.delete_interface(&interface.interface).await;
    observe_release(
        parts,
        step_type::DELETE_INTERFACE,
        &interface.subnet,
        result.is_ok(),
        started,
    );
    result?;
    parts
        .cache
        .deleted(&node.spec.instance_id, &interface.interface);
    parts.metrics.interface_deletion_ops.inc();
    tracing::info!(node = %node.name, interface = %interface.interface, index = interface.index,
        "freed an interface none of whose addresses were needed");
    let note = format!(
        "deleted {} (index {}): nothing on it was needed",
        interface.interface, interface.index
    );
    round.released.extend(interface.addresses);
    round.freed_interfaces.push(interface.interface);
    parts
        .store
        .announce(
            &node.name,
            Announcement {
                warning: false,
                reason: "InterfaceDeleted",
                note,
            },
        )
        .await;
    Ok(())
}

/// Unassign the ready single addresses of one interface.
async fn unassign(
    parts: &Parts,
    node: &CiliumNode,
    group: Unassign,
    round: &mut ReleaseRound,
) -> Result<(), MaintainError> {
    let Unassign {
        interface,
        subnet,
        addresses,
    } = group;
    let started = Instant::now();
    let result = parts.cloud.unassign_ips(&interface, &addresses, &[]).await;
    observe_release(
        parts,
        step_type::RELEASE_IP,
        &subnet,
        result.is_ok(),
        started,
    );
    result?;
    parts
        .cache
        .unassigned(&node.spec.instance_id, &interface, &addresses, &[]);
    parts
        .metrics
        .ip_release_ops
        .get_or_create(&SubnetLabel { subnet_id: subnet })
        .inc_by(addresses.len() as u64);
    tracing::info!(node = %node.name, %interface, count = addresses.len(),
        "released addresses the agent freed");
    let note = format!("released {} addresses from {interface}", addresses.len());
    parts
        .store
        .announce(
            &node.name,
            Announcement {
                warning: false,
                reason: "AddressesReleased",
                note,
            },
        )
        .await;
    round
        .released
        .extend(addresses.iter().map(ToString::to_string));
    Ok(())
}

fn observe_release(parts: &Parts, kind: &'static str, subnet: &str, ok: bool, started: Instant) {
    parts
        .metrics
        .release_duration_seconds
        .get_or_create(&DurationLabel {
            r#type: kind,
            status: if ok { "success" } else { "failed" },
            subnet_id: subnet.to_string(),
        })
        .observe(started.elapsed().as_secs_f64());
}
