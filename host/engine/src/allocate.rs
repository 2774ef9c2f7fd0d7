//! The allocation half of per-node pool maintenance, executed one step at a
//! time: make sure the node's instance and its type's limits are cached, ask
//! the pure core for a plan ([`ipam_pool::allocation`]), call the cloud, fall
//! back from /28 prefixes to /32 addresses when the plan says so, and record
//! the result in the [`InstanceCache`]. Nothing is resynced. What the cloud
//! was asked to do is told back as an [`Attempt`], for Cilium's allocation
//! metrics.

use std::time::Duration;

use ipam_ciliumnode::CiliumNode;
use ipam_cloud::{Assigned, CloudApi, CloudError, NetworkInterface, ProviderError};
use ipam_pool::allocation::{self, AllocationInput, AllocationPlan};
use tokio::time::Instant;

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

/// The cloud mutation one step made (with its /32 fallback, if any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// An interface was created (else addresses assigned).
    pub create: bool,
    pub subnet: String,
    /// The cloud calls' time, fallback included.
    pub took: Duration,
    /// Addresses it gave the node (a /28 counts sixteen); 0 on failure.
    pub addresses: u64,
}

/// Addresses an answer gave: each /32, sixteen per /28.
fn addresses_of(addresses: usize, prefixes: usize) -> u64 {
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    count(addresses).saturating_add(count(prefixes).saturating_mul(16))
}

fn assigned_addresses(assigned: &Assigned) -> u64 {
    addresses_of(assigned.addresses.len(), assigned.prefixes.len())
}

fn interface_addresses(interface: &NetworkInterface) -> u64 {
    addresses_of(interface.addresses.len(), interface.prefixes.len())
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

/// One allocation step for `node`, telling in `attempt` the mutation it
/// made, if any (set even when the step fails).
pub(crate) async fn allocate_step(
    cloud: &dyn CloudApi,
    cache: &InstanceCache,
    settings: &MaintenanceSettings,
    node: &CiliumNode,
    pending_pods: u32,
    attempt: &mut Option<Attempt>,
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
            let started = Instant::now();
            let result = match (cloud.assign_ips(&interface, request).await, fallback) {
                (Err(e), Some(fallback)) if no_free_prefix(&e) => {
                    tracing::info!(node = %node.name, %interface, "no free /28 in the subnet: assigning /32 addresses");
                    cloud.assign_ips(&interface, fallback).await
                }
                (result, _) => result,
            };
            *attempt = Some(Attempt {
                create: false,
                subnet: subnet.clone(),
                took: started.elapsed(),
                addresses: result.as_ref().map_or(0, assigned_addresses),
            });
            let assigned = result?;
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
            let started = Instant::now();
            let result = match (cloud.create_interface(&request).await, fallback) {
                (Err(e), Some(fallback)) if no_free_prefix(&e) => {
                    tracing::info!(node = %node.name, subnet = %request.subnet_id, "no free /28 in the subnet: creating with /32 addresses");
                    cloud.create_interface(&fallback).await
                }
                (result, _) => result,
            };
            *attempt = Some(Attempt {
                create: true,
                subnet: request.subnet_id.clone(),
                took: started.elapsed(),
                addresses: result.as_ref().map_or(0, interface_addresses),
            });
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
