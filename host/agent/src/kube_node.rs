//! The agent's Kubernetes side: its own CiliumNode (registered, watched,
//! its status.ipam patched), its Node (for the owner reference and its
//! provider id), the pods on its node (to free the addresses of pods that
//! went away while the agent was down) and, at SIGTERM, its own pod's
//! owner DaemonSet (restart or uninstall). Only its own node's objects: the chart's admission
//! policy refuses writes to any other CiliumNode.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use ipam_ciliumnode::kube::{api_resource, from_object, NodeObject, ObjectError};
use ipam_ciliumnode::CiliumNode;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::{json, Value};

use crate::allocator::Allocator;
use crate::facts::NodeIdentity;
use crate::metrics::AgentMetrics;
use crate::register::{node_owner, Registration};
use crate::uninstall::{DaemonSetState, Owner};

const FIELD_MANAGER: &str = "ipam-agent";

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("reading Node {node}: {source}")]
    Node { node: String, source: kube::Error },
    #[error("Node {0} has no uid")]
    NodeUid(String),
    #[error("{what} CiliumNode {node}: {source}")]
    CiliumNode {
        what: &'static str,
        node: String,
        source: kube::Error,
    },
    #[error(transparent)]
    Object(#[from] ObjectError),
    #[error("listing the pods on {node}: {source}")]
    Pods { node: String, source: kube::Error },
}

fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// The agent's node, through the API server.
#[derive(Clone)]
pub struct NodeClient {
    name: String,
    client: kube::Client,
    cilium_nodes: Api<DynamicObject>,
    /// The same objects without an untyped copy of their fields: for the
    /// watch.
    watched_nodes: Api<NodeObject>,
    nodes: Api<Node>,
    pods: Api<Pod>,
}

impl NodeClient {
    pub fn new(client: kube::Client, name: &str) -> Self {
        Self {
            name: name.to_string(),
            client: client.clone(),
            cilium_nodes: Api::all_with(client.clone(), &api_resource()),
            watched_nodes: Api::all(client.clone()),
            nodes: Api::all(client.clone()),
            pods: Api::all(client),
        }
    }

