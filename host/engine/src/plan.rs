//! What `run` would do, without doing it: the engine's own maintenance pass
//! over every node, against a [`DryRunCloud`] (reads go to the real cloud,
//! changes are recorded and answered as successes) and a copy of the
//! CiliumNodes in memory (nothing is written to the cluster). The same code
//! decides as in `run`, so the plan is what `run` would do first, from the
//! same state: the allocation steps, the calls with their rate-model cost,
//! the release handshake's marks once the release delay has passed, and the
//! interfaces the leaked-interface GC would delete.

mod cost;
mod dry_run_cloud;
mod free_addresses;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ipam_ciliumnode::CiliumNode;
use ipam_cloud::{CloudApi, CloudError, Operation};
use ipam_pool::pool::count;
use tokio::time::Instant;

use crate::allocate::Step;
use crate::clock::unix_now;
use crate::engine::deficit;
use crate::gc::{LeakCollector, LeakReview};
use crate::instance_cache::InstanceCache;
use crate::maintain::Maintainer;
use crate::maintenance_settings::MaintenanceSettings;
use crate::metrics::Metrics;
use crate::node_store::{MemoryNodeStore, NodeStore, StoreError};

pub use cost::{bucket_costs, BucketCost};
pub use dry_run_cloud::{DryRunCloud, PlannedCall, PLANNED_INTERFACE_PREFIX};

/// The settings `run` would work with.
#[derive(Debug, Clone)]
pub struct PlanSettings {
    pub maintenance: MaintenanceSettings,
    pub gc_grace: Duration,
    pub reuse_cooldown: Duration,
}

/// A node as it is read, and what a pass would do to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePlan {
    pub name: String,
    pub instance_id: String,
    pub pending_pods: u32,
    /// Addresses in the pool and in use, as read.
    pub available: u32,
    pub used: u32,
    /// Addresses the pool would have, and still lack, after the pass.
    pub available_after: u32,
    pub needed_after: u32,
    pub steps: Vec<Step>,
    /// Changes to the cloud, in order.
    pub calls: Vec<PlannedCall>,
    /// Entries the pass would add to and remove from spec.ipam.pool.
    pub pool_added: u32,
    pub pool_removed: u32,
    /// The interfaces status (status.eni.enis or status.azure.interfaces)
    /// would be rewritten.
    pub interfaces_rewritten: bool,
    /// Addresses marked for release now or once the release delay has
    /// passed (the agent then answers before anything leaves the cloud).
    pub marked: Vec<String>,
    /// The pass could not be planned (a read failed), and why.
    pub failed: Option<String>,
}

impl NodePlan {
    /// A node as read, with nothing planned yet: its pool as it is.
    pub fn before(
        name: &str,
        instance_id: &str,
        pending_pods: u32,
        available: u32,
        used: u32,
    ) -> Self {
        Self {
            name: name.to_string(),
            instance_id: instance_id.to_string(),
            pending_pods,
            available,
            used,
            available_after: available,
            needed_after: 0,
            steps: Vec::new(),
            calls: Vec::new(),
            pool_added: 0,
            pool_removed: 0,
            interfaces_rewritten: false,
            marked: Vec::new(),
            failed: None,
        }
    }

    /// Why the node cannot get what it needs, if it cannot.
    pub fn blocked(&self) -> Option<&str> {
        match self.steps.last() {
            Some(Step::Blocked(reason)) => Some(reason),
            _ => None,
        }
    }

    /// Taken over as it is: nothing changes in the cloud or in its pool,
    /// nothing is marked, nothing is missing.
    pub fn adopted_as_is(&self) -> bool {
        self.failed.is_none()
            && self.blocked().is_none()
            && self.calls.is_empty()
            && self.pool_added == 0
            && self.pool_removed == 0
            && self.marked.is_empty()
    }
}

/// The leaked-interface GC's view: whether the provider can delete, and
/// what a round would find.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcPlan {
    pub can_delete: bool,
    pub review: LeakReview,
    pub grace_seconds: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPlan {
    pub provider: String,
    /// In the order `run` would take them (largest deficit first).
    pub nodes: Vec<NodePlan>,
    pub gc: GcPlan,
    /// Reads the plan made of the real cloud, by operation. It made no
    /// change: there is no path for one.
    pub reads: BTreeMap<Operation, u32>,
}

