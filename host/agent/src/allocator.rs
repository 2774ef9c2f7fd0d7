//! The agent's allocator: the pure decisions of `ipam_pool::agent` run over
//! the node the agent last saw and its own allocations, with the state file
//! written before any answer and the routes (and, with one, the datapath's
//! endpoints) kept in step. One lock orders every change, so two ADDs never
//! get the same address.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ipam_ciliumnode::CiliumNode;
use ipam_pool::agent::allocator::{
    collect_garbage, held_by, Allocation, Allocations, Blocked, Choice, Holder, PoolIndex,
};
use ipam_pool::agent::placement::{placement, Placement};
use ipam_pool::agent::restore::{restore, Restored};
use tokio::sync::{Mutex, Notify};

use crate::datapath::NodeDatapath;
use crate::metrics::AgentMetrics;
use crate::routing::{wanted_route, wanted_routes, RouteTable};
use crate::state_file::{HostVeths, Saved, StateFile, StateFileError};
use crate::status_change::{status_change, StatusChange};

/// An address given to an attachment, with where it lives and its
/// gateway: the router of its subnet, as cilium-agent answers (a chained
/// ptp or bridge plugin puts that address on the host side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    pub ip: IpAddr,
    pub gateway: Option<IpAddr>,
    pub placement: Option<Placement>,
}

#[derive(Debug, thiserror::Error)]
pub enum AllocatorError {
    #[error("no free address: {0}; the operator grows the pool")]
    Exhausted(Blocked),
    #[error("no address is allocated to {container_id}/{ifname}")]
    Unknown {
        container_id: String,
        ifname: String,
    },
    #[error("saving the allocations: {0}")]
    State(#[from] StateFileError),
    /// `doing`: which change of the routes failed (an address's, or a
    /// reconcile's).
    #[error("routes, {doing}: {message}")]
    Routes { doing: String, message: String },
    #[error("{container_id}/{ifname} holds {held:?}, not {asked}")]
    NotItsAddress {
        container_id: String,
        ifname: String,
        held: Option<IpAddr>,
        asked: IpAddr,
    },
    /// `doing`: which change of the datapath failed (an address's, or the
    /// restore's).
    #[error("datapath, {doing}: {message}")]
    Datapath { doing: String, message: String },
}

impl AllocatorError {
    /// The CNI error code the plugin answers with.
    pub fn cni_code(&self) -> u32 {
        match self {
            // Try again later: the operator grows the pool.
            AllocatorError::Exhausted { .. } => 11,
            AllocatorError::Unknown { .. } => 3,
            AllocatorError::State(_) => 5,
            AllocatorError::Routes { .. }
            | AllocatorError::NotItsAddress { .. }
            | AllocatorError::Datapath { .. } => 101,
        }
    }
}

struct Inner {
    node: CiliumNode,
    /// `node`'s pool parsed, for choosing: rebuilt with every change of
    /// `node`, not on every ADD.
    pool: PoolIndex,
    allocations: Allocations,
    /// The host-side veth each attached address sits behind.
    host_veths: HostVeths,
}

impl Inner {
    /// Saves the allocations, durably, before the change is answered. It
    /// blocks the calling thread on the disk: the agent changes its
    /// allocations only on the CNI thread (`cni_thread`), which has no
    /// other work, and the lock held meanwhile keeps saves in order.
    fn save(&self, state: &StateFile) -> Result<(), StateFileError> {
        state.save(&self.allocations, &self.host_veths)
    }
}

pub struct Allocator {
    inner: Mutex<Inner>,
    state: StateFile,
    routes: Arc<dyn RouteTable>,
    /// The eBPF datapath, when the agent runs one.
    datapath: Option<Arc<NodeDatapath>>,
    metrics: Arc<AgentMetrics>,
    /// Wakes the status publisher.
    changed: Arc<Notify>,
    /// The VPC's ranges as the node names them, for the SNAT rules.
    vpc_ranges: tokio::sync::watch::Sender<Vec<ipnet::Ipv4Net>>,
    /// A pause after the state file is written and before the answer, so
    /// crash tests can kill the agent in that window.
    pause_after_save: Option<Duration>,
}

/// What a start-up restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    pub kept: usize,
    pub freed: Vec<IpAddr>,
    pub outside_pool: Vec<IpAddr>,
}

