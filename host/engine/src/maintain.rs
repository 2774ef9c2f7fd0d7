//! Per-node pool maintenance: the [`Maintainer`] runs one pass over a node
//! (allocation steps, [`crate::allocate`], until satisfied or blocked, then a
//! release round, [`crate::release`]), publishes the result on the node and
//! records metrics. A pass that fails on trouble the cluster's operator must
//! see ([`crate::trouble::Trouble`]) is told as a warning Event on the node, once per
//! distinct trouble until a pass succeeds. It holds no lock across a cloud
//! call; the engine decides which node goes when.

use std::sync::Arc;

use ipam_ciliumnode::{CiliumNode, ReleaseState};
use ipam_cloud::{CloudApi, CloudError};
use ipam_pool::pool::count;
use ipam_pool::room::{room, Room};
use ipam_pool::{watermarks, NodeView};
use tokio::time::Instant;

use crate::allocate::{allocate_step, Attempt, Step};
use crate::error::MaintainError;
use crate::figures::{FigureBook, NodeFigures};
use crate::instance_cache::InstanceCache;
use crate::maintenance_settings::MaintenanceSettings;
use crate::metrics::{step_type, DurationLabel, Metrics, SubnetLabel, SubnetZoneLabel};
use crate::node_store::{Announcement, NodeStore};
use crate::parts::Parts;
use crate::publish::publish;
use crate::release::{release_round, ReleaseMemory, ReleaseRound};
use crate::trouble::TroubleMemory;

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
    trouble: TroubleMemory,
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
            trouble: TroubleMemory::default(),
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
    /// A pass failing on [`crate::trouble::Trouble`] is told on the node.
    pub async fn maintain(&self, name: &str, pending_pods: u32) -> Result<NodePass, MaintainError> {
        let result = self.pass(name, pending_pods).await;
        match &result {
            Ok(_) => self.trouble.clear(name),
            Err(MaintainError::Cloud(error)) => {
                if let Some(announcement) = self.trouble.tell(name, error) {
                    self.parts.store.announce(name, announcement).await;
                }
            }
            Err(_) => {}
        }
        result
    }

    async fn pass(&self, name: &str, pending_pods: u32) -> Result<NodePass, MaintainError> {
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
        self.figures.record(
            &self.parts.metrics,
            name,
            NodeFigures {
                pool: i64::from(available),
                used: i64::from(used),
                needed: i64::from(needed),
                room: self.room(&node),
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

    /// What the node's instance has room for, from the cache (no call);
    /// None while the instance or its type's limits are unknown.
    fn room(&self, node: &CiliumNode) -> Option<Room> {
        let cache = &self.parts.cache;
        let instance = cache.instance(&node.spec.instance_id)?;
        let limits = cache.known_limits(&instance.instance_type)?;
        let settings = &self.parts.settings;
        Some(room(
            node,
            &instance,
            limits,
            self.parts.cloud.info().capabilities,
            settings.prefix_delegation,
            settings.ipam_mode,
        ))
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
            let mut attempt = None;
            let result = allocate_step(
                parts.cloud.as_ref(),
                &parts.cache,
                &parts.settings,
                &node,
                pending_pods,
                &mut attempt,
            )
            .await;
            let ready_at = Instant::now();
            if let Some(attempt) = attempt {
                self.observe_attempt(&attempt, &result);
            }
            let step = result?;
            self.announce_step(&node, &step).await;
            let error = match &step {
                Step::Blocked(reason) => reason.clone(),
                _ => String::new(),
            };
            if let Some(updated) = publish(parts, &node, Some(error), ready_at).await? {
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

    /// Cilium's allocation metrics for the cloud mutation of one step.
    fn observe_attempt(&self, attempt: &Attempt, result: &Result<Step, CloudError>) {
        let metrics = &self.parts.metrics;
        let subnet = SubnetLabel {
            subnet_id: attempt.subnet.clone(),
        };
        let status = match (result, attempt.create) {
            (Ok(_), _) => "success",
            // Cilium labels a failed creation with its error condition.
            (Err(error), true) => error.response_code(),
            (Err(_), false) => "failed",
        };
        if result.is_ok() {
            metrics
                .ip_allocation_ops
                .get_or_create(&subnet)
                .inc_by(attempt.addresses);
            if attempt.create {
                metrics.interface_creation_ops.get_or_create(&subnet).inc();
            }
        }
        metrics
            .allocation_duration_seconds
            .get_or_create(&DurationLabel {
                r#type: match attempt.create {
                    true => step_type::CREATE_INTERFACE_AND_ALLOCATE_IP,
                    false => step_type::ALLOCATE_IP,
                },
                status,
                subnet_id: attempt.subnet.clone(),
            })
            .observe(attempt.took.as_secs_f64());
    }

    /// A node left the cluster: forget what the engine kept for it.
    pub fn forget(&self, name: &str) {
        self.release_memory.forget(name);
        self.figures.forget(&self.parts.metrics, name);
        self.trouble.clear(name);
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
