//! The release half of per-node pool maintenance: excess addresses go
//! through the release-ips handshake ([`release::step`]) and only those the
//! agent declared ready leave the cloud. Single secondary addresses are
//! unassigned; an interface of ours whose every address is excess and unused
//! is chosen whole ([`select::interface_to_free`]) and deleted once the agent
//! has released all of it. Prefix addresses only ever go with their
//! interface.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use tokio::time::Instant;

use super::allocate::{pool_of, CLUSTER_TAG};
use super::maintain::{MaintainError, Maintainer};
use super::node::{AllocationIp, CiliumNode};
use super::release::{self, ReleaseInput, MARKED_FOR_RELEASE, RELEASED};
use super::select;
use super::store::Announcement;
use super::watermarks;
use crate::cloud::{Instance, NetworkInterface, Tag};
use crate::metrics::{DurationLabel, SubnetLabel};

/// What the operator remembers between rounds: when each node's candidates
/// were first seen as excess.
#[derive(Default)]
pub struct ReleaseMemory(Mutex<BTreeMap<String, BTreeMap<String, std::time::Instant>>>);

impl ReleaseMemory {
    fn get(&self, node: &str) -> BTreeMap<String, std::time::Instant> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(node)
            .cloned()
            .unwrap_or_default()
    }

    fn set(&self, node: &str, first_seen: BTreeMap<String, std::time::Instant>) {
        let mut memory = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if first_seen.is_empty() {
            memory.remove(node);
        } else {
            memory.insert(node.to_string(), first_seen);
        }
    }

    /// No candidate of this node is waiting out the delay.
    pub fn is_empty(&self, node: &str) -> bool {
        !self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(node)
    }

    pub fn forget(&self, node: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(node);
    }
}

/// What one round did to a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseRound {
    pub marked: Vec<String>,
    pub unmarked: Vec<String>,
    /// Addresses that left the cloud (unassigned, or with their interface).
    pub released: Vec<String>,
    /// Interfaces deleted because nothing on them was needed.
    pub freed_interfaces: Vec<String>,
}

/// This round's release candidates: a whole interface when one can be freed,
/// else unused secondaries from the emptiest interface. The interface to free,
/// if that is the choice.
fn candidates<'a>(
    node: &CiliumNode,
    instance: &'a Instance,
    pool: &BTreeMap<String, AllocationIp>,
    free_interfaces: bool,
    cluster_name: &str,
) -> (BTreeSet<String>, Option<&'a NetworkInterface>) {
    let used: BTreeSet<String> = node.status.ipam.used.keys().cloned().collect();
    let excess = watermarks::excess(
        node.watermarks(),
        u32::try_from(pool.len()).unwrap_or(u32::MAX),
        u32::try_from(used.len()).unwrap_or(u32::MAX),
    );
    let exclude = node.exclude_interface_tags();
    let first = node.first_interface_index();
    if free_interfaces {
        let owner = Tag {
            key: CLUSTER_TAG.into(),
            value: cluster_name.into(),
        };
        if let Some(choice) = select::interface_to_free(
            &instance.interfaces,
            &used,
            excess,
            first,
            &exclude,
            &owner,
            node.spec.eni.use_primary_address,
        ) {
            return (
                choice.addresses.into_iter().collect(),
                Some(choice.interface),
            );
        }
    }
    let addresses =
        select::addresses_to_release(&instance.interfaces, &used, excess, first, &exclude)
            .map(|choice| choice.addresses.into_iter().collect())
            .unwrap_or_default();
    (addresses, None)
}

impl Maintainer {
    /// One release round for a node at `now`.
    pub async fn release(&self, name: &str, now: Instant) -> Result<ReleaseRound, MaintainError> {
        let node = self.node(name).await?;
        Ok(self.release_node(node, now).await?.0)
    }

