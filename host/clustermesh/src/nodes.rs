//! The nodes store: agents register their node at
//! `cilium/state/nodes/v1/<cluster>/<name>`; the operator deletes the keys
//! of nodes that are gone, as cilium-operator does, so peers stop routing
//! to them.
//!
//! - [`CiliumNodesView`] keeps the names of the cluster's CiliumNodes from
//!   a watch ([`CiliumNodesView::follow`]; tests feed
//!   [`CiliumNodesView::event`]) and reports each one deleted.
//! - [`NodesStore`] is the `nodes-store` duty: each round sweeps this
//!   cluster's node keys (deleting those whose name has had no CiliumNode
//!   for the grace, [`NodesSettings::grace`]: an agent writes its key
//!   seconds before its CiliumNode appears), then deletes a node's key as
//!   its CiliumNode goes, until the interval ends. A node on which an agent
//!   pod runs ([`AgentPodsView`](crate::agent_pods::AgentPodsView)) keeps
//!   its key either way, and is looked at again a grace later: the agent
//!   would write it again at once. A sweep never runs on unsynced views
//!   (the duty waits for them) and deletes nothing when there are no
//!   CiliumNodes at all: that is far likelier a watch gone wrong than a
//!   cluster with no nodes.
//!   Malformed values are logged with their key and judged by their key
//!   alone: a value is never deleted for its shape.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::Client;
use tokio::sync::{broadcast, watch};

use ipam_ciliumnode::kube::api_resource;
use ipam_duty::{Duty, RoundReport};
use ipam_kvstore::{KeyValue, KvError, SharedStore};

use crate::agent_pods::AgentPodsView;
use crate::cluster::{keys, ClusterInfo};
use crate::node::{AgentNode, NodeValueError};
use crate::round::{round, Heard, Incremental};
use crate::services::forward;
use grace::Waiting;

#[derive(Default)]
struct Names {
    names: BTreeSet<String>,
    relisted: Option<BTreeSet<String>>,
}

/// The names of the cluster's CiliumNodes.
pub struct CiliumNodesView {
    names: Mutex<Names>,
    deleted: broadcast::Sender<String>,
    synced: watch::Sender<bool>,
}

impl Default for CiliumNodesView {
    fn default() -> Self {
        Self::new()
    }
}

impl CiliumNodesView {
    pub fn new() -> Self {
        // A subscriber that falls this far behind sweeps instead.
        let (deleted, _) = broadcast::channel(1024);
        Self {
            names: Mutex::new(Names::default()),
            deleted,
            synced: watch::Sender::new(false),
        }
    }

    fn names(&self) -> MutexGuard<'_, Names> {
        // Every update is one insert, remove or swap: a panic while holding
        // the lock leaves the set whole.
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True once CiliumNodes have been listed.
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// Names of CiliumNodes deleted from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.deleted.subscribe()
    }

    fn contains(&self, name: &str) -> bool {
        self.names().names.contains(name)
    }

    fn snapshot(&self) -> BTreeSet<String> {
        self.names().names.clone()
    }

    /// A CiliumNode watch event.
    pub fn event(&self, event: Event<DynamicObject>) {
        let mut names = self.names();
        match event {
            Event::Apply(node) => {
                if let Some(name) = node.metadata.name {
                    names.names.insert(name);
                }
            }
            Event::Delete(node) => {
                if let Some(name) = node.metadata.name {
                    names.names.remove(&name);
                    let _ = self.deleted.send(name);
                }
            }
            Event::Init => names.relisted = Some(BTreeSet::new()),
            Event::InitApply(node) => {
                if let (Some(list), Some(name)) = (names.relisted.as_mut(), node.metadata.name) {
                    list.insert(name);
                }
            }
            Event::InitDone => {
                let listed = names.relisted.take().unwrap_or_default();
                let old = std::mem::replace(&mut names.names, listed);
                for gone in old.difference(&names.names) {
                    let _ = self.deleted.send(gone.clone());
                }
                self.synced.send_replace(true);
            }
        }
    }

    /// Follow CiliumNodes until the client is dropped. Watch errors are
    /// logged and retried with backoff.
    pub async fn follow(self: Arc<Self>, client: Client) {
        let api = Api::<DynamicObject>::all_with(client, &api_resource());
        let nodes = watcher::watcher(api, watcher::Config::default().any_semantic());
        forward(nodes, "CiliumNode", |e| self.event(e)).await;
    }
}

