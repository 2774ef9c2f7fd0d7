//! Writing a node's pool, its interfaces status (where the operator's IPAM
//! mode puts it) and the operator's status from the cache: only what
//! changed, as one [`NodeUpdate`]. Every write of a node is timed as
//! Cilium's `k8s_sync` trigger: a request the moment the change is ready,
//! its latency until the write starts, and the write's duration.

use ipam_ciliumnode::{CiliumNode, NodeUpdate};
use ipam_pool::interfaces_status::{azure_interfaces, eni_interfaces};
use ipam_pool::pool::pool_of;
use ipam_pool::IpamMode;
use tokio::time::Instant;

use crate::instance_cache::InstanceCache;
use crate::node_store::StoreError;
use crate::parts::Parts;

/// What changed of the node's pool, interfaces (status.eni.enis in ENI
/// mode, status.azure.interfaces in Azure mode) and operator status
/// (`operator_error`, when given), as one update; None when nothing did.
pub fn changes(
    cache: &InstanceCache,
    mode: IpamMode,
    node: &CiliumNode,
    operator_error: Option<String>,
) -> Option<NodeUpdate> {
    let mut update = NodeUpdate::default();
    if let Some(instance) = cache.instance(&node.spec.instance_id) {
        let pool = pool_of(node, &instance, &cache.withheld());
        if pool != node.spec.ipam.pool {
            update.pool = Some(pool);
        }
        let subnet_cidr = |id: &str| cache.subnet_cidr(id);
        match mode {
            IpamMode::Azure => {
                let interfaces = azure_interfaces(&instance, subnet_cidr);
                if interfaces != node.status.azure.interfaces {
                    update.azure_interfaces = Some(interfaces);
                }
            }
            IpamMode::Eni => {
                let vpc = cache.vpc(&instance.vpc_id);
                let enis = eni_interfaces(
                    &instance,
                    vpc.as_ref(),
                    node.spec.eni.use_primary_address,
                    subnet_cidr,
                );
                if enis != node.status.eni.enis {
                    update.enis = Some(enis);
                }
            }
        }
    }
    if let Some(error) = operator_error {
        if error != node.status.ipam.operator_status.error {
            update.operator_error = Some(error);
        }
    }
    (update != NodeUpdate::default()).then_some(update)
}

/// Write `update` to node `name`, the change having been ready since
/// `ready_at`; the node as it is afterwards.
pub async fn write(
    parts: &Parts,
    name: &str,
    update: &NodeUpdate,
    ready_at: Instant,
) -> Result<CiliumNode, StoreError> {
    let sync = &parts.metrics.k8s_sync;
    sync.queued.inc();
    let started = Instant::now();
    let written = parts.store.update(name, update).await;
    // A write answers the one change it was asked for.
    sync.ran(
        started.elapsed(),
        started.saturating_duration_since(ready_at),
        1,
    );
    written
}

/// [`changes`] written, if any; the node as it is afterwards, if anything
/// was written.
pub async fn publish(
    parts: &Parts,
    node: &CiliumNode,
    operator_error: Option<String>,
    ready_at: Instant,
) -> Result<Option<CiliumNode>, StoreError> {
    match changes(&parts.cache, parts.settings.ipam_mode, node, operator_error) {
        Some(update) => Ok(Some(write(parts, &node.name, &update, ready_at).await?)),
        None => Ok(None),
    }
}
