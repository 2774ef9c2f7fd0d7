//! Where nodes live: the [`NodeStore`] trait the engine uses, and an
//! in-memory implementation (the embedded default and the tests). The
//! Kubernetes implementation maps the same calls onto CiliumNode watches and
//! patches.
//!
//! The operator writes nodes through [`NodeUpdate`]s, which name only the
//! fields it owns, so a change the agent made meanwhile survives.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::broadcast;

use ipam_ciliumnode::{CiliumNode, NodeUpdate};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEvent {
    /// Created or changed; carries the node as it is now (shared: every
    /// subscriber gets the same copy).
    Upserted(Arc<CiliumNode>),
    Deleted(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("node {0} does not exist")]
    NotFound(String),
    #[error("node store: {0}")]
    Backend(String),
}

/// Something the operator did to a node, told to people (a Kubernetes
/// Event on the CiliumNode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    pub warning: bool,
    /// PascalCase, e.g. `InterfaceCreated`.
    pub reason: &'static str,
    pub note: String,
}

#[async_trait]
pub trait NodeStore: Send + Sync {
    /// Changes from now on. Subscribe before [`NodeStore::list`] so that no
    /// change falls between the two.
    fn subscribe(&self) -> broadcast::Receiver<NodeEvent>;
    async fn list(&self) -> Result<Vec<CiliumNode>, StoreError>;
    async fn get(&self, name: &str) -> Result<Option<CiliumNode>, StoreError>;
    /// Apply the operator's changes; the node as it is afterwards.
    async fn update(&self, name: &str, update: &NodeUpdate) -> Result<CiliumNode, StoreError>;
    /// Pods scheduled to the node and waiting for an address (surge
    /// allocation asks for them on top of the watermark). A change is
    /// announced as an [`NodeEvent::Upserted`] of the node.
    fn pending_pods(&self, name: &str) -> u32;
    /// Tell people what happened to the node. Best effort: a failure is
    /// logged by the store, never returned.
    async fn announce(&self, name: &str, announcement: Announcement);
}

/// Nodes in memory. Besides the operator's [`NodeStore`] calls it offers the
/// agent's side (register, used addresses, release answers), so a simulation
/// or a test can play the agents.
pub struct MemoryNodeStore {
    nodes: Mutex<BTreeMap<String, CiliumNode>>,
    pending_pods: Mutex<BTreeMap<String, u32>>,
    announcements: Mutex<Vec<(String, Announcement)>>,
    events: broadcast::Sender<NodeEvent>,
}

impl Default for MemoryNodeStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryNodeStore {
    pub fn new() -> Self {
        // A subscriber that falls this far behind gets `Lagged` and must
        // list again, as a Kubernetes watcher relists after 410 Gone.
        let (events, _) = broadcast::channel(4096);
        Self {
            nodes: Mutex::new(BTreeMap::new()),
            pending_pods: Mutex::new(BTreeMap::new()),
            announcements: Mutex::new(Vec::new()),
            events,
        }
    }

    fn with_nodes<R>(
        &self,
        f: impl FnOnce(&mut BTreeMap<String, CiliumNode>) -> R,
    ) -> Result<R, StoreError> {
        let mut nodes = self
            .nodes
            .lock()
            .map_err(|_| StoreError::Backend("node map poisoned".into()))?;
        Ok(f(&mut nodes))
    }

    fn publish(&self, event: NodeEvent) {
        // No subscriber is not an error: nobody is watching yet.
        let _ = self.events.send(event);
    }

    /// The agent registers (or rewrites) its node.
    pub fn upsert(&self, node: CiliumNode) -> Result<(), StoreError> {
        self.with_nodes(|nodes| nodes.insert(node.name.clone(), node.clone()))?;
        self.publish(NodeEvent::Upserted(Arc::new(node)));
        Ok(())
    }

    pub fn delete(&self, name: &str) -> Result<(), StoreError> {
        if self.with_nodes(|nodes| nodes.remove(name))?.is_some() {
            self.publish(NodeEvent::Deleted(name.to_string()));
        }
        Ok(())
    }

    /// What was announced so far, per node, in order.
    pub fn announcements(&self) -> Vec<(String, Announcement)> {
        self.announcements
            .lock()
            .map(|a| a.clone())
            .unwrap_or_default()
    }

    /// Pods waiting for an address on the node (the scheduler's side).
    pub fn set_pending_pods(&self, name: &str, pods: u32) -> Result<(), StoreError> {
        self.pending_pods
            .lock()
            .map_err(|_| StoreError::Backend("pending pods poisoned".into()))?
            .insert(name.to_string(), pods);
        if let Some(node) = self.with_nodes(|nodes| nodes.get(name).cloned())? {
            self.publish(NodeEvent::Upserted(Arc::new(node)));
        }
        Ok(())
    }

    /// The agent changes its own fields (status.ipam.used, its release
    /// answers) on the node as it is in the store.
    pub fn agent_update(
        &self,
        name: &str,
        f: impl FnOnce(&mut CiliumNode),
    ) -> Result<CiliumNode, StoreError> {
        let node = self.with_nodes(|nodes| {
            nodes.get_mut(name).map(|node| {
                f(node);
                node.clone()
            })
        })?;
        let node = node.ok_or_else(|| StoreError::NotFound(name.to_string()))?;
        self.publish(NodeEvent::Upserted(Arc::new(node.clone())));
        Ok(node)
    }