/// How the nodes store runs.
#[derive(Debug, Clone)]
pub struct NodesSettings {
    pub cluster: ClusterInfo,
    /// Time between sweeps (one round); default 5 minutes.
    pub interval: Duration,
    /// How soon a failed kvstore operation is followed by a sweep; default
    /// 5 seconds.
    pub retry_interval: Duration,
    /// How long sweeps must find a key without a CiliumNode (at the same
    /// revision) before deleting it; default 1 minute, as cilium-operator
    /// waits after it sees a node key written.
    pub grace: Duration,
}

impl NodesSettings {
    pub fn new(cluster: ClusterInfo) -> Self {
        Self {
            cluster,
            interval: Duration::from_secs(300),
            retry_interval: Duration::from_secs(5),
            grace: Duration::from_secs(60),
        }
    }
}

/// What a sweep found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Sweep {
    /// Keys (with the revision read) of nodes that have no CiliumNode.
    pub stale: Vec<(String, i64)>,
    /// Values that are not what agents write, or that name another node
    /// or cluster than their key.
    pub malformed: Vec<NodeValueError>,
    /// Keys under the prefix that are not `<prefix><name>`.
    pub foreign: Vec<String>,
}

/// Judge this cluster's node keys against the CiliumNodes' names.
pub(crate) fn sweep(cluster: &str, listed: &[KeyValue], nodes: &BTreeSet<String>) -> Sweep {
    let prefix = keys::nodes_of(cluster);
    let mut found = Sweep::default();
    for kv in listed {
        let name = kv.key.strip_prefix(&prefix).unwrap_or_default();
        if name.is_empty() || name.contains('/') {
            found.foreign.push(kv.key.clone());
            continue;
        }
        match AgentNode::parse(&kv.key, &kv.value) {
            Ok(node) => {
                for (field, value, expected) in [
                    ("Name", &node.name, name),
                    ("Cluster", &node.cluster, cluster),
                ] {
                    if value != expected {
                        found.malformed.push(NodeValueError::Field {
                            key: kv.key.clone(),
                            field,
                            problem: format!("{value:?}, the key says {expected:?}"),
                        });
                    }
                }
            }
            Err(error) => found.malformed.push(error),
        }
        if !nodes.is_empty() && !nodes.contains(name) {
            found.stale.push((kv.key.clone(), kv.mod_revision));
        }
    }
    found
}

/// The `nodes-store` duty.
pub struct NodesStore {
    settings: NodesSettings,
    view: Arc<CiliumNodesView>,
    agents: Arc<AgentPodsView>,
    store: Arc<dyn SharedStore>,
    waiting: Waiting,
    deleted: broadcast::Receiver<String>,
    /// Keys deleted in this round.
    deletions: u64,
}

impl NodesStore {
    /// A duty deleting from `store` the node keys of this cluster that
    /// `view` has no CiliumNode for and `agents` no running agent pod.
    /// Made anew each time this replica leads.
    pub fn new(
        settings: NodesSettings,
        view: Arc<CiliumNodesView>,
        agents: Arc<AgentPodsView>,
        store: Arc<dyn SharedStore>,
    ) -> Self {
        let deleted = view.subscribe();
        Self {
            settings,
            view,
            agents,
            store,
            waiting: Waiting::default(),
            deleted,
            deletions: 0,
        }
    }

