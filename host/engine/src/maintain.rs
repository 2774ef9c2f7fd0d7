//! Per-node pool maintenance: the [`Maintainer`] runs one pass over a node
//! (allocation steps, [`crate::allocate`], until satisfied or blocked, then a
//! release round, [`crate::release`]), publishes the result on the node and
//! records metrics. It holds no lock across a cloud call; the engine decides
//! which node goes when.

use std::sync::Arc;
use std::time::Duration;

use ipam_ciliumnode::{CiliumNode, ReleaseState};
use ipam_cloud::{CloudApi, CloudError};
use ipam_pool::pool::count;
use ipam_pool::{watermarks, NodeView};
use tokio::time::Instant;

use crate::allocate::{allocate_step, Step};
use crate::error::MaintainError;
use crate::figures::{FigureBook, NodeFigures};
use crate::instance_cache::InstanceCache;
use crate::maintenance_settings::MaintenanceSettings;
use crate::metrics::{DurationLabel, Metrics, SubnetLabel, SubnetZoneLabel};
use crate::node_store::{Announcement, NodeStore};
use crate::parts::Parts;
use crate::publish::publish;
use crate::release::{release_round, ReleaseMemory, ReleaseRound};

/// A maintainer that goes (its replica stopped leading) takes its nodes'
/// figures with it: the next leader's maintainer records them afresh.
impl Drop for Maintainer {
    fn drop(&mut self) {
        self.figures.forget_all(&self.parts.metrics);
    }
}

/// What one pass over a node did and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePass {
    pub steps: Vec<Step>,
    pub release: ReleaseRound,
    /// IPs in the pool, used, and still needed after the pass.
    pub available: u32,
    pub used: u32,
    pub needed: u32,
    /// Marks wait for the agent or the delay: visit again soon.
    pub release_pending: bool,
}

pub struct Maintainer {
    parts: Parts,
    release_memory: ReleaseMemory,
    figures: FigureBook,
}

