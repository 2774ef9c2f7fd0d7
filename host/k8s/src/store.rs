//! The Kubernetes [`NodeStore`]: CiliumNodes from a watch (list, then
//! watch; relisted after 410 Gone), kept in a local map the engine reads, and
//! written with merge patches of the fields the operator owns
//! ([`ipam_ciliumnode::patch`]). Pending pods per node come from a watch of pods in
//! phase Pending. A 409 on a patch (an admission webhook or an API server
//! under load can still return one) is retried; a merge patch carries no
//! resourceVersion, so the retry cannot undo an agent's write. Each node's
//! managedFields entries of other managers that hold a contested field
//! ([`crate::other_writers`]) are kept beside it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::Client;
use tokio::sync::{broadcast, watch};

use crate::other_writers::cilium_operator::skipped_by_cilium;
use crate::other_writers::managed_fields::{contested_entries, ContestedEntry};
use ipam_ciliumnode::kube::{api_resource, from_object, GROUP, KIND, VERSION};
use ipam_ciliumnode::patch::merge_patches;
use ipam_ciliumnode::{CiliumNode, NodeUpdate};
use ipam_engine::{Announcement, NodeEvent, NodeStore, StoreError};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};

/// The field manager the operator's writes are recorded under.
pub const FIELD_MANAGER: &str = "ipam-operator";
const CONFLICT_RETRIES: u32 = 5;

#[derive(Default)]
struct Pods {
    /// Pending pod (namespace/name) -> its node.
    node_of: BTreeMap<String, String>,
}

impl Pods {
    fn count(&self, node: &str) -> u32 {
        u32::try_from(self.node_of.values().filter(|n| *n == node).count()).unwrap_or(u32::MAX)
    }
}

pub struct KubeNodeStore {
    field_manager: String,
    recorder: Recorder,
    api: Api<DynamicObject>,
    pods: Api<Pod>,
    nodes: Mutex<BTreeMap<String, CiliumNode>>,
    /// Node -> the managedFields entries of other managers holding a
    /// contested field (nodes with none are absent).
    writers: Mutex<BTreeMap<String, Vec<ContestedEntry>>>,
    /// Nodes annotated for Cilium's IPAM to leave alone.
    skipped_by_cilium: Mutex<BTreeSet<String>>,
    pending: Mutex<Pods>,
    events: broadcast::Sender<NodeEvent>,
    synced: watch::Sender<bool>,
}

fn backend(error: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(error.to_string())
}

fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

impl KubeNodeStore {
    /// A store writing as `field_manager` (recorded in managedFields; the
    /// default is [`FIELD_MANAGER`]).
    pub fn new(client: Client, field_manager: &str) -> Self {
        let (events, _) = broadcast::channel(4096);
        let reporter = Reporter {
            controller: field_manager.to_string(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            field_manager: field_manager.to_string(),
            api: Api::all_with(client.clone(), &api_resource()),
            pods: Api::all(client),
            nodes: Mutex::new(BTreeMap::new()),
            writers: Mutex::new(BTreeMap::new()),
            skipped_by_cilium: Mutex::new(BTreeSet::new()),
            pending: Mutex::new(Pods::default()),
            events,
            synced: watch::Sender::new(false),
        }
    }

    /// True once the first full list of CiliumNodes is in.
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    fn publish(&self, event: NodeEvent) {
        let _ = self.events.send(event);
    }

    fn upsert_local(&self, node: CiliumNode) {
        let node = Arc::new(node);
        self.nodes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node.name.clone(), (*node).clone());
        self.publish(NodeEvent::Upserted(node));
    }

    /// The field manager this store writes as.
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    /// A node's managedFields entries of other managers holding a
    /// contested field.
    pub fn contested_entries(&self, node: &str) -> Vec<ContestedEntry> {
        self.writers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(node)
            .cloned()
            .unwrap_or_default()
    }