impl Allocator {
    /// An allocator over the saved allocations (loaded before anything
    /// else) and the node as first read.
    pub fn new(
        saved: Saved,
        node: CiliumNode,
        state: StateFile,
        routes: Arc<dyn RouteTable>,
        metrics: Arc<AgentMetrics>,
    ) -> Self {
        let vpc_ranges = tokio::sync::watch::Sender::new(crate::snat::vpc_ranges(&node).0);
        Self {
            vpc_ranges,
            inner: Mutex::new(Inner {
                pool: PoolIndex::new(&node),
                node,
                allocations: saved.allocations,
                host_veths: saved.host_veths,
            }),
            state,
            routes,
            datapath: None,
            metrics,
            changed: Arc::new(Notify::new()),
            pause_after_save: None,
        }
    }

    pub fn pause_after_save(mut self, pause: Option<Duration>) -> Self {
        self.pause_after_save = pause;
        self
    }

    pub fn with_datapath(mut self, datapath: Option<Arc<NodeDatapath>>) -> Self {
        self.datapath = datapath;
        self
    }

    pub fn changed(&self) -> Arc<Notify> {
        self.changed.clone()
    }

    /// The VPC's ranges as the node names them now, told again whenever a
    /// node change changes them.
    pub fn vpc_ranges(&self) -> tokio::sync::watch::Receiver<Vec<ipnet::Ipv4Net>> {
        self.vpc_ranges.subscribe()
    }

    fn sizes(&self, inner: &Inner) {
        self.metrics
            .sizes(inner.allocations.len(), inner.node.spec.ipam.pool.len());
    }

    /// Judge the saved allocations against the node and the live pods, save
    /// what stays and put the routes in step with it. Runs once, before the
    /// socket is served.
    pub async fn restore(
        &self,
        live_pods: Option<&BTreeSet<String>>,
    ) -> Result<RestoreReport, AllocatorError> {
        let mut inner = self.inner.lock().await;
        let saved = std::mem::take(&mut inner.allocations);
        let Restored {
            kept,
            freed,
            outside_pool,
        } = restore(saved, &inner.node, live_pods);
        inner.host_veths.retain(|ip, _| kept.contains_key(ip));
        inner.allocations = kept;
        inner.save(&self.state)?;
        let wanted = wanted_routes(&inner.node, &inner.allocations);
        self.routes
            .reconcile(&wanted)
            .await
            .map_err(|e| AllocatorError::Routes {
                doing: "restoring".into(),
                message: e.to_string(),
            })?;
        if let Some(datapath) = &self.datapath {
            let held: Vec<(IpAddr, Option<&str>, u32)> = inner
                .allocations
                .iter()
                .map(|(ip, allocation)| {
                    let number = interface_number(&inner.node, allocation, *ip);
                    (*ip, inner.host_veths.get(ip).map(String::as_str), number)
                })
                .collect();
            datapath
                .restore(&held)
                .map_err(|e| AllocatorError::Datapath {
                    doing: "restoring the endpoints".into(),
                    message: e.to_string(),
                })?;
        }
        self.metrics.restored("kept", inner.allocations.len());
        self.metrics.restored("freed", freed.len());
        self.metrics.restored("outside-pool", outside_pool.len());
        self.metrics.released("pod-gone", freed.len());
        self.sizes(&inner);
        self.changed.notify_one();
        Ok(RestoreReport {
            kept: inner.allocations.len(),
            freed: freed.into_iter().map(|(ip, _)| ip).collect(),
            outside_pool,
        })
    }

    fn granted(&self, node: &CiliumNode, ip: IpAddr, resource: Option<&str>) -> Granted {
        let placement = placement(node, resource, ip);
        Granted {
            ip,
            gateway: placement.as_ref().and_then(|p| p.gateway),
            placement,
        }
    }