    async fn sweep(&mut self) -> Result<(), KvError> {
        // Deletions queued until now are in the snapshot this sweep reads.
        while self.deleted.try_recv().is_ok() {}
        let cluster = self.settings.cluster.name();
        let nodes = self.view.snapshot();
        if nodes.is_empty() {
            tracing::warn!(
                cluster,
                "nodes store: no CiliumNodes at all; not sweeping node keys"
            );
        }
        let listed = self.store.list_prefix(&keys::nodes_of(cluster)).await?;
        let found = sweep(cluster, &listed, &nodes);
        for error in &found.malformed {
            tracing::warn!(%error, "nodes store: a node key the agents would not have written");
        }
        for key in &found.foreign {
            tracing::debug!(
                key = key.as_str(),
                "nodes store: not a node key; left alone"
            );
        }
        let prefix = keys::nodes_of(cluster);
        let agents = self.agents.nodes();
        let (held, stale): (Vec<_>, Vec<_>) = found
            .stale
            .into_iter()
            .partition(|(key, _)| agents.contains(key.strip_prefix(&prefix).unwrap_or_default()));
        let now = tokio::time::Instant::now();
        let ripe = self.waiting.ripe(stale, now, self.settings.grace);
        for (key, revision) in held {
            tracing::debug!(
                key = key.as_str(),
                "nodes store: no CiliumNode, but its agent runs; kept"
            );
            self.waiting.hold(key, revision, now);
        }
        for (key, revision) in ripe {
            // Unless the agent wrote it again since it was listed.
            let deleted = self.store.delete_if_unchanged(&key, revision).await?;
            self.waiting.forget(&key);
            if deleted {
                tracing::info!(
                    key = key.as_str(),
                    "nodes store: deleted a node with no CiliumNode"
                );
                self.deletions += 1;
            }
        }
        Ok(())
    }

    async fn forget(&mut self, name: &str) -> Result<(), KvError> {
        // The CiliumNode may be back by now (a node re-joining under its
        // name): its agent's key is then current.
        if self.view.contains(name) {
            return Ok(());
        }
        let key = keys::node(self.settings.cluster.name(), name);
        if self.agents.runs_on(name) {
            // Its agent would write the key again at once: a sweep looks
            // at it again once the grace is over.
            if let Some(kv) = self.store.get(&key).await? {
                tracing::info!(
                    key = key.as_str(),
                    "nodes store: its CiliumNode is gone but its agent still runs; kept for now"
                );
                self.waiting
                    .hold(key, kv.mod_revision, tokio::time::Instant::now());
            }
            return Ok(());
        }
        self.waiting.forget(&key);
        if self.store.delete(&key).await? {
            tracing::info!(
                key = key.as_str(),
                "nodes store: deleted the node of a deleted CiliumNode"
            );
            self.deletions += 1;
        }
        Ok(())
    }
}

#[async_trait]
impl Incremental for NodesStore {
    type Change = String;
    const WHAT: &'static str = "nodes store";

    async fn full(&mut self) -> Result<(), KvError> {
        self.sweep().await
    }

    async fn one(&mut self, name: &String) -> Result<(), KvError> {
        self.forget(name).await
    }

    async fn next(&mut self) -> Heard<String> {
        match self.deleted.recv().await {
            Ok(name) => Heard::One(name),
            Err(broadcast::error::RecvError::Lagged(_)) => Heard::Everything,
            Err(broadcast::error::RecvError::Closed) => Heard::Closed,
        }
    }

    fn full_due(&self) -> Option<tokio::time::Instant> {
        self.waiting.due(self.settings.grace)
    }
}

#[async_trait]
impl Duty for NodesStore {
    fn name(&self) -> &'static str {
        "nodes-store"
    }

    fn interval(&self) -> Duration {
        self.settings.interval
    }

    async fn ready(&mut self) {
        // The senders live in the views, which this duty holds.
        let _ = self.view.synced().wait_for(|s| *s).await;
        let _ = self.agents.synced().wait_for(|s| *s).await;
    }

    /// One sweep, then deletions as they come until the interval ends.
    async fn round(&mut self) -> Result<RoundReport, String> {
        let ended = round(self, self.settings.interval, self.settings.retry_interval).await;
        let deletions = std::mem::take(&mut self.deletions);
        ended.map(|()| RoundReport { deletions })
    }
}

mod grace;
#[cfg(test)]
mod tests;