    /// Write what an agent decided for `node` as the agent writes it: its
    /// own fields of `next` (status.ipam.used and release-ips), if it changed
    /// anything, and its pods still pending. The node as it is afterwards.
    pub fn agent_acted(
        &self,
        node: CiliumNode,
        next: Option<CiliumNode>,
        pending: u32,
    ) -> Result<CiliumNode, StoreError> {
        let node = match next {
            Some(next) => self.agent_update(&node.name, move |n| {
                n.status.ipam.used = next.status.ipam.used;
                n.status.ipam.release_ips = next.status.ipam.release_ips;
            })?,
            None => node,
        };
        if self.pending_pods(&node.name) != pending {
            self.set_pending_pods(&node.name, pending)?;
        }
        Ok(node)
    }
}

#[async_trait]
impl NodeStore for MemoryNodeStore {
    fn subscribe(&self) -> broadcast::Receiver<NodeEvent> {
        self.events.subscribe()
    }

    async fn list(&self) -> Result<Vec<CiliumNode>, StoreError> {
        self.with_nodes(|nodes| nodes.values().cloned().collect())
    }

    async fn get(&self, name: &str) -> Result<Option<CiliumNode>, StoreError> {
        self.with_nodes(|nodes| nodes.get(name).cloned())
    }

    async fn update(&self, name: &str, update: &NodeUpdate) -> Result<CiliumNode, StoreError> {
        let node = self.with_nodes(|nodes| {
            nodes.get_mut(name).map(|node| {
                update.apply_to(node);
                node.clone()
            })
        })?;
        let node = node.ok_or_else(|| StoreError::NotFound(name.to_string()))?;
        self.publish(NodeEvent::Upserted(Arc::new(node.clone())));
        Ok(node)
    }

    fn pending_pods(&self, name: &str) -> u32 {
        self.pending_pods
            .lock()
            .map(|pending| pending.get(name).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    async fn announce(&self, name: &str, announcement: Announcement) {
        if let Ok(mut all) = self.announcements.lock() {
            all.push((name.to_string(), announcement));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_ciliumnode::{AllocationIp, ReleaseState};

    fn node(name: &str) -> CiliumNode {
        CiliumNode {
            name: name.into(),
            ..Default::default()
        }
    }

    fn pool(ips: &[&str]) -> BTreeMap<String, AllocationIp> {
        ips.iter()
            .map(|ip| {
                (
                    ip.to_string(),
                    AllocationIp {
                        owner: None,
                        resource: Some("eni-1".into()),
                    },
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn an_update_keeps_what_the_agent_wrote_meanwhile() {
        let store = MemoryNodeStore::new();
        store.upsert(node("n1")).unwrap();
        // The operator read the node, then the agent wrote used addresses
        // and answered a release; then the operator's update lands.
        let seen_by_operator = store.get("n1").await.unwrap().unwrap();
        store
            .agent_update("n1", |n| {
                n.status.ipam.used.insert(
                    "10.0.0.5".into(),
                    AllocationIp {
                        owner: Some("pod-a".into()),
                        resource: None,
                    },
                );
                n.status
                    .ipam
                    .release_ips
                    .insert("10.0.0.9".into(), ReleaseState::ReadyForRelease);
            })
            .unwrap();
        let update = NodeUpdate {
            pool: Some(pool(&["10.0.0.5", "10.0.0.6"])),
            release_ips: [("10.0.0.7".to_string(), Some(ReleaseState::MarkedForRelease))].into(),
            ..Default::default()
        };
        let after = store.update(&seen_by_operator.name, &update).await.unwrap();
        assert_eq!(after.spec.ipam.pool.len(), 2);
        assert!(
            after.status.ipam.used.contains_key("10.0.0.5"),
            "the agent's used address survived"
        );
        assert_eq!(
            after.status.ipam.release_ips["10.0.0.9"],
            ReleaseState::ReadyForRelease,
            "the agent's answer survived"
        );
        assert_eq!(
            after.status.ipam.release_ips["10.0.0.7"],
            ReleaseState::MarkedForRelease
        );
    }

    #[tokio::test]
    async fn release_entries_are_set_and_removed_one_by_one() {
        let store = MemoryNodeStore::new();
        store.upsert(node("n1")).unwrap();
        let mark = NodeUpdate {
            release_ips: [
                ("a".to_string(), Some(ReleaseState::MarkedForRelease)),
                ("b".to_string(), Some(ReleaseState::Released)),
            ]
            .into(),
            ..Default::default()
        };
        store.update("n1", &mark).await.unwrap();
        let unmark = NodeUpdate {
            release_ips: [("a".to_string(), None)].into(),
            ..Default::default()
        };
        let after = store.update("n1", &unmark).await.unwrap();
        assert_eq!(
            after.status.ipam.release_ips,
            [("b".to_string(), ReleaseState::Released)].into()
        );
    }

    #[tokio::test]
    async fn subscribers_see_every_change_and_unknown_nodes_are_errors() {
        let store = MemoryNodeStore::new();
        let mut events = store.subscribe();
        store.upsert(node("n1")).unwrap();
        store
            .update(
                "n1",
                &NodeUpdate {
                    operator_error: Some("subnet full".into()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        store.delete("n1").unwrap();
        store.delete("n1").unwrap();
        assert!(matches!(events.recv().await.unwrap(), NodeEvent::Upserted(n) if n.name == "n1"));
        assert!(
            matches!(events.recv().await.unwrap(), NodeEvent::Upserted(n) if n.status.ipam.operator_status.error == "subnet full")
        );
        assert_eq!(
            events.recv().await.unwrap(),
            NodeEvent::Deleted("n1".into())
        );
        assert!(
            events.try_recv().is_err(),
            "deleting a missing node publishes nothing"
        );
        assert_eq!(
            store.update("n1", &NodeUpdate::default()).await,
            Err(StoreError::NotFound("n1".into()))
        );
        assert!(store.list().await.unwrap().is_empty());
    }
}