impl ClusterPlan {
    /// Every change, all nodes together, then the GC's deletes.
    pub fn calls(&self) -> Vec<PlannedCall> {
        let mut calls: Vec<PlannedCall> = self.nodes.iter().flat_map(|n| n.calls.clone()).collect();
        calls.extend(self.gc.review.leaked.iter().map(|i| PlannedCall {
            operation: Operation::DeleteInterface,
            interface: i.id.clone(),
            subnet: Some(i.subnet_id.clone()),
            addresses: 0,
            prefixes: 0,
        }));
        calls
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("listing the cloud: {0}")]
    Cloud(#[from] CloudError),
    #[error("the nodes' copy: {0}")]
    Store(#[from] StoreError),
}

/// Plan every node of `nodes`, with `pending_pods` waiting on each (by
/// node name), against `cloud`, which is only read.
pub async fn plan_cluster(
    cloud: Arc<dyn CloudApi>,
    nodes: Vec<CiliumNode>,
    pending_pods: &BTreeMap<String, u32>,
    settings: PlanSettings,
) -> Result<ClusterPlan, PlanError> {
    let dry = Arc::new(DryRunCloud::new(cloud));
    let cache = Arc::new(InstanceCache::with_reuse_cooldown(settings.reuse_cooldown));
    cache.resync_all(dry.as_ref()).await?;
    let store = Arc::new(MemoryNodeStore::new());
    let mut order: Vec<(u32, String)> = Vec::with_capacity(nodes.len());
    for node in nodes {
        order.push((deficit(&node), node.name.clone()));
        let pending = pending_pods.get(&node.name).copied().unwrap_or(0);
        let name = node.name.clone();
        store.upsert(node)?;
        store.set_pending_pods(&name, pending)?;
    }
    order.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let release_delay = settings.maintenance.release_delay;
    let maintainer = Maintainer::new(
        dry.clone(),
        cache.clone(),
        store.clone(),
        settings.maintenance.clone(),
        Arc::new(Metrics::new()),
    );
    let mut planned = Vec::with_capacity(order.len());
    for (_, name) in order {
        let Some(before) = store.get(&name).await? else {
            continue;
        };
        let pending = store.pending_pods(&name);
        let mut plan = NodePlan::before(
            &name,
            &before.spec.instance_id,
            pending,
            count(before.spec.ipam.pool.len()),
            count(before.status.ipam.used.len()),
        );
        match maintainer.maintain(&name, pending).await {
            Ok(pass) => {
                plan.steps = pass.steps;
                plan.available_after = pass.available;
                plan.needed_after = pass.needed;
                plan.marked = pass.release.marked;
                // The candidates this pass first saw are marked once the
                // release delay has passed: a second round then.
                match maintainer
                    .release(&name, Instant::now() + release_delay)
                    .await
                {
                    Ok(later) => plan.marked.extend(later.marked),
                    Err(error) => plan.failed = Some(error.to_string()),
                }
            }
            Err(error) => plan.failed = Some(error.to_string()),
        }
        plan.calls = dry.take_calls();
        if let Some(after) = store.get(&name).await? {
            let (added, removed) = pool_change(&before, &after);
            plan.pool_added = added;
            plan.pool_removed = removed;
            plan.interfaces_rewritten = before.status.eni.enis != after.status.eni.enis
                || before.status.azure.interfaces != after.status.azure.interfaces;
        }
        planned.push(plan);
    }
    let collector = LeakCollector::new(
        settings.maintenance.ownership(),
        settings.gc_grace.as_secs(),
    );
    let can_delete = dry.info().capabilities.delete_interface;
    let review = match can_delete {
        true => collector.review(
            collector.list(dry.as_ref()).await?,
            unix_now(),
            &cache.attached_interfaces(),
        ),
        false => LeakReview::default(),
    };
    Ok(ClusterPlan {
        provider: dry.info().name.clone(),
        nodes: planned,
        gc: GcPlan {
            can_delete,
            review,
            grace_seconds: collector.grace_seconds(),
        },
        reads: dry.reads(),
    })
}

/// Pool entries `after` has that `before` has not, and the reverse.
fn pool_change(before: &CiliumNode, after: &CiliumNode) -> (u32, u32) {
    let added = after
        .spec
        .ipam
        .pool
        .keys()
        .filter(|ip| !before.spec.ipam.pool.contains_key(*ip))
        .count();
    let removed = before
        .spec
        .ipam
        .pool
        .keys()
        .filter(|ip| !after.spec.ipam.pool.contains_key(*ip))
        .count();
    (count(added), count(removed))
}