    /// ADD: the attachment's address, a fresh one saved (and routed) before
    /// this returns.
    pub async fn add(&self, holder: Holder) -> Result<Granted, AllocatorError> {
        let mut inner = self.inner.lock().await;
        let (ip, resource) = match inner.pool.choose(&inner.allocations, &holder) {
            Choice::Existing(ip) => {
                let resource = inner.allocations.get(&ip).and_then(|a| a.resource.clone());
                (ip, resource)
            }
            Choice::Exhausted(blocked) => return Err(AllocatorError::Exhausted(blocked)),
            Choice::Fresh { ip, resource } => {
                let allocation = Allocation {
                    holder,
                    resource: resource.clone(),
                };
                inner.allocations.insert(ip, allocation);
                if let Err(error) = inner.save(&self.state) {
                    inner.allocations.remove(&ip);
                    return Err(error.into());
                }
                self.metrics.allocated();
                self.sizes(&inner);
                self.changed.notify_one();
                if let Some(pause) = self.pause_after_save {
                    tokio::time::sleep(pause).await;
                }
                (ip, resource)
            }
        };
        if let Some(allocation) = inner.allocations.get(&ip) {
            if let Some(route) = wanted_route(&inner.node, ip, allocation) {
                self.routes
                    .install(&route)
                    .await
                    .map_err(|e| AllocatorError::Routes {
                        doing: format!("installing those of {ip}"),
                        message: e.to_string(),
                    })?;
            }
        }
        Ok(self.granted(&inner.node, ip, resource.as_deref()))
    }

    /// CHECK: the attachment's address, or Unknown.
    pub async fn check(&self, container_id: &str, ifname: &str) -> Result<Granted, AllocatorError> {
        let inner = self.inner.lock().await;
        let ip = held_by(&inner.allocations, container_id, ifname).ok_or_else(|| {
            AllocatorError::Unknown {
                container_id: container_id.into(),
                ifname: ifname.into(),
            }
        })?;
        let resource = inner.allocations.get(&ip).and_then(|a| a.resource.clone());
        Ok(self.granted(&inner.node, ip, resource.as_deref()))
    }

    /// Free `ips`, save, and take their routes away.
    async fn free(
        &self,
        inner: &mut Inner,
        ips: &[IpAddr],
        reason: &'static str,
    ) -> Result<(), AllocatorError> {
        if ips.is_empty() {
            return Ok(());
        }
        let mut removed = Vec::new();
        let mut removed_veths = Vec::new();
        for ip in ips {
            if let Some(allocation) = inner.allocations.remove(ip) {
                removed.push((*ip, allocation));
                if let Some(veth) = inner.host_veths.remove(ip) {
                    removed_veths.push((*ip, veth));
                }
            }
        }
        if let Err(error) = inner.save(&self.state) {
            inner.allocations.extend(removed);
            inner.host_veths.extend(removed_veths);
            return Err(error.into());
        }
        self.metrics.released(reason, removed.len());
        if let Some(datapath) = &self.datapath {
            for (ip, _) in &removed {
                // The address is freed and saved; a stale entry left here
                // drops nothing of another pod's and is removed at the
                // next start.
                if let Err(error) = datapath.release(*ip) {
                    tracing::warn!(%ip, %error, "removing the endpoint of a freed address");
                }
            }
        }
        self.sizes(inner);
        self.changed.notify_one();
        let wanted = wanted_routes(&inner.node, &inner.allocations);
        self.routes
            .reconcile(&wanted)
            .await
            .map_err(|e| AllocatorError::Routes {
                doing: format!("reconciling after freeing {} address(es)", removed.len()),
                message: e.to_string(),
            })
    }

    /// DEL: idempotent; an attachment without an address is done already.
    pub async fn del(&self, container_id: &str, ifname: &str) -> Result<(), AllocatorError> {
        let mut inner = self.inner.lock().await;
        match held_by(&inner.allocations, container_id, ifname) {
            Some(ip) => self.free(&mut inner, &[ip], "del").await,
            None => Ok(()),
        }
    }

    /// The datapath step's ADD: the program on `host_ifname` and the
    /// attachment's address as its endpoint. The address must be the one
    /// the attachment holds. Without a datapath, nothing to do.
    pub async fn attach(
        &self,
        container_id: &str,
        ifname: &str,
        host_ifname: &str,
        address: IpAddr,
    ) -> Result<(), AllocatorError> {
        let mut inner = self.inner.lock().await;
        let held = held_by(&inner.allocations, container_id, ifname);
        if held != Some(address) {
            return Err(AllocatorError::NotItsAddress {
                container_id: container_id.into(),
                ifname: ifname.into(),
                held,
                asked: address,
            });
        }
        let Some(datapath) = &self.datapath else {
            return Ok(());
        };
        let interface_number = inner.allocations.get(&address).map_or(0, |allocation| {
            interface_number(&inner.node, allocation, address)
        });
        let (ifindex, how) = datapath
            .attach(address, host_ifname, interface_number)
            .map_err(|e| AllocatorError::Datapath {
                doing: format!("attaching {address} on {host_ifname}"),
                message: e.to_string(),
            })?;
        tracing::info!(ip = %address, interface = host_ifname, ifindex, ?how, "endpoint attached");
        if inner.host_veths.get(&address).map(String::as_str) != Some(host_ifname) {
            inner.host_veths.insert(address, host_ifname.to_string());
            inner.save(&self.state)?;
        }
        Ok(())
    }

