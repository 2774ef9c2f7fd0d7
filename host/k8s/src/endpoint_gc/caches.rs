//! The GC's caches: CiliumEndpoints and pods in every namespace, and
//! CiliumNodes, each a reflector over a watch (list, then watch; relisted
//! after 410 Gone), and what a round reads from them.

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::Store;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::decide::{Endpoint, Owners};
use super::read;

pub struct Caches {
    endpoints: Store<DynamicObject>,
    /// Untyped, as the others: a pod that does not fit k8s-openapi's Pod
    /// would fail the whole list, and a pod left out would orphan its
    /// endpoint.
    pods: Store<DynamicObject>,
    nodes: Store<DynamicObject>,
    /// The watches feeding the caches: stopped when the caches are dropped
    /// (the duty is dropped on losing the lease, and must stop watching).
    tasks: Vec<JoinHandle<()>>,
}

/// How many objects the caches hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cached {
    pub endpoints: usize,
    pub pods: usize,
    pub nodes: usize,
}

impl Caches {
    /// Start the watches (on the current tokio runtime).
    pub fn start(client: Client) -> Self {
        let (endpoints, endpoints_task) = follow(&client, read::api_resource(), only_metadata);
        let (pods, pods_task) = follow(&client, ApiResource::erase::<Pod>(&()), only_phase);
        let (nodes, nodes_task) = follow(
            &client,
            ipam_ciliumnode::kube::api_resource(),
            only_metadata,
        );
        Caches {
            endpoints,
            pods,
            nodes,
            tasks: vec![endpoints_task, pods_task, nodes_task],
        }
    }

    /// Wait until each cache has its first full list. False if a watch
    /// ended before (it cannot be synced any more).
    pub async fn wait_synced(&self) -> bool {
        let (endpoints, pods, nodes) = tokio::join!(
            self.endpoints.wait_until_ready(),
            self.pods.wait_until_ready(),
            self.nodes.wait_until_ready()
        );
        endpoints.is_ok() && pods.is_ok() && nodes.is_ok()
    }

    pub fn synced(&self) -> bool {
        let ready = |store: Option<Result<(), _>>| store.is_some_and(|r| r.is_ok());
        ready(self.endpoints.wait_until_ready().now_or_never())
            && ready(self.pods.wait_until_ready().now_or_never())
            && ready(self.nodes.wait_until_ready().now_or_never())
    }

    pub fn cached(&self) -> Cached {
        Cached {
            endpoints: self.endpoints.len(),
            pods: self.pods.len(),
            nodes: self.nodes.len(),
        }
    }

    /// The endpoints (by namespace and name) and their possible owners as
    /// cached now. Endpoints are
    /// read first: an endpoint is created after its pod, so an owner the
    /// endpoints read can name is already in the pod cache, or comes so
    /// late the second round sees it. What cannot be read is logged and
    /// left out (an endpoint left out is kept).
    pub fn snapshot(&self) -> (Vec<Endpoint>, Owners) {
        let mut endpoints = readable(&self.endpoints, read::endpoint);
        // In order: the same state gives the same round, and the same logs.
        endpoints.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let owners = Owners {
            pods: readable(&self.pods, read::pod).into_iter().collect(),
            nodes: readable(&self.nodes, read::node).into_iter().collect(),
        };
        (endpoints, owners)
    }
}

impl Drop for Caches {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn readable<T>(
    store: &Store<DynamicObject>,
    read: fn(&DynamicObject) -> Result<T, read::Unreadable>,
) -> Vec<T> {
    store
        .state()
        .iter()
        .filter_map(|object| match read(object) {
            Ok(value) => Some(value),
            Err(error) => {
                tracing::warn!(%error, "endpoint GC: skipping an object it cannot read");
                None
            }
        })
        .collect()
}

/// A cache of the objects of `resource` in every namespace, and the task
/// feeding it from a watch (objects trimmed by `trim`) until aborted.
/// Watch errors are retried with backoff.
fn follow(
    client: &Client,
    resource: ApiResource,
    trim: fn(&mut DynamicObject),
) -> (Store<DynamicObject>, JoinHandle<()>) {
    let api = Api::all_with(client.clone(), &resource);
    let kind = resource.kind.clone();
    let writer = Writer::new(resource);
    let store = writer.as_reader();
    let task = tokio::spawn(async move {
        let events = watcher::watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .modify(trim)
            .reflect(writer);
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            if let Err(error) = event {
                tracing::warn!(%kind, %error, "endpoint GC: watch failed; retrying");
            }
        }
    });
    (store, task)
}

// The caches keep only what the GC reads: a cluster's pods and endpoints
// in full would cost the operator far more memory than the GC needs.

fn trim_metadata(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
    object.metadata.annotations = None;
    object.metadata.labels = None;
}

fn only_metadata(object: &mut DynamicObject) {
    trim_metadata(object);
    object.data = Value::Null;
}

fn only_phase(pod: &mut DynamicObject) {
    trim_metadata(pod);
    let phase = pod.data.pointer("/status/phase").cloned();
    pod.data = match phase {
        Some(phase) => json!({ "status": { "phase": phase } }),
        None => Value::Null,
    };
}