    /// [`Maintainer::release`] from the node as read; the round and the node
    /// as it is afterwards.
    pub(super) async fn release_node(
        &self,
        node: CiliumNode,
        now: Instant,
    ) -> Result<(ReleaseRound, CiliumNode), MaintainError> {
        let name = node.name.clone();
        let name = name.as_str();
        let Some(instance) = self.cache.instance(&node.spec.instance_id) else {
            return Ok((ReleaseRound::default(), node));
        };
        let capabilities = self.cloud.info().capabilities;
        let pool = pool_of(&node, &instance, &self.cache.withheld());
        let (candidates, whole) = if capabilities.release {
            candidates(
                &node,
                &instance,
                &pool,
                self.settings.free_interfaces && capabilities.delete_interface,
                &self.settings.cluster_name,
            )
        } else {
            (BTreeSet::new(), None)
        };
        let step = release::step(ReleaseInput {
            candidates: &candidates,
            status: &node.status.ipam.release_ips,
            first_seen: &self.release_memory.get(name),
            now: now.into_std(),
            delay: self.settings.release_delay,
        });
        self.release_memory.set(name, step.first_seen.clone());

        let mut round = ReleaseRound {
            marked: step.mark.clone(),
            unmarked: step.unmark.clone(),
            ..ReleaseRound::default()
        };
        let mut states: BTreeMap<String, Option<String>> = BTreeMap::new();
        for ip in &step.mark {
            states.insert(ip.clone(), Some(MARKED_FOR_RELEASE.to_string()));
        }
        for ip in &step.unmark {
            states.insert(ip.clone(), None);
        }

        let ready: BTreeSet<&String> = step.unassign.iter().collect();
        match whole {
            // Every address of the interface is released by the agent (or it
            // has none): the interface goes, and its addresses with it.
            Some(interface) if candidates.iter().all(|ip| ready.contains(ip)) => {
                self.free_interface(&node, interface, &mut round).await?;
            }
            _ => {
                self.unassign_ready(&node, &instance, &step.unassign, &mut round)
                    .await?
            }
        }
        for ip in &round.released {
            states.insert(ip.clone(), Some(RELEASED.to_string()));
        }
        let changed = !round.released.is_empty() || !round.freed_interfaces.is_empty();
        let mut node = node;
        if !states.is_empty() {
            let update = super::store::NodeUpdate {
                release_ips: states,
                ..Default::default()
            };
            node = self.store.update(name, &update).await?;
        }
        if changed {
            if let Some(updated) = self.publish(&node, None).await? {
                node = updated;
            }
        }
        Ok((round, node))
    }

    async fn free_interface(
        &self,
        node: &CiliumNode,
        interface: &NetworkInterface,
        round: &mut ReleaseRound,
    ) -> Result<(), MaintainError> {
        let started = Instant::now();
        let result = self.cloud.delete_interface(&interface.id).await;
        self.observe_release("interface", &interface.subnet_id, result.is_ok(), started);
        result?;
        self.cache.deleted(&node.spec.instance_id, &interface.id);
        self.metrics.interface_deletion_ops.inc();
        tracing::info!(node = %node.name, interface = %interface.id, index = interface.index,
            "freed an interface none of whose addresses were needed");
        round.released.extend(select::pool_addresses(
            interface,
            node.spec.eni.use_primary_address,
        ));
        round.freed_interfaces.push(interface.id.clone());
        let note = format!(
            "deleted {} (index {}): nothing on it was needed",
            interface.id, interface.index
        );
        self.store
            .announce(
                &node.name,
                Announcement {
                    warning: false,
                    reason: "InterfaceDeleted",
                    note,
                },
            )
            .await;
        Ok(())
    }

    /// Unassign the ready single addresses, one call per interface.
    async fn unassign_ready(
        &self,
        node: &CiliumNode,
        instance: &Instance,
        ready: &[String],
        round: &mut ReleaseRound,
    ) -> Result<(), MaintainError> {
        let mut by_interface: BTreeMap<&str, (&NetworkInterface, Vec<String>)> = BTreeMap::new();
        for ip in ready {
            if let Some(interface) = instance
                .interfaces
                .iter()
                .find(|i| i.addresses.contains(ip))
            {
                by_interface
                    .entry(&interface.id)
                    .or_insert_with(|| (interface, Vec::new()))
                    .1
                    .push(ip.clone());
            }
        }
        for (interface, addresses) in by_interface.into_values() {
            let started = Instant::now();
            let result = self
                .cloud
                .unassign_ips(&interface.id, &addresses, &[])
                .await;
            self.observe_release("ip", &interface.subnet_id, result.is_ok(), started);
            result?;
            self.cache
                .unassigned(&node.spec.instance_id, &interface.id, &addresses, &[]);
            self.metrics
                .release_ops
                .get_or_create(&SubnetLabel {
                    subnet_id: interface.subnet_id.clone(),
                })
                .inc_by(addresses.len() as u64);
            tracing::info!(node = %node.name, interface = %interface.id, count = addresses.len(),
                "released addresses the agent freed");
            let note = format!(
                "released {} addresses from {}",
                addresses.len(),
                interface.id
            );
            self.store
                .announce(
                    &node.name,
                    Announcement {
                        warning: false,
                        reason: "AddressesReleased",
                        note,
                    },
                )
                .await;
            round.released.extend(addresses);
        }
        Ok(())
    }

    fn observe_release(&self, kind: &'static str, subnet: &str, ok: bool, started: Instant) {
        self.metrics
            .release_duration_seconds
            .get_or_create(&DurationLabel {
                r#type: kind,
                status: if ok { "success" } else { "failed" },
                subnet_id: subnet.to_string(),
            })
            .observe(started.elapsed().as_secs_f64());
    }
}
