//! The release half of per-node pool maintenance: excess addresses go
//! through the release-ips handshake ([`release::step`]) and only those the
//! agent declared ready are unassigned. Only single addresses are released;
//! a delegated /28 stays until the whole interface is freed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::allocate::{pool_of, AllocateError};
use super::cache::InstanceCache;
use super::node::{AllocationIp, CiliumNode};
use super::release::{self, ReleaseInput, MARKED_FOR_RELEASE, RELEASED};
use super::select;
use super::store::{NodeStore, NodeUpdate};
use super::watermarks;
use crate::cloud::CloudApi;

/// What the operator remembers between rounds: when each node's candidates
/// were first seen as excess.
#[derive(Default)]
pub struct ReleaseMemory(Mutex<BTreeMap<String, BTreeMap<String, std::time::Instant>>>);

/// What one round did to a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseRound {
    pub marked: Vec<String>,
    pub unmarked: Vec<String>,
    pub released: Vec<String>,
}

fn excess_candidates(
    node: &CiliumNode,
    instance: &crate::cloud::Instance,
    pool: &BTreeMap<String, AllocationIp>,
) -> BTreeSet<String> {
    let available = u32::try_from(pool.len()).unwrap_or(u32::MAX);
    let used: BTreeSet<String> = node.status.ipam.used.keys().cloned().collect();
    let excess = watermarks::excess(
        node.watermarks(),
        available,
        u32::try_from(used.len()).unwrap_or(u32::MAX),
    );
    let exclude = node.exclude_interface_tags();
    let first = node.first_interface_index();
    select::addresses_to_release(&instance.interfaces, &used, excess, first, &exclude)
        .map(|choice| choice.addresses.into_iter().collect())
        .unwrap_or_default()
}

/// One release round for a node at `now`.
pub async fn release_round(
    cloud: &dyn CloudApi,
    cache: &InstanceCache,
    store: &dyn NodeStore,
    memory: &ReleaseMemory,
    delay: Duration,
    name: &str,
    now: Instant,
) -> Result<ReleaseRound, AllocateError> {
    let node = store
        .get(name)
        .await?
        .ok_or_else(|| AllocateError::NoSuchNode(name.to_string()))?;
    let Some(instance) = cache.instance(&node.spec.instance_id) else {
        return Ok(ReleaseRound::default());
    };
    let pool = pool_of(&node, &instance);
    let candidates = if cloud.info().capabilities.release {
        excess_candidates(&node, &instance, &pool)
    } else {
        BTreeSet::new()
    };
    let first_seen = memory
        .0
        .lock()
        .map(|m| m.get(name).cloned().unwrap_or_default())
        .unwrap_or_default();
    let step = release::step(ReleaseInput {
        candidates: &candidates,
        status: &node.status.ipam.release_ips,
        first_seen: &first_seen,
        now: now.into_std(),
        delay,
    });
    if let Ok(mut memory) = memory.0.lock() {
        memory.insert(name.to_string(), step.first_seen.clone());
    }

    let mut update = NodeUpdate::default();
    for ip in &step.mark {
        update
            .release_ips
            .insert(ip.clone(), Some(MARKED_FOR_RELEASE.to_string()));
    }
    for ip in &step.unmark {
        update.release_ips.insert(ip.clone(), None);
    }
    // Unassign what the agent released, one call per interface.
    let mut by_interface: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for ip in &step.unassign {
        if let Some(interface) = pool.get(ip).and_then(|entry| entry.resource.clone()) {
            by_interface.entry(interface).or_default().push(ip.clone());
        }
    }
    let mut released = Vec::new();
    for (interface, addresses) in by_interface {
        cloud.unassign_ips(&interface, &addresses, &[]).await?;
        cache.unassigned(&node.spec.instance_id, &interface, &addresses, &[]);
        tracing::info!(node = %name, %interface, count = addresses.len(), "released addresses the agent freed");
        for ip in &addresses {
            update
                .release_ips
                .insert(ip.clone(), Some(RELEASED.to_string()));
        }
        released.extend(addresses);
    }
    if !released.is_empty() {
        if let Some(instance) = cache.instance(&node.spec.instance_id) {
            update.pool = Some(pool_of(&node, &instance));
        }
    }
    if update != NodeUpdate::default() {
        store.update(name, &update).await?;
    }
    Ok(ReleaseRound {
        marked: step.mark,
        unmarked: step.unmark,
        released,
    })
}
