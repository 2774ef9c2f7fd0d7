//! The allocation half of per-node pool maintenance, executed one step at a
//! time: make sure the node's instance and its type's limits are cached, ask
//! the pure core for a plan ([`ipam_pool::allocation`]), call the cloud, fall
//! back from /28 prefixes to /32 addresses when the plan says so, and record
//! the result in the [`InstanceCache`]. Nothing is resynced.

use ipam_ciliumnode::CiliumNode;
use ipam_cloud::{CloudApi, CloudError, ProviderError};
use ipam_pool::allocation::{self, AllocationInput, AllocationPlan};

use crate::clock::unix_now;
use crate::instance_cache::InstanceCache;
use crate::maintenance_settings::MaintenanceSettings;

/// What one step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The node has what it needs.
    Satisfied,
    Assigned {
        interface: String,
        subnet: String,
        addresses: usize,
        prefixes: usize,
    },
    Created {
        interface: String,
        index: u32,
        subnet: String,
    },
    /// Needs addresses but nothing can give them now; the reason is for people.
    Blocked(String),
}

/// The subnet had no free /28 for a prefix request.
fn no_free_prefix(error: &CloudError) -> bool {
    matches!(
        error.provider_error(),
        Some(ProviderError::InsufficientPrefixes(_))
    )
}

/// The cloud refused a create because the instance is not as cached (a
/// device index taken by someone else): the cached instance is stale.
fn instance_changed_under_us(error: &CloudError) -> bool {
    matches!(error.provider_error(), Some(ProviderError::Conflict(_)))
}

/// One allocation step for `node`.
pub async fn allocate_step(
    cloud: &dyn CloudApi,
    cache: &InstanceCache,
    settings: &MaintenanceSettings,
    node: &CiliumNode,
    pending_pods: u32,
) -> Result<Step, CloudError> {
    let instance_id = &node.spec.instance_id;
    let instance = match cache.instance(instance_id) {
        Some(instance) => instance,
        None => match cache.resync_instance(cloud, instance_id).await? {
            Some(instance) => instance,
            None => {
                return Ok(Step::Blocked(format!(
                    "instance {instance_id} does not exist"
                )))
            }
        },
    };
    let limits = cache.limits(cloud, &instance.instance_type).await?;
    let needed = allocation::needed(node, &instance, &cache.withheld(), pending_pods);
    if needed == 0 {
        return Ok(Step::Satisfied);
    }
    let plan = allocation::plan(&AllocationInput {
        node,
        instance: &instance,
        limits,
        subnets: &cache.subnets(),
        security_groups: &cache.security_groups(),
        needed,
        capabilities: cloud.info().capabilities,
        prefix_delegation: settings.prefix_delegation,
        cluster_name: &settings.cluster_name,
        now_unix: unix_now(),
        mode: settings.ipam_mode,
    });
    match plan {
        AllocationPlan::Satisfied => Ok(Step::Satisfied),
        AllocationPlan::Blocked(reason) => Ok(Step::Blocked(reason)),
        AllocationPlan::Assign {
            interface,
            subnet,
            request,
            fallback,
            why,
        } => {
            let assigned = match (cloud.assign_ips(&interface, request).await, fallback) {
                (Err(e), Some(fallback)) if no_free_prefix(&e) => {
                    tracing::info!(node = %node.name, %interface, "no free /28 in the subnet: assigning /32 addresses");
                    cloud.assign_ips(&interface, fallback).await?
                }
                (result, _) => result?,
            };
            let (addresses, prefixes) = cache.assigned(instance_id, &interface, &assigned);
            tracing::info!(node = %node.name, %interface, addresses, prefixes, why, "assigned");
            Ok(Step::Assigned {
                interface,
                subnet,
                addresses,
                prefixes,
            })
        }
        AllocationPlan::Create {
            request,
            fallback,
            why,
        } => {
            let result = match (cloud.create_interface(&request).await, fallback) {
                (Err(e), Some(fallback)) if no_free_prefix(&e) => {
                    tracing::info!(node = %node.name, subnet = %request.subnet_id, "no free /28 in the subnet: creating with /32 addresses");
                    cloud.create_interface(&fallback).await
                }
                (result, _) => result,
            };
            let created = match result {
                Ok(created) => created,
                Err(error) => {
                    if instance_changed_under_us(&error) {
                        // Read the instance again now, so the next pass plans
                        // from the cloud and not from a stale cache (else it
                        // would wait for the next full resync).
                        tracing::info!(node = %node.name, %error, "the instance changed under the cache: refreshing it");
                        if let Err(refresh) = cache.resync_instance(cloud, instance_id).await {
                            tracing::warn!(node = %node.name, error = %refresh, "refreshing the instance failed");
                        }
                    }
                    return Err(error);
                }
            };
            tracing::info!(node = %node.name, interface = %created.id, index = request.index,
                subnet = %request.subnet_id, why, "created interface");
            let step = Step::Created {
                interface: created.id.clone(),
                index: request.index,
                subnet: request.subnet_id,
            };
            cache.created(instance_id, created);
            Ok(step)
        }
    }
}
