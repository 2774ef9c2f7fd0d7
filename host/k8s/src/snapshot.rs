//! The cluster as `ipam-operator plan` reads it, once and without a watch:
//! every CiliumNode the operator can read, the ones it cannot (and why), and
//! the pods pending per node. Only lists: nothing is written.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams};
use kube::Client;

use ipam_ciliumnode::kube::{api_resource, from_object};
use ipam_ciliumnode::CiliumNode;

use crate::store::pending_on;

#[derive(Debug, Clone, Default)]
pub struct ClusterSnapshot {
    pub nodes: Vec<CiliumNode>,
    /// CiliumNodes that are not one the operator can read: name, why.
    pub unreadable: Vec<(String, String)>,
    /// Pods scheduled to each node and waiting for an address.
    pub pending_pods: BTreeMap<String, u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("listing CiliumNodes: {0}")]
    Nodes(#[source] kube::Error),
    #[error("listing pods: {0}")]
    Pods(#[source] kube::Error),
}

/// List the CiliumNodes and the pending pods.
pub async fn read_cluster(client: Client) -> Result<ClusterSnapshot, SnapshotError> {
    let nodes: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource());
    let pods: Api<Pod> = Api::all(client);
    let mut snapshot = ClusterSnapshot::default();
    for object in nodes
        .list(&ListParams::default())
        .await
        .map_err(SnapshotError::Nodes)?
    {
        match from_object(&object) {
            Ok(node) => snapshot.nodes.push(node),
            Err(error) => snapshot.unreadable.push((
                object.metadata.name.clone().unwrap_or_default(),
                error.to_string(),
            )),
        }
    }
    // Only pending pods, as the store's watch selects them.
    for pod in pods
        .list(&ListParams::default().fields("status.phase=Pending"))
        .await
        .map_err(SnapshotError::Pods)?
    {
        if let Some((_, node)) = pending_on(&pod) {
            *snapshot.pending_pods.entry(node).or_default() += 1;
        }
    }
    Ok(snapshot)
}