    fn params() -> PatchParams {
        PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        }
    }

    fn error(&self, what: &'static str) -> impl FnOnce(kube::Error) -> NodeError + '_ {
        move |source| NodeError::CiliumNode {
            what,
            node: self.name.clone(),
            source,
        }
    }

    fn read_node_error(&self) -> impl FnOnce(kube::Error) -> NodeError + '_ {
        move |source| NodeError::Node {
            node: self.name.clone(),
            source,
        }
    }

    /// The Node's provider id and the labels that name its zone and
    /// instance type.
    pub async fn identity(&self) -> Result<NodeIdentity, NodeError> {
        let node = self
            .nodes
            .get(&self.name)
            .await
            .map_err(self.read_node_error())?;
        let label = |name: &str| {
            node.metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(name))
                .filter(|value| !value.is_empty())
                .cloned()
        };
        Ok(NodeIdentity {
            name: self.name.clone(),
            provider_id: node.spec.as_ref().and_then(|spec| spec.provider_id.clone()),
            instance_type: label("node.kubernetes.io/instance-type"),
            zone: label("topology.kubernetes.io/zone"),
        })
    }

    /// The DaemonSet that owns the agent's pod `namespace/name`, and
    /// whether it is still there; any failure to read is `Unreadable`.
    pub async fn owner(&self, namespace: &str, name: &str) -> Owner {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod = match pods.get(name).await {
            Ok(pod) => pod,
            Err(error) => return Owner::Unreadable(format!("pod {namespace}/{name}: {error}")),
        };
        let Some(reference) = pod
            .metadata
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .find(|r| r.kind == "DaemonSet" && r.api_version.starts_with("apps/"))
        else {
            return Owner::NotADaemonSet;
        };
        let daemonsets: Api<DaemonSet> = Api::namespaced(self.client.clone(), namespace);
        let state = match daemonsets.get_opt(&reference.name).await {
            Ok(None) => DaemonSetState::Gone,
            Ok(Some(daemonset)) if daemonset.metadata.uid.as_deref() != Some(&reference.uid) => {
                DaemonSetState::Gone
            }
            Ok(Some(daemonset)) if daemonset.metadata.deletion_timestamp.is_some() => {
                DaemonSetState::Deleting
            }
            Ok(Some(_)) => DaemonSetState::Live,
            Err(error) => {
                return Owner::Unreadable(format!(
                    "DaemonSet {namespace}/{}: {error}",
                    reference.name
                ))
            }
        };
        Owner::DaemonSet {
            name: reference.name,
            state,
        }
    }

    /// Create the CiliumNode, or bring the fields the agent owns up to
    /// date: the spec the registration names and the owner reference.
    pub async fn register(&self, registration: &Registration) -> Result<CiliumNode, NodeError> {
        let node = self
            .nodes
            .get(&self.name)
            .await
            .map_err(self.read_node_error())?;
        let uid = node
            .metadata
            .uid
            .ok_or_else(|| NodeError::NodeUid(self.name.clone()))?;
        let owner = node_owner(&self.name, &uid);
        let mut body = registration.spec();
        body["metadata"] = json!({ "ownerReferences": owner });
        match self.cilium_nodes.get_opt(&self.name).await {
            Ok(Some(_)) => {
                let object = self
                    .cilium_nodes
                    .patch(&self.name, &Self::params(), &Patch::Merge(&body))
                    .await
                    .map_err(self.error("updating"))?;
                Ok(from_object(&object)?)
            }
            Ok(None) => {
                body["apiVersion"] = json!("cilium.io/v2");
                body["kind"] = json!("CiliumNode");
                body["metadata"]["name"] = json!(self.name);
                let object: DynamicObject =
                    serde_json::from_value(body).map_err(|source| ObjectError::Fields {
                        name: self.name.clone(),
                        source,
                    })?;
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PostParams::default()
                };
                match self.cilium_nodes.create(&params, &object).await {
                    Ok(created) => Ok(from_object(&created)?),
                    // Created meanwhile (by a restarted agent's first try):
                    // read it back.
                    Err(error) if status_code(&error) == Some(409) => self.current().await,
                    Err(error) => Err(self.error("creating")(error)),
                }
            }
            Err(error) => Err(self.error("reading")(error)),
        }
    }

    /// The CiliumNode as the API server has it now.
    pub async fn current(&self) -> Result<CiliumNode, NodeError> {
        let object = self
            .cilium_nodes
            .get(&self.name)
            .await
            .map_err(self.error("reading"))?;
        Ok(from_object(&object)?)
    }

    /// `namespace/name` of every pod the API server places on this node.
    pub async fn live_pods(&self) -> Result<BTreeSet<String>, NodeError> {
        let params = ListParams::default().fields(&format!("spec.nodeName={}", self.name));
        let pods = self
            .pods
            .list(&params)
            .await
            .map_err(|source| NodeError::Pods {
                node: self.name.clone(),
                source,
            })?;
        Ok(pods
            .items
            .into_iter()
            // The field selector already chose them; checked again so a
            // server that ignores selectors cannot free a live pod's address.
            .filter(|pod| {
                pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&self.name)
            })
            .filter_map(|pod| {
                Some(format!(
                    "{}/{}",
                    pod.metadata.namespace?, pod.metadata.name?
                ))
            })
            .collect())
    }

    /// Merge-patch the status subresource. The answer, the whole object,
    /// is not parsed: the watch brings the node anyway, and with a thousand
    /// addresses in its pool parsing it would cost the agent milliseconds
    /// of CPU at every publish, beside the pods' ADDs.
    pub async fn patch_status(&self, patch: &Value) -> Result<(), NodeError> {
        let what = "patching the status of";
        let request = kube::core::Request::new(self.cilium_nodes.resource_url())
            .patch_subresource("status", &self.name, &Self::params(), &Patch::Merge(patch))
            .map_err(|e| self.error(what)(kube::Error::BuildRequest(e)))?;
        self.client
            .request_text(request)
            .await
            .map_err(self.error(what))?;
        Ok(())
    }

    /// Feed every change of the CiliumNode to the allocator, until the
    /// stream ends (the watcher retries on its own). Each event's node is
    /// read into the IPAM fields (`NodeObject::into_node`); a node whose
    /// fields cannot be read is logged with what is wrong, and the node the
    /// allocator has is kept.
    pub async fn watch(&self, allocator: Arc<Allocator>) {
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        let mut events = watcher::watcher(self.watched_nodes.clone(), config)
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let object = match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => object,
                Ok(watcher::Event::Delete(object)) => {
                    tracing::warn!(node = %self.name, name = ?object.metadata.name, "CiliumNode deleted");
                    continue;
                }
                Ok(_) => continue,
                Err(error) => {
                    tracing::warn!(node = %self.name, %error, "watching the CiliumNode");
                    continue;
                }
            };
            if object.metadata.name.as_deref() != Some(&self.name) {
                continue;
            }
            match object.into_node() {
                Ok(node) => allocator.node_changed(node).await,
                Err(error) => tracing::warn!(%error, "a CiliumNode the agent cannot read"),
            }
        }
    }
}

/// Publish the allocator's changes (status.ipam.used and the handshake
/// answers) as merge patches of the status, at most one per `interval`;
/// a failed patch is retried at the next wake or interval.
pub async fn publish(
    client: NodeClient,
    allocator: Arc<Allocator>,
    metrics: Arc<AgentMetrics>,
    interval: Duration,
) {
    let changed = allocator.changed();
    loop {
        if let Some(change) = allocator.status_change().await {
            match client.patch_status(&change.to_patch()).await {
                Ok(()) => {
                    // Counted once the agent's own view holds the change,
                    // so a count seen outside means the view is in step.
                    allocator.published(&change).await;
                    metrics.patched("ok");
                }
                Err(error) => {
                    metrics.patched("error");
                    tracing::warn!(%error, "publishing status.ipam");
                    tokio::time::sleep(interval.max(Duration::from_secs(1))).await;
                    continue;
                }
            }
            tokio::time::sleep(interval).await;
            continue;
        }
        // Woken by a change, or every 30 s to catch up with a node that
        // changed under a lost watch.
        let _ = tokio::time::timeout(Duration::from_secs(30), changed.notified()).await;
    }
}