    /// The datapath step's DEL: the attachment's endpoint removed and its
    /// link detached; idempotent.
    pub async fn detach(&self, container_id: &str, ifname: &str) -> Result<(), AllocatorError> {
        let mut inner = self.inner.lock().await;
        let (Some(datapath), Some(ip)) = (
            &self.datapath,
            held_by(&inner.allocations, container_id, ifname),
        ) else {
            return Ok(());
        };
        datapath.release(ip).map_err(|e| AllocatorError::Datapath {
            doing: format!("detaching {ip}"),
            message: e.to_string(),
        })?;
        if inner.host_veths.remove(&ip).is_some() {
            inner.save(&self.state)?;
        }
        Ok(())
    }

    /// GC: free every allocation whose attachment is not valid; how many.
    pub async fn gc(&self, valid: &BTreeSet<(String, String)>) -> Result<usize, AllocatorError> {
        let mut inner = self.inner.lock().await;
        let garbage = collect_garbage(&inner.allocations, valid);
        self.free(&mut inner, &garbage, "gc").await?;
        Ok(garbage.len())
    }

    /// The node as the API server now has it. Its pool is parsed before
    /// the lock is taken, and the node it replaces dropped after: ADDs wait
    /// only for the swap.
    pub async fn node_changed(&self, node: CiliumNode) {
        let pool = PoolIndex::new(&node);
        let (ranges, malformed) = crate::snat::vpc_ranges(&node);
        self.vpc_ranges.send_if_modified(|current| {
            let changed = *current != ranges;
            if changed {
                // Once per change, not on every echo of the agent's own patches.
                if !malformed.is_empty() {
                    tracing::warn!(
                        ?malformed,
                        "VPC ranges in the CiliumNode that are not IPv4 CIDRs: left out of SNAT"
                    );
                }
                *current = ranges;
            }
            changed
        });
        let replaced = {
            let mut inner = self.inner.lock().await;
            inner.pool = pool;
            let replaced = std::mem::replace(&mut inner.node, node);
            self.sizes(&inner);
            replaced
        };
        // Even an echo of the agent's own patch may carry someone else's
        // change: the publisher compares.
        self.changed.notify_one();
        drop(replaced);
    }

    /// The change of status.ipam that brings the node in step with the
    /// agent (its allocations in status.ipam.used, its handshake answers
    /// in release-ips), or None when it is in step.
    pub async fn status_change(&self) -> Option<StatusChange> {
        let inner = self.inner.lock().await;
        status_change(&inner.node, &inner.allocations)
    }

    /// After a change was published: the node view holds what it set, so
    /// the next change is computed against it. Counts the answers given.
    pub async fn published(&self, change: &StatusChange) {
        for answer in change.release.values() {
            self.metrics
                .answered(answer.as_ref().map_or("removed", |state| state.as_str()));
        }
        let mut inner = self.inner.lock().await;
        change.apply(&mut inner.node);
        for (ip, entry) in &change.used {
            inner.pool.note_used(ip, entry.is_some());
        }
        for (ip, state) in &change.release {
            inner.pool.note_release(ip, state.is_some());
        }
    }
}

