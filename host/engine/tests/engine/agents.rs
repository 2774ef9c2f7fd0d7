//! Simulated cilium-agents, as [`ipam_pool::agent`] decides (pods take free
//! pool addresses, the release handshake answered as the agent does),
//! ticked until every node settles.

use std::time::Duration;

use ipam_engine::{MemoryNodeStore, NodeStore};
use ipam_pool::agent::{act, settled};

/// Every node's agent acts once, wanting `pods` pods, and writes only its
/// own fields.
pub async fn tick(store: &MemoryNodeStore, pods: u32) {
    for node in store.list().await.unwrap() {
        let (changed, pending) = act(&node, pods);
        store.agent_acted(node, changed, pending).unwrap();
    }
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