impl Maintainer {
    pub fn new(
        cloud: Arc<dyn CloudApi>,
        cache: Arc<InstanceCache>,
        store: Arc<dyn NodeStore>,
        settings: MaintenanceSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            parts: Parts {
                cloud,
                cache,
                store,
                settings,
                metrics,
            },
            release_memory: ReleaseMemory::default(),
            figures: FigureBook::default(),
        }
    }

    /// The cloud, cache, node store, settings and metrics it works with.
    pub fn parts(&self) -> &Parts {
        &self.parts
    }

    pub fn cache(&self) -> &InstanceCache {
        &self.parts.cache
    }

    pub fn settings(&self) -> &MaintenanceSettings {
        &self.parts.settings
    }

    async fn node(&self, name: &str) -> Result<CiliumNode, MaintainError> {
        self.parts
            .store
            .get(name)
            .await?
            .ok_or_else(|| MaintainError::NoSuchNode(name.to_string()))
    }

    /// One pass: allocate until satisfied or blocked, then a release round.
    /// The node is read once; every write returns it as it is afterwards.
    pub async fn maintain(&self, name: &str, pending_pods: u32) -> Result<NodePass, MaintainError> {
        let node = self.node(name).await?;
        let (steps, node) = self.allocate_node(node, pending_pods).await?;
        let (release, node) = release_round(
            &self.parts,
            &self.release_memory,
            node,
            pending_pods,
            Instant::now(),
        )
        .await?;
        let available = count(node.spec.ipam.pool.len());
        let used = count(node.status.ipam.used.len());
        let needed = watermarks::needed(
            node.watermarks(),
            available,
            used.saturating_add(pending_pods),
        );
        let release_pending = node
            .status
            .ipam
            .release_ips
            .values()
            .any(|state| *state != ReleaseState::Released)
            || !self.release_memory.is_empty(name);
        let at_capacity = matches!(steps.last(), Some(Step::Blocked(_)));
        self.figures.record(
            &self.parts.metrics,
            name,
            NodeFigures {
                available: i64::from(available),
                used: i64::from(used),
                needed: i64::from(needed),
                at_capacity,
            },
        );
        Ok(NodePass {
            steps,
            release,
            available,
            used,
            needed,
            release_pending,
        })
    }

    /// Allocation steps for a node until it is satisfied or blocked (at most
    /// `max_steps`), publishing its pool and interfaces after every change and
    /// its blocking reason in status.ipam.operator-status.
    pub async fn allocate(
        &self,
        name: &str,
        pending_pods: u32,
    ) -> Result<Vec<Step>, MaintainError> {
        let node = self.node(name).await?;
        Ok(self.allocate_node(node, pending_pods).await?.0)
    }

    /// One release round for a node at `now`, its pods pending as the node
    /// store counts them.
    pub async fn release(&self, name: &str, now: Instant) -> Result<ReleaseRound, MaintainError> {
        let node = self.node(name).await?;
        let pending_pods = self.parts.store.pending_pods(name);
        Ok(
            release_round(&self.parts, &self.release_memory, node, pending_pods, now)
                .await?
                .0,
        )
    }

    /// [`Maintainer::allocate`] from the node as read; the steps and the node
    /// as it is afterwards.
    async fn allocate_node(
        &self,
        mut node: CiliumNode,
        pending_pods: u32,
    ) -> Result<(Vec<Step>, CiliumNode), MaintainError> {
        let parts = &self.parts;
        let mut steps = Vec::new();
        for _ in 0..parts.settings.max_steps.max(1) {
            let started = Instant::now();
            let result = allocate_step(
                parts.cloud.as_ref(),
                &parts.cache,
                &parts.settings,
                &node,
                pending_pods,
            )
            .await;
            self.observe_step(&result, started.elapsed());
            let step = result?;
            self.announce_step(&node, &step).await;
            let error = match &step {
                Step::Blocked(reason) => reason.clone(),
                _ => String::new(),
            };
            if let Some(updated) = publish(
                parts.store.as_ref(),
                &parts.cache,
                parts.settings.ipam_mode,
                &node,
                Some(error),
            )
            .await?
            {
                node = updated;
            }
            let done = matches!(step, Step::Satisfied | Step::Blocked(_));
            steps.push(step);
            if done {
                break;
            }
        }
        Ok((steps, node))
    }

    /// Tell people about an interface created, or a node newly blocked.
    async fn announce_step(&self, node: &CiliumNode, step: &Step) {
        let announcement = match step {
            Step::Created {
                interface,
                index,
                subnet,
            } => Announcement {
                warning: false,
                reason: "InterfaceCreated",
                note: format!("created {interface} at index {index} in {subnet}"),
            },
            Step::Blocked(reason) if *reason != node.status.ipam.operator_status.error => {
                Announcement {
                    warning: true,
                    reason: "CannotAllocate",
                    note: reason.clone(),
                }
            }
            _ => return,
        };
        self.parts.store.announce(&node.name, announcement).await;
    }

    fn observe_step(&self, result: &Result<Step, CloudError>, took: Duration) {
        let metrics = &self.parts.metrics;
        let (kind, status, subnet) = match result {
            Ok(Step::Assigned { subnet, .. }) => ("ip", "success", subnet.clone()),
            Ok(Step::Created { subnet, .. }) => ("interface", "success", subnet.clone()),
            Ok(Step::Satisfied | Step::Blocked(_)) => return,
            Err(_) => ("ip", "failed", String::new()),
        };
        if status == "success" {
            let ops = if kind == "ip" {
                &metrics.allocation_ops
            } else {
                &metrics.interface_creation_ops
            };
            ops.get_or_create(&SubnetLabel {
                subnet_id: subnet.clone(),
            })
            .inc();
        }
        metrics
            .allocation_duration_seconds
            .get_or_create(&DurationLabel {
                r#type: kind,
                status,
                subnet_id: subnet,
            })
            .observe(took.as_secs_f64());
    }

    /// A node left the cluster: forget what the engine kept for it.
    pub fn forget(&self, name: &str) {
        self.release_memory.forget(name);
        self.figures.forget(&self.parts.metrics, name);
    }

    /// Free addresses per subnet, from the cache.
    pub fn record_subnets(&self) {
        for subnet in self.parts.cache.subnets() {
            self.parts
                .metrics
                .available_ips_per_subnet
                .get_or_create(&SubnetZoneLabel {
                    subnet_id: subnet.id.clone(),
                    availability_zone: subnet.availability_zone.clone(),
                })
                .set(i64::from(subnet.available_addresses));
        }
    }
}