/// The number of the interface `ip` lives on, as the datapath keys its
/// endpoints (0, the primary, when the node does not place it).
fn interface_number(node: &CiliumNode, allocation: &Allocation, ip: IpAddr) -> u32 {
    placement(node, allocation.resource.as_deref(), ip).map_or(0, |placed| placed.interface_number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::RouteError;
    use async_trait::async_trait;
    use ipam_ciliumnode::{AllocationIp, EniInterface, EniSubnet, ReleaseState};
    use ipam_node_routes::PodRoute;

    /// Records what the allocator asked of the routes.
    #[derive(Default)]
    struct Recorded {
        installed: std::sync::Mutex<Vec<PodRoute>>,
        reconciled: std::sync::Mutex<Vec<Vec<PodRoute>>>,
    }

    #[async_trait]
    impl RouteTable for Recorded {
        async fn install(&self, route: &PodRoute) -> Result<(), RouteError> {
            self.installed.lock().unwrap().push(*route);
            Ok(())
        }
        async fn reconcile(&self, wanted: &[PodRoute]) -> Result<(), RouteError> {
            self.reconciled.lock().unwrap().push(wanted.to_vec());
            Ok(())
        }
    }

    /// A node whose pool holds `ips` on eni-1 (device 1, 10.0.1.0/24).
    fn node(ips: &[&str]) -> CiliumNode {
        let mut node = CiliumNode {
            name: "n1".into(),
            ..Default::default()
        };
        for ip in ips {
            node.spec.ipam.pool.insert(
                ip.to_string(),
                AllocationIp {
                    owner: None,
                    resource: Some("eni-1".into()),
                },
            );
        }
        node.status.eni.enis.insert(
            "eni-1".into(),
            EniInterface {
                id: "eni-1".into(),
                mac: "02:00:00:00:00:01".into(),
                number: 1,
                subnet: EniSubnet {
                    id: "subnet-1".into(),
                    cidr: "10.0.1.0/24".into(),
                },
                ..Default::default()
            },
        );
        node
    }

    fn holder(id: &str) -> Holder {
        Holder {
            container_id: id.into(),
            ifname: "eth0".into(),
            owner: format!("default/{id}"),
        }
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        state: StateFile,
        routes: Arc<Recorded>,
        metrics: Arc<AgentMetrics>,
        allocator: Allocator,
    }

    fn fixture(ips: &[&str], allocations: Allocations) -> Fixture {
        let saved = Saved {
            allocations,
            host_veths: HostVeths::new(),
        };
        let dir = tempfile::tempdir().unwrap();
        let state = StateFile::in_dir(dir.path());
        let routes = Arc::new(Recorded::default());
        let metrics = Arc::new(AgentMetrics::new());
        let allocator = Allocator::new(
            saved,
            node(ips),
            state.clone(),
            routes.clone(),
            metrics.clone(),
        );
        Fixture {
            _dir: dir,
            state,
            routes,
            metrics,
            allocator,
        }
    }

    #[tokio::test]
    async fn adds_are_saved_routed_and_idempotent_and_the_pool_runs_out() {
        let f = fixture(&["10.0.1.5", "10.0.1.6"], Allocations::new());
        let a = f.allocator.add(holder("a")).await.unwrap();
        assert_eq!(a.gateway, Some("10.0.1.1".parse().unwrap()));
        assert!(
            f.state.load().unwrap().allocations.contains_key(&a.ip),
            "saved before the answer"
        );
        assert_eq!(f.routes.installed.lock().unwrap()[0].interface_number, 1);
        let again = f.allocator.add(holder("a")).await.unwrap();
        assert_eq!(again.ip, a.ip, "a retried ADD gets the same address");
        let b = f.allocator.add(holder("b")).await.unwrap();
        assert_ne!(a.ip, b.ip);
        let error = f.allocator.add(holder("c")).await.unwrap_err();
        assert_eq!(error.cni_code(), 11, "{error}");
        assert_eq!(f.state.load().unwrap().allocations.len(), 2);
    }

    /// The agent's size gauges as a scrape reads them.
    fn sizes_scraped(metrics: &AgentMetrics) -> (String, String) {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, metrics.registry()).unwrap();
        let value = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit(' ').next())
                .unwrap_or_default()
                .to_string()
        };
        (
            value("ipam_agent_allocated_addresses "),
            value("ipam_agent_pool_addresses "),
        )
    }

    #[tokio::test]
    async fn the_size_gauges_follow_adds_dels_and_the_node() {
        let f = fixture(&["10.0.1.5", "10.0.1.6"], Allocations::new());
        f.allocator.add(holder("a")).await.unwrap();
        f.allocator.add(holder("b")).await.unwrap();
        assert_eq!(sizes_scraped(&f.metrics), ("2".into(), "2".into()));
        f.allocator.del("a", "eth0").await.unwrap();
        assert_eq!(sizes_scraped(&f.metrics), ("1".into(), "2".into()));
        f.allocator
            .node_changed(node(&["10.0.1.5", "10.0.1.6", "10.0.1.7"]))
            .await;
        assert_eq!(sizes_scraped(&f.metrics), ("1".into(), "3".into()));
    }

    #[tokio::test]
    async fn del_is_idempotent_check_knows_and_gc_frees_the_unlisted() {
        let f = fixture(&["10.0.1.5", "10.0.1.6"], Allocations::new());
        let a = f.allocator.add(holder("a")).await.unwrap();
        f.allocator.add(holder("b")).await.unwrap();
        assert_eq!(f.allocator.check("a", "eth0").await.unwrap().ip, a.ip);
        f.allocator.del("a", "eth0").await.unwrap();
        f.allocator.del("a", "eth0").await.unwrap();
        assert_eq!(
            f.allocator.check("a", "eth0").await.unwrap_err().cni_code(),
            3
        );
        assert_eq!(
            f.routes.reconciled.lock().unwrap().last().unwrap().len(),
            1,
            "the routes of b stay"
        );
        let freed = f.allocator.gc(&BTreeSet::new()).await.unwrap();
        assert_eq!(freed, 1);
        assert!(f.state.load().unwrap().allocations.is_empty());
    }

    #[tokio::test]
    async fn attach_takes_only_the_attachments_own_address() {
        let f = fixture(&["10.0.1.5", "10.0.1.6"], Allocations::new());
        let a = f.allocator.add(holder("a")).await.unwrap();
        let other: IpAddr = "10.0.1.6".parse().unwrap();
        // (container, address, Ok or the CNI code)
        let table = [
            ("a", other, Err(101)),
            ("b", a.ip, Err(101)),
            ("a", a.ip, Ok(())),
        ];
        for (container, address, want) in table {
            let got = f
                .allocator
                .attach(container, "eth0", "veth1", address)
                .await
                .map_err(|e| e.cni_code());
            assert_eq!(got, want, "{container} {address}");
        }
        assert!(
            f.state.load().unwrap().host_veths.is_empty(),
            "without a datapath nothing is attached, nor saved as attached"
        );
        f.allocator.detach("a", "eth0").await.unwrap();
        f.allocator.detach("unknown", "eth0").await.unwrap();
    }

    #[tokio::test]
    async fn the_status_patch_publishes_allocations_and_answers_only() {
        let f = fixture(&["10.0.1.5", "10.0.1.6"], Allocations::new());
        let mut node = node(&["10.0.1.5", "10.0.1.6"]);
        node.status
            .ipam
            .used
            .insert("10.0.1.9".into(), AllocationIp::default());
        node.status
            .ipam
            .release_ips
            .insert("10.0.1.6".into(), ReleaseState::MarkedForRelease);
        f.allocator.node_changed(node).await;
        let a = f.allocator.add(holder("a")).await.unwrap();
        assert_eq!(a.ip.to_string(), "10.0.1.5", "10.0.1.6 is in the handshake");
        let change = f.allocator.status_change().await.unwrap();
        assert_eq!(
            change.to_patch(),
            serde_json::json!({"status": {"ipam": {
                "used": {"10.0.1.5": {"owner": "default/a", "resource": "eni-1"}, "10.0.1.9": null},
                "release-ips": {"10.0.1.6": "ready-for-release"},
            }}})
        );
        f.allocator.published(&change).await;
        assert_eq!(
            f.allocator.status_change().await,
            None,
            "in step after the patch"
        );
    }

    #[tokio::test]
    async fn a_restore_keeps_live_pods_and_frees_gone_ones() {
        let mut saved = Allocations::new();
        for (ip, id) in [("10.0.1.5", "a"), ("10.0.1.6", "b")] {
            saved.insert(
                ip.parse().unwrap(),
                Allocation {
                    holder: holder(id),
                    resource: Some("eni-1".into()),
                },
            );
        }
        let f = fixture(&["10.0.1.5", "10.0.1.6"], saved);
        let live = BTreeSet::from(["default/a".to_string()]);
        let report = f.allocator.restore(Some(&live)).await.unwrap();
        assert_eq!(report.kept, 1);
        assert_eq!(report.freed, ["10.0.1.6".parse::<IpAddr>().unwrap()]);
        assert_eq!(f.state.load().unwrap().allocations.len(), 1, "saved");
        assert_eq!(f.routes.reconciled.lock().unwrap()[0].len(), 1);
    }
}
