//! Cilium's shared-store shapes and the operator's two clustermesh duties
//! over them, in the kvstore layout Cilium's agents and clustermesh peers
//! read (Cilium 1.15 onwards).
//!
//! # What is written where
//!
//! | Key | Value | Who writes |
//! |---|---|---|
//! | `cilium/state/services/v1/<cluster>/<namespace>/<name>` | [`ClusterService`] JSON | the `services-store` duty, on the session lease |
//! | `cilium/synced/<cluster>/cilium/state/services/v1` | the time of the first full sync, RFC 3339 | the `services-store` duty, on the session lease |
//! | `cilium/state/nodes/v1/<cluster>/<name>` | [`AgentNode`] (Go field names) | the agents; the `nodes-store` duty only deletes |
//!
//! A `ClusterService` is JSON with Cilium's tags: `cluster`, `namespace`,
//! `name`, `frontends` and `backends` (`{ip: {port name: {"Protocol":
//! "TCP", "Port": 80}}}`), `hostnames` (ip -> hostname, left out when
//! empty), `zones` (ip -> `{"zone": "eu-1a", "forZones": [{"name":
//! "eu-1a"}]}`, left out when empty), `labels`, `selector`,
//! `includeExternal`, `shared`, `clusterID`. Peers drop a value whose
//! cluster, namespace or name do not match its key, so the key is always
//! made from the value ([`ClusterService::key`]).
//!
//! # Which Services, and what goes in them
//!
//! Services annotated `service.cilium.io/global: "true"` (or the older
//! `io.cilium/global-service`) and not `service.cilium.io/shared: "false"`
//! (or `io.cilium/shared-service`); the rules for frontends (cluster IPs),
//! backends (ready endpoints of the Service's EndpointSlices), hostnames
//! and zones are in [`convert`].
//!
//! # Resync
//!
//! Both duties run only while the operator leads ([`ipam_duty`]). A round
//! of the services store is one full sync (list the cluster's prefix,
//! write what differs, delete what no exported Service accounts for, write
//! the synced marker if this incarnation has not or it is gone) and then
//! each Service change applied as it comes, until
//! [`ServicesSettings::resync_interval`] (5 minutes) ends the round. A
//! round of the nodes store is one sweep and then deletions as CiliumNodes
//! go, for [`NodesSettings::interval`] (5 minutes); a key found stale goes
//! once [`NodesSettings::grace`] (a minute) has passed, never while its
//! node's agent runs. A failed kvstore
//! operation brings the full sync or sweep forward to the retry interval
//! (5 seconds).
//!
//! # Composing
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use ipam_duty::{run_while_leading, DutyMetrics};
//! # use ipam_kvstore::SharedStore;
//! use ipam_clustermesh::*;
//!
//! # fn compose(
//! #     client: kube::Client,
//! #     kvstore: Arc<dyn SharedStore>,
//! #     leader: tokio::sync::watch::Receiver<bool>,
//! #     metrics: Arc<DutyMetrics>,
//! # ) -> Result<(), ClusterError> {
//! let cluster = ClusterInfo::new("c1", 1)?;
//! // The caches follow the API server whether or not this replica leads.
//! let services = Arc::new(ServicesView::new());
//! tokio::spawn(services.clone().follow(client.clone()));
//! let nodes = Arc::new(CiliumNodesView::new());
//! tokio::spawn(nodes.clone().follow(client.clone()));
//! // cilium-agent's pods: a node whose agent runs keeps its key.
//! let agents = Arc::new(AgentPodsView::new());
//! let labels: PodLabels = "k8s-app=cilium".parse().expect("labels");
//! tokio::spawn(agents.clone().follow(client, "kube-system".into(), labels));
//!
//! let settings = ServicesSettings::new(cluster.clone());
//! let store = kvstore.clone();
//! tokio::spawn(run_while_leading(
//!     move || ServicesStore::new(settings.clone(), services.clone(), store.clone()),
//!     leader.clone(),
//!     metrics.clone(),
//!     std::future::pending(),
//! ));
//! let settings = NodesSettings::new(cluster);
//! tokio::spawn(run_while_leading(
//!     move || NodesStore::new(settings.clone(), nodes.clone(), agents.clone(), kvstore.clone()),
//!     leader,
//!     metrics,
//!     std::future::pending(),
//! ));
//! # Ok(())
//! # }
//! ```

pub mod agent_pods;
pub mod cluster;
pub mod convert;
pub mod node;
pub mod nodes;
mod round;
pub mod service;
pub mod services;
#[cfg(test)]
mod testing;

pub use agent_pods::{AgentPodsView, PodLabels, PodLabelsError};
pub use cluster::{keys, ClusterError, ClusterInfo};
pub use node::{AgentNode, Cidr, NodeAddress, NodeValueError};
pub use nodes::{CiliumNodesView, NodesSettings, NodesStore};
pub use service::{BackendZone, ClusterService, ForZone, L4Addr, PortConfiguration};
pub use services::{ObjectId, ServiceChange, ServicesSettings, ServicesStore, ServicesView};
