//! Simulated cilium-agents, as `ipam-simulate` plays them: each tick, pods
//! start on free pool addresses (or stay pending) and stop (highest address
//! first) to match the wanted count, and the release handshake is answered
//! as the agent does: ready-for-release for an unused address, do-not-release
//! for a used one, and a released entry dropped once the address left the
//! pool.

use std::time::Duration;

use ipam_ciliumnode::{AllocationIp, CiliumNode, ReleaseState};
use ipam_engine::{MemoryNodeStore, NodeStore};
use ipam_pool::{watermarks, NodeView};

/// The node after the agent acted on it (if it changed), and its pods left
/// pending.
fn act(node: &CiliumNode, pods_wanted: u32) -> (Option<CiliumNode>, u32) {
    let mut next = node.clone();
    let ipam = &mut next.status.ipam;
    let pool = &node.spec.ipam.pool;
    let answers: Vec<(String, Option<ReleaseState>)> = ipam
        .release_ips
        .iter()
        .filter_map(|(ip, state)| match state {
            ReleaseState::MarkedForRelease if ipam.used.contains_key(ip) => {
                Some((ip.clone(), Some(ReleaseState::DoNotRelease)))
            }
            ReleaseState::MarkedForRelease => {
                Some((ip.clone(), Some(ReleaseState::ReadyForRelease)))
            }
            ReleaseState::Released if !pool.contains_key(ip) => Some((ip.clone(), None)),
            _ => None,
        })
        .collect();
    for (ip, answer) in answers {
        match answer {
            Some(state) => ipam.release_ips.insert(ip, state),
            None => ipam.release_ips.remove(&ip),
        };
    }
    let wanted = pods_wanted as usize;
    while ipam.used.len() > wanted {
        ipam.used.pop_last();
    }
    let free: Vec<String> = pool
        .keys()
        .filter(|ip| !ipam.used.contains_key(*ip) && !ipam.release_ips.contains_key(*ip))
        .take(wanted.saturating_sub(ipam.used.len()))
        .cloned()
        .collect();
    for ip in free {
        let owner = Some(format!("pod-{}", ip.replace('.', "-")));
        ipam.used.insert(
            ip,
            AllocationIp {
                owner,
                resource: None,
            },
        );
    }
    let pending = u32::try_from(wanted.saturating_sub(ipam.used.len())).unwrap_or(u32::MAX);
    let changed = next.status.ipam != node.status.ipam;
    (changed.then_some(next), pending)
}

/// Every node's agent acts once, wanting `pods` pods.
pub async fn tick(store: &MemoryNodeStore, pods: u32) {
    for node in store.list().await.unwrap() {
        let (changed, pending) = act(&node, pods);
        if let Some(next) = changed {
            let status = next.status.ipam;
            store
                .agent_update(&node.name, move |n| {
                    n.status.ipam.used = status.used;
                    n.status.ipam.release_ips = status.release_ips;
                })
                .unwrap();
        }
        if store.pending_pods(&node.name) != pending {
            store.set_pending_pods(&node.name, pending).unwrap();
        }
    }
}

fn counts(node: &CiliumNode) -> (u32, u32) {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    (
        count(node.spec.ipam.pool.len()),
        count(node.status.ipam.used.len()),
    )
}

/// Every pod has an address, nothing more is needed, nothing is excess,
/// and no release is in progress.
pub fn settled(node: &CiliumNode, pending: u32) -> bool {
    let (available, used) = counts(node);
    pending == 0
        && watermarks::needed(node.watermarks(), available, used) == 0
        && watermarks::excess(node.watermarks(), available, used) == 0
        && node
            .status
            .ipam
            .release_ips
            .values()
            .all(|state| *state == ReleaseState::Released)
}

/// Let the agents act every 5 simulated seconds until every node is
/// settled with `pods` pods (failing after `limit`); the ticks it took.
pub async fn settle(store: &MemoryNodeStore, pods: u32, limit: Duration) -> u32 {
    let deadline = tokio::time::Instant::now() + limit;
    let mut ticks = 0;
    loop {
        tick(store, pods).await;
        ticks += 1;
        let nodes = store.list().await.unwrap();
        if nodes
            .iter()
            .all(|n| settled(n, store.pending_pods(&n.name)))
        {
            return ticks;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not settled in {limit:?}: {:?}",
            nodes
                .iter()
                .map(|n| (&n.name, n.spec.ipam.pool.len(), n.status.ipam.used.len()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}
