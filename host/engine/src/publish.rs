//! Writing a node's pool, its interfaces status (where the operator's IPAM
//! mode puts it) and the operator's status from the cache: only what
//! changed, as one [`NodeUpdate`].

use ipam_ciliumnode::{CiliumNode, NodeUpdate};
use ipam_pool::interfaces_status::{azure_interfaces, eni_interfaces};
use ipam_pool::pool::pool_of;
use ipam_pool::IpamMode;

use crate::instance_cache::InstanceCache;
use crate::node_store::{NodeStore, StoreError};

/// Write what changed of the node's pool, interfaces (status.eni.enis in
/// ENI mode, status.azure.interfaces in Azure mode) and operator status
/// (`operator_error`, when given); the node as it is afterwards, if anything
/// was written.
pub async fn publish(
    store: &dyn NodeStore,
    cache: &InstanceCache,
    mode: IpamMode,
    node: &CiliumNode,
    operator_error: Option<String>,
) -> Result<Option<CiliumNode>, StoreError> {
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
    if update == NodeUpdate::default() {
        return Ok(None);
    }
    Ok(Some(store.update(&node.name, &update).await?))
}
