//! Per-node pool maintenance: the [`Maintainer`] applies the allocation
//! steps ([`super::allocate`]) and the release round ([`super::reclaim`]) to
//! one node at a time, publishes the result on the node, and records metrics.
//! It holds no lock across a cloud call; the engine decides which node goes
//! when.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::allocate::{allocate_step, pool_of, Step};
use super::cache::InstanceCache;
use super::node::{AzureAddress, AzureInterface, CiliumNode, EniInterface, EniSubnet, EniVpc};
use super::reclaim::{ReleaseMemory, ReleaseRound};
use super::store::{Announcement, NodeStore, NodeUpdate, StoreError};
use super::watermarks;
use crate::cloud::{CloudApi, CloudError, Instance};
use crate::metrics::{DurationLabel, Metrics, NodeLabel, SubnetLabel};

/// Engine-wide settings of pool maintenance.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Tagged on every interface the operator creates (`ipam-operator/cluster`);
    /// leaked-interface GC and interface freeing touch only interfaces with it.
    pub cluster_name: String,
    /// Use /28 prefixes where the instance type and provider allow.
    pub prefix_delegation: bool,
    /// How long an address must stay excess before it is marked for release
    /// (Cilium's excess-ip-release-delay, 180 s).
    pub release_delay: Duration,
    /// Delete interfaces of ours whose every address is excess and unused
    /// (when the provider can delete interfaces).
    pub free_interfaces: bool,
    /// Allocation steps per node per pass; the node is visited again after.
    pub max_steps: usize,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            cluster_name: "default".into(),
            prefix_delegation: false,
            release_delay: Duration::from_secs(180),
            free_interfaces: true,
            max_steps: 10,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MaintainError {
    #[error(transparent)]
    Cloud(#[from] CloudError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("node {0} does not exist")]
    NoSuchNode(String),
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

/// The per-node summary the metrics aggregate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct NodeFigures {
    available: i64,
    used: i64,
    needed: i64,
    at_capacity: bool,
}

pub struct Maintainer {
    pub(super) cloud: Arc<dyn CloudApi>,
    pub(super) cache: Arc<InstanceCache>,
    pub(super) store: Arc<dyn NodeStore>,
    pub(super) settings: EngineSettings,
    pub(super) metrics: Arc<Metrics>,
    pub(super) release_memory: ReleaseMemory,
    figures: std::sync::Mutex<BTreeMap<String, NodeFigures>>,
}

impl Maintainer {
    pub fn new(
        cloud: Arc<dyn CloudApi>,
        cache: Arc<InstanceCache>,
        store: Arc<dyn NodeStore>,
        settings: EngineSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            cloud,
            cache,
            store,
            settings,
            metrics,
            release_memory: ReleaseMemory::default(),
            figures: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    pub fn cache(&self) -> &InstanceCache {
        &self.cache
    }

    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    pub(super) async fn node(&self, name: &str) -> Result<CiliumNode, MaintainError> {
        self.store
            .get(name)
            .await?
            .ok_or_else(|| MaintainError::NoSuchNode(name.to_string()))
    }

    /// One pass: allocate until satisfied or blocked, then a release round.
    /// The node is read once; every write returns it as it is afterwards.
    pub async fn maintain(&self, name: &str, pending_pods: u32) -> Result<NodePass, MaintainError> {
        let node = self.node(name).await?;
        let (steps, node) = self.allocate_node(node, pending_pods).await?;
        let (release, node) = self.release_node(node, Instant::now()).await?;
        let available = u32::try_from(node.spec.ipam.pool.len()).unwrap_or(u32::MAX);
        let used = u32::try_from(node.status.ipam.used.len()).unwrap_or(u32::MAX);
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
            .any(|state| state != super::release::RELEASED)
            || !self.release_memory.is_empty(name);
        let at_capacity = matches!(steps.last(), Some(Step::Blocked(_)));
        self.record_figures(
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

    /// [`Maintainer::allocate`] from the node as read; the steps and the node
    /// as it is afterwards.
    pub(super) async fn allocate_node(
        &self,
        mut node: CiliumNode,
        pending_pods: u32,
    ) -> Result<(Vec<Step>, CiliumNode), MaintainError> {
        let mut steps = Vec::new();
        for _ in 0..self.settings.max_steps.max(1) {
            let started = Instant::now();
            let result = allocate_step(
                self.cloud.as_ref(),
                &self.cache,
                &self.settings,
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
            if let Some(updated) = self.publish(&node, Some(error)).await? {
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
        self.store.announce(&node.name, announcement).await;
    }

    /// Write what changed of the node's pool, interfaces and operator status;
    /// the node as it is afterwards, if anything was written.
    pub(super) async fn publish(
        &self,
        node: &CiliumNode,
        operator_error: Option<String>,
    ) -> Result<Option<CiliumNode>, MaintainError> {
        let mut update = NodeUpdate::default();
        if let Some(instance) = self.cache.instance(&node.spec.instance_id) {
            let pool = pool_of(node, &instance, &self.cache.withheld());
            if pool != node.spec.ipam.pool {
                update.pool = Some(pool);
            }
            // Azure-mode agents (spec.azure set) read status.azure; ENI-mode
            // agents status.eni.
            if node.spec.azure.is_some() {
                let interfaces = self.azure_interfaces_of(&instance);
                if interfaces != node.status.azure.interfaces {
                    update.azure_interfaces = Some(interfaces);
                }
            } else {
                let enis = self.enis_of(&instance);
                if enis != node.status.eni.enis {
                    update.enis = Some(enis);
                }
            }
        }
        if let Some(error) = operator_error {
            if error != node.status.ipam.operator_status.error {
                update.operator_error = Some(error);
            }
        }
        if update == NodeUpdate::default() {
            return Ok(None);
        }
        Ok(Some(self.store.update(&node.name, &update).await?))
    }

    /// status.eni.enis: what cilium-agent needs of each interface to route
    /// through it (MAC, device index, subnet and VPC CIDRs, addresses).
    fn enis_of(&self, instance: &Instance) -> BTreeMap<String, EniInterface> {
        let vpc = self.cache.vpc(&instance.vpc_id);
        instance
            .interfaces
            .iter()
            .map(|eni| {
                let cidr = self.cache.subnet_cidr(&eni.subnet_id);
                let interface = EniInterface {
                    id: eni.id.clone(),
                    mac: eni.mac.clone(),
                    number: eni.index,
                    subnet: EniSubnet {
                        id: eni.subnet_id.clone(),
                        cidr,
                    },
                    vpc: EniVpc {
                        id: eni.vpc_id.clone(),
                        primary_cidr: vpc
                            .as_ref()
                            .map(|v| v.primary_cidr.clone())
                            .unwrap_or_default(),
                        cidrs: vpc.as_ref().map(|v| v.cidrs.clone()).unwrap_or_default(),
                    },
                    addresses: std::iter::once(eni.primary_ip.clone())
                        .chain(eni.addresses.iter().cloned())
                        .collect(),
                    prefixes: eni.prefixes.clone(),
                    security_groups: eni.security_groups.clone(),
                    tags: eni
                        .tags
                        .iter()
                        .map(|t| (t.key.clone(), t.value.clone()))
                        .collect(),
                };
                (eni.id.clone(), interface)
            })
            .collect()
    }

    /// status.azure.interfaces: each interface with its addresses, subnet
    /// CIDR and gateway (the subnet's first address, as Azure has it).
    fn azure_interfaces_of(&self, instance: &Instance) -> Vec<AzureInterface> {
        instance
            .interfaces
            .iter()
            .map(|nic| {
                let cidr = self.cache.subnet_cidr(&nic.subnet_id);
                let gateway_ip = cidr
                    .parse::<ipnet::Ipv4Net>()
                    .ok()
                    .map(|net| std::net::Ipv4Addr::from(u32::from(net.network()) + 1).to_string())
                    .unwrap_or_default();
                let address = |ip: &String| AzureAddress {
                    ip: ip.clone(),
                    subnet: nic.subnet_id.clone(),
                    state: "succeeded".into(),
                };
                AzureInterface {
                    id: nic.id.clone(),
                    name: nic.id.rsplit('/').next().unwrap_or_default().to_string(),
                    mac: nic.mac.clone(),
                    state: "succeeded".into(),
                    addresses: std::iter::once(&nic.primary_ip)
                        .chain(&nic.addresses)
                        .map(address)
                        .collect(),
                    security_group: nic.security_groups.first().cloned().unwrap_or_default(),
                    gateway_ip,
                    cidr,
                }
            })
            .collect()
    }

    fn observe_step(&self, result: &Result<Step, CloudError>, took: Duration) {
        let (kind, status, subnet) = match result {
            Ok(Step::Assigned { subnet, .. }) => ("ip", "success", subnet.clone()),
            Ok(Step::Created { subnet, .. }) => ("interface", "success", subnet.clone()),
            Ok(Step::Satisfied | Step::Blocked(_)) => return,
            Err(_) => ("ip", "failed", String::new()),
        };
        if status == "success" {
            let ops = if kind == "ip" {
                &self.metrics.allocation_ops
            } else {
                &self.metrics.interface_creation_ops
            };
            ops.get_or_create(&SubnetLabel {
                subnet_id: subnet.clone(),
            })
            .inc();
        }
        self.metrics
            .allocation_duration_seconds
            .get_or_create(&DurationLabel {
                r#type: kind,
                status,
                subnet_id: subnet,
            })
            .observe(took.as_secs_f64());
    }

    /// Update the node's gauges and the totals (by difference, so a pass
    /// costs the same at 10 nodes as at 5,000).
    fn record_figures(&self, name: &str, now: NodeFigures) {
        let before = self
            .figures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), now);
        self.apply_figures(name, before, Some(now));
    }

    fn apply_figures(&self, name: &str, before: Option<NodeFigures>, now: Option<NodeFigures>) {
        let m = &self.metrics;
        let b = before.unwrap_or_default();
        let n = now.unwrap_or_default();
        let label = NodeLabel {
            target_node: name.to_string(),
        };
        if now.is_some() {
            m.available_ips.get_or_create(&label).set(n.available);
            m.used_ips.get_or_create(&label).set(n.used);
            m.needed_ips.get_or_create(&label).set(n.needed);
        } else {
            m.available_ips.remove(&label);
            m.used_ips.remove(&label);
            m.needed_ips.remove(&label);
        }
        let ips = |t: &'static str, delta: i64| {
            if delta != 0 {
                m.ips
                    .get_or_create(&crate::metrics::TypeLabel { r#type: t })
                    .inc_by(delta);
            }
        };
        ips("available", n.available - b.available);
        ips("used", n.used - b.used);
        ips("needed", n.needed - b.needed);
        let nodes = |c: &'static str, was: bool, is: bool| {
            if was != is {
                m.nodes
                    .get_or_create(&crate::metrics::CategoryLabel { category: c })
                    .inc_by(if is { 1 } else { -1 });
            }
        };
        nodes("total", before.is_some(), now.is_some());
        nodes("in-deficit", b.needed > 0, n.needed > 0);
        nodes("at-capacity", b.at_capacity, n.at_capacity);
    }

    /// A node left the cluster: forget what the engine kept for it.
    pub fn forget(&self, name: &str) {
        self.release_memory.forget(name);
        let before = self
            .figures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        if before.is_some() {
            self.apply_figures(name, before, None);
        }
    }

    /// Free addresses per subnet, from the cache.
    pub fn record_subnets(&self) {
        for subnet in self.cache.subnets() {
            self.metrics
                .available_ips_per_subnet
                .get_or_create(&crate::metrics::SubnetZoneLabel {
                    subnet_id: subnet.id.clone(),
                    availability_zone: subnet.availability_zone.clone(),
                })
                .set(i64::from(subnet.available_addresses));
        }
    }
}