    /// Every node's, for the nodes that have any.
    pub fn all_contested_entries(&self) -> BTreeMap<String, Vec<ContestedEntry>> {
        self.writers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How many nodes Cilium's IPAM would allocate for (those not
    /// annotated for it to leave alone), and one of them.
    pub fn nodes_cilium_allocates_for(&self) -> (usize, Option<String>) {
        let skipped = self
            .skipped_by_cilium
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        // Asked on every change while Cilium's operator allocates: counted
        // through the (usually few) skipped nodes, not every node.
        let skipped_known = skipped.iter().filter(|n| nodes.contains_key(*n)).count();
        let first = nodes.keys().find(|name| !skipped.contains(*name)).cloned();
        (nodes.len().saturating_sub(skipped_known), first)
    }

    /// Keep what the other-writer watch needs of a node as read: the other
    /// managers' contested entries, and whether Cilium's IPAM skips it.
    fn note_writers(&self, object: &DynamicObject) {
        let Some(name) = object.metadata.name.clone() else {
            return;
        };
        {
            let mut skipped = self
                .skipped_by_cilium
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            match skipped_by_cilium(object.metadata.annotations.as_ref()) {
                true => skipped.insert(name.clone()),
                false => skipped.remove(&name),
            };
        }
        let listed = object
            .metadata
            .managed_fields
            .as_deref()
            .unwrap_or_default();
        let (mut contested, ignored) = contested_entries(listed);
        for entry in ignored {
            tracing::debug!(
                node = %name,
                index = entry.index,
                manager = entry.manager.as_deref().unwrap_or_default(),
                problem = %entry.problem,
                "a managedFields entry ignored"
            );
        }
        contested.retain(|entry| entry.manager != self.field_manager);
        let mut writers = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        match contested.is_empty() {
            true => writers.remove(&name),
            false => writers.insert(name, contested),
        };
    }

    fn read(&self, object: &DynamicObject) -> Option<CiliumNode> {
        self.note_writers(object);
        match from_object(object) {
            Ok(node) => Some(node),
            Err(error) => {
                tracing::warn!(%error, "skipping a CiliumNode the operator cannot read");
                None
            }
        }
    }

    /// Follow CiliumNodes and pending pods until the watches end (never,
    /// unless the client is dropped). Watch errors are retried with backoff
    /// by the watcher; they are logged here.
    pub async fn run(self: Arc<Self>) {
        tokio::join!(self.clone().follow_nodes(), self.follow_pods());
    }

    async fn follow_nodes(self: Arc<Self>) {
        let config = watcher::Config::default().any_semantic();
        let stream = watcher::watcher(self.api.clone(), config);
        let mut stream = std::pin::pin!(stream);
        let mut relist: Option<BTreeMap<String, CiliumNode>> = None;
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Apply(object)) => {
                    if let Some(node) = self.read(&object) {
                        self.upsert_local(node);
                    }
                }
                Ok(Event::Delete(object)) => {
                    if let Some(name) = object.metadata.name {
                        self.nodes
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&name);
                        self.writers
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&name);
                        self.skipped_by_cilium
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&name);
                        self.publish(NodeEvent::Deleted(name));
                    }
                }
                Ok(Event::Init) => relist = Some(BTreeMap::new()),
                Ok(Event::InitApply(object)) => {
                    if let (Some(list), Some(node)) = (relist.as_mut(), self.read(&object)) {
                        list.insert(node.name.clone(), node);
                    }
                }
                Ok(Event::InitDone) => {
                    let listed = relist.take().unwrap_or_default();
                    let gone: Vec<String> = {
                        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
                        let gone = nodes
                            .keys()
                            .filter(|name| !listed.contains_key(*name))
                            .cloned()
                            .collect();
                        *nodes = listed.clone();
                        gone
                    };
                    self.writers
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .retain(|name, _| listed.contains_key(name));
                    self.skipped_by_cilium
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .retain(|name| listed.contains_key(name));
                    for name in gone {
                        self.publish(NodeEvent::Deleted(name));
                    }
                    for node in listed.into_values() {
                        self.publish(NodeEvent::Upserted(Arc::new(node)));
                    }
                    self.synced.send_replace(true);
                }
                Err(error) => tracing::warn!(%error, "CiliumNode watch failed; retrying"),
            }
        }
    }

    async fn follow_pods(self: Arc<Self>) {
        let config = watcher::Config::default()
            .fields("status.phase=Pending")
            .any_semantic();
        let stream = watcher::watcher(self.pods.clone(), config);
        let mut stream = std::pin::pin!(stream);
        let mut relist: Option<Pods> = None;
        while let Some(event) = stream.next().await {
            let changed: Vec<String> = match event {
                Ok(Event::Apply(pod)) => self.pod_seen(&pod),
                Ok(Event::Delete(pod)) => self.pod_gone(&pod),
                Ok(Event::Init) => {
                    relist = Some(Pods::default());
                    Vec::new()
                }
                Ok(Event::InitApply(pod)) => {
                    if let (Some(list), Some((key, node))) = (relist.as_mut(), pending_on(&pod)) {
                        list.node_of.insert(key, node);
                    }
                    Vec::new()
                }
                Ok(Event::InitDone) => {
                    let listed = relist.take().unwrap_or_default();
                    let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                    let mut touched: Vec<String> = pending
                        .node_of
                        .values()
                        .chain(listed.node_of.values())
                        .cloned()
                        .collect();
                    touched.sort();
                    touched.dedup();
                    *pending = listed;
                    touched
                }
                Err(error) => {
                    tracing::warn!(%error, "pod watch failed; retrying");
                    Vec::new()
                }
            };
            for name in changed {
                let node = self
                    .nodes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&name)
                    .cloned();
                if let Some(node) = node {
                    self.publish(NodeEvent::Upserted(Arc::new(node)));
                }
            }
        }
    }

    /// A pod changed: the nodes whose pending count changed.
    fn pod_seen(&self, pod: &Pod) -> Vec<String> {
        let key = pod_key(pod);
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let before = pending.node_of.get(&key).cloned();
        let now = pending_on(pod).map(|(_, node)| node);
        match &now {
            Some(node) => pending.node_of.insert(key, node.clone()),
            None => pending.node_of.remove(&key),
        };
        if before == now {
            return Vec::new();
        }
        before.into_iter().chain(now).collect()
    }

    fn pod_gone(&self, pod: &Pod) -> Vec<String> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.node_of.remove(&pod_key(pod)).into_iter().collect()
    }

    /// Patch with retries on 409; the object as the server returns it.
    async fn patch(
        &self,
        name: &str,
        body: &serde_json::Value,
        status: bool,
    ) -> Result<DynamicObject, StoreError> {
        let params = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        };
        let mut attempt = 0;
        loop {
            let patch = Patch::Merge(body);
            let result = if status {
                self.api.patch_status(name, &params, &patch).await
            } else {
                self.api.patch(name, &params, &patch).await
            };
            match result {
                Ok(object) => return Ok(object),
                Err(error) if status_code(&error) == Some(404) => {
                    return Err(StoreError::NotFound(name.to_string()))
                }
                Err(error)
                    if status_code(&error) == Some(409) && attempt + 1 < CONFLICT_RETRIES =>
                {
                    attempt += 1;
                    tracing::debug!(node = name, attempt, "conflict on a merge patch; retrying");
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
                }
                Err(error) => return Err(backend(error)),
            }
        }
    }
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// A pod waiting on a node: scheduled there, phase Pending, not host-network
/// (host-network pods need no pod address).
pub(crate) fn pending_on(pod: &Pod) -> Option<(String, String)> {
    let spec = pod.spec.as_ref()?;
    let node = spec.node_name.clone()?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    (phase == Some("Pending") && spec.host_network != Some(true)).then(|| (pod_key(pod), node))
}

