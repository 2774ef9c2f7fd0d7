//! The simulated cilium-agents: on every tick each node's agent acts as
//! [`ipam_pool::agent::act`] decides (pods started or stopped to match the
//! workload, the release handshake answered) and writes its own fields.

use ipam_engine::{MemoryNodeStore, NodeStore, StoreError};
use ipam_pool::agent::{act, satisfied, settled};

/// What the agents saw on one tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentTick {
    pub nodes: usize,
    /// Nodes with every pod running and nothing needed.
    pub satisfied: usize,
    /// Satisfied, and nothing excess or being released either.
    pub settled: usize,
    pub pods_running: u64,
    pub pods_pending: u64,
    pub pool: u64,
}

/// Every node's agent acts once.
pub async fn tick(store: &MemoryNodeStore, pods_wanted: u32) -> Result<AgentTick, StoreError> {
    let mut out = AgentTick::default();
    for node in store.list().await? {
        let (changed, pending) = act(&node, pods_wanted);
        let node = store.agent_acted(node, changed, pending)?;
        out.nodes += 1;
        out.satisfied += usize::from(satisfied(&node, pending));
        out.settled += usize::from(settled(&node, pending));
        out.pods_running += node.status.ipam.used.len() as u64;
        out.pods_pending += u64::from(pending);
        out.pool += node.spec.ipam.pool.len() as u64;
    }
    Ok(out)
}