#[async_trait]
impl NodeStore for KubeNodeStore {
    fn subscribe(&self) -> broadcast::Receiver<NodeEvent> {
        self.events.subscribe()
    }

    async fn list(&self) -> Result<Vec<CiliumNode>, StoreError> {
        Ok(self
            .nodes
            .lock()
            .map_err(|_| backend("node map poisoned"))?
            .values()
            .cloned()
            .collect())
    }

    async fn get(&self, name: &str) -> Result<Option<CiliumNode>, StoreError> {
        Ok(self
            .nodes
            .lock()
            .map_err(|_| backend("node map poisoned"))?
            .get(name)
            .cloned())
    }

    async fn update(&self, name: &str, update: &NodeUpdate) -> Result<CiliumNode, StoreError> {
        let current = self
            .get(name)
            .await?
            .ok_or_else(|| StoreError::NotFound(name.to_string()))?;
        let (spec, status) = merge_patches(&current, update);
        let mut latest = current;
        for (body, is_status) in [(spec, false), (status, true)] {
            if let Some(body) = body {
                let object = self.patch(name, &body, is_status).await?;
                self.note_writers(&object);
                latest = from_object(&object).map_err(backend)?;
            }
        }
        // The watch brings the same change; the local map has it at once so
        // the next read sees the operator's own write.
        self.nodes
            .lock()
            .map_err(|_| backend("node map poisoned"))?
            .insert(name.to_string(), latest.clone());
        Ok(latest)
    }

    fn pending_pods(&self, name: &str) -> u32 {
        self.pending.lock().map(|p| p.count(name)).unwrap_or(0)
    }

    async fn announce(&self, name: &str, announcement: Announcement) {
        let event = KubeEvent {
            type_: if announcement.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: announcement.reason.to_string(),
            note: Some(announcement.note),
            action: "MaintainPool".into(),
            secondary: None,
        };
        let regarding = ObjectReference {
            api_version: Some(format!("{}/{}", GROUP, VERSION)),
            kind: Some(KIND.into()),
            name: Some(name.to_string()),
            ..ObjectReference::default()
        };
        if let Err(error) = self.recorder.publish(&event, &regarding).await {
            tracing::debug!(node = name, %error, "could not publish an event");
        }
    }
}
