//! The allocation half of per-node pool maintenance: one step at a time,
//! assign on the interface chosen by [`select::interface_to_fill`], else
//! create an interface at the next free index in the chosen subnet; /28
//! prefixes fall back to /32 addresses when the subnet has no free /28.
//! Every cloud result goes into the [`InstanceCache`]; nothing is resynced.

use std::collections::{BTreeMap, BTreeSet};

use super::cache::InstanceCache;
use super::maintain::EngineSettings;
use super::node::{AllocationIp, CiliumNode};
use super::select::{self, SubnetQuery};
use super::watermarks;
use crate::clock::unix_now;
use crate::cloud::{
    CloudApi, CloudError, CreateInterfaceRequest, Instance, IpRequest, ProviderError, Tag,
};

/// Tag keys on every interface the operator creates.
pub const CLUSTER_TAG: &str = "ipam-operator/cluster";
pub const NODE_TAG: &str = "ipam-operator/node";
/// Unix seconds; leaked-interface GC reads it for the interface's age.
pub const CREATED_AT_TAG: &str = "ipam-operator/created-at";

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

/// spec.ipam.pool for a node: every pool address of its usable interfaces
/// ([`select::pool_addresses`]), each with its interface, less the addresses
/// in their reuse cooldown (`withheld`).
pub fn pool_of(
    node: &CiliumNode,
    instance: &Instance,
    withheld: &BTreeSet<String>,
) -> BTreeMap<String, AllocationIp> {
    let exclude = node.exclude_interface_tags();
    let mut pool = BTreeMap::new();
    for eni in instance
        .interfaces
        .iter()
        .filter(|i| select::usable(i, node.first_interface_index(), &exclude))
    {
        for address in select::pool_addresses(eni, node.spec.eni.use_primary_address) {
            if !withheld.contains(&address) {
                let entry = AllocationIp {
                    owner: None,
                    resource: Some(eni.id.clone()),
                };
                pool.insert(address, entry);
            }
        }
    }
    pool
}

fn is(error: &CloudError, want: fn(&ProviderError) -> bool) -> bool {
    error.provider_error().is_some_and(want)
}

/// One allocation step for `node`.
pub async fn allocate_step(
    cloud: &dyn CloudApi,
    cache: &InstanceCache,
    settings: &EngineSettings,
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
    let available =
        u32::try_from(pool_of(node, &instance, &cache.withheld()).len()).unwrap_or(u32::MAX);
    let used = u32::try_from(node.status.ipam.used.len()).unwrap_or(u32::MAX);
    // Pending pods are about to be used: the surge is part of the need.
    let demand = used.saturating_add(pending_pods);
    let needed = watermarks::needed(node.watermarks(), available, demand);
    if needed == 0 {
        return Ok(Step::Satisfied);
    }
    let wanted = watermarks::allocation_size(needed, node.watermarks().max_above_watermark);
    let use_prefixes = settings.prefix_delegation
        && limits.prefix_delegation
        && cloud.info().capabilities.prefixes
        && !node.spec.eni.disable_prefix_delegation;

    let subnets = cache.subnets();
    let exclude = node.exclude_interface_tags();
    if let Some(choice) = select::interface_to_fill(
        &instance.interfaces,
        limits,
        &subnets,
        node.first_interface_index(),
        &exclude,
    ) {
        let id = choice.interface.id.clone();
        // Never ask the subnet for more than it has (as last seen).
        let subnet_free = subnets
            .iter()
            .find(|s| s.id == choice.interface.subnet_id)
            .map_or(u32::MAX, |s| s.available_addresses);
        let wanted = wanted.min(subnet_free);
        let request = ip_request(use_prefixes, wanted, choice.free_slots);
        let assigned = match cloud.assign_ips(&id, request).await {
            Err(e)
                if use_prefixes
                    && is(&e, |p| matches!(p, ProviderError::InsufficientPrefixes(_))) =>
            {
                tracing::info!(node = %node.name, interface = %id, "no free /28 in the subnet: assigning /32 addresses");
                cloud
                    .assign_ips(&id, ip_request(false, wanted, choice.free_slots))
                    .await?
            }
            result => result?,
        };
        let (addresses, prefixes) = cache.assigned(instance_id, &id, &assigned);
        tracing::info!(node = %node.name, interface = %id, addresses, prefixes,
            why = choice.why, "assigned");
        return Ok(Step::Assigned {
            interface: id,
            subnet: choice.interface.subnet_id.clone(),
            addresses,
            prefixes,
        });
    }

    if !cloud.info().capabilities.create_interface {
        return Ok(Step::Blocked(
            "every interface is full and the provider cannot create interfaces".into(),
        ));
    }
    let Some(index) = select::next_free_index(
        &instance.interfaces,
        node.first_interface_index().max(1),
        limits.max_interfaces,
    ) else {
        return Ok(Step::Blocked(format!(
            "instance {instance_id} has no room for another interface"
        )));
    };
    let primary = instance.interfaces.iter().find(|i| i.index == 0);
    let subnet_tags = node.subnet_tags();
    let capacity =
        select::interface_capacity(limits, use_prefixes, node.spec.eni.use_primary_address);
    let query = SubnetQuery {
        vpc_id: &instance.vpc_id,
        availability_zone: &instance.availability_zone,
        subnet_ids: &node.spec.eni.subnet_ids,
        subnet_tags: &subnet_tags,
        node_subnet: primary.map(|p| p.subnet_id.as_str()),
        interface_capacity: capacity,
    };
    let Some(subnet) = select::subnet_for_interface(&subnets, &query) else {
        return Ok(Step::Blocked(
            "no subnet in the node's VPC and zone has free addresses".into(),
        ));
    };
    let groups = cache.security_groups();
    let security_groups = select::security_groups_for_interface(
        &groups,
        &instance.vpc_id,
        &node.spec.eni.security_groups,
        &node.security_group_tags(),
        primary,
    );
    let mut request = CreateInterfaceRequest {
        instance_id: instance_id.clone(),
        index,
        subnet_id: subnet.subnet.id.clone(),
        security_groups,
        description: format!("ipam-operator: {} on {}", settings.cluster_name, node.name),
        tags: vec![
            Tag {
                key: CLUSTER_TAG.into(),
                value: settings.cluster_name.clone(),
            },
            Tag {
                key: NODE_TAG.into(),
                value: node.name.clone(),
            },
            Tag {
                key: CREATED_AT_TAG.into(),
                value: unix_now().to_string(),
            },
        ],
        delete_on_termination: node.spec.eni.delete_on_termination.unwrap_or(true),
        ipv4_count: 0,
        use_prefixes,
    };
    let slots = limits.ipv4_per_interface.saturating_sub(1);
    let (IpRequest::Addresses(count) | IpRequest::Prefixes(count)) =
        ip_request(use_prefixes, wanted, slots);
    request.ipv4_count = count;
    let created = match cloud.create_interface(&request).await {
        Err(e)
            if use_prefixes && is(&e, |p| matches!(p, ProviderError::InsufficientPrefixes(_))) =>
        {
            tracing::info!(node = %node.name, subnet = %request.subnet_id, "no free /28 in the subnet: creating with /32 addresses");
            request.use_prefixes = false;
            request.ipv4_count = wanted.min(slots);
            cloud.create_interface(&request).await?
        }
        result => result?,
    };
    tracing::info!(node = %node.name, interface = %created.id, index, subnet = %request.subnet_id, why = subnet.why, "created interface");
    let step = Step::Created {
        interface: created.id.clone(),
        index,
        subnet: request.subnet_id.clone(),
    };
    cache.created(instance_id, created);
    Ok(step)
}

/// How many addresses or /28s to ask for, within the interface's free slots.
fn ip_request(use_prefixes: bool, wanted: u32, free_slots: u32) -> IpRequest {
    if use_prefixes {
        IpRequest::Prefixes(wanted.div_ceil(16).clamp(1, free_slots.max(1)))
    } else {
        IpRequest::Addresses(wanted.clamp(1, free_slots.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_expand_to_all_sixteen_addresses() {
        let addresses = select::prefix_addresses("10.0.1.16/28");
        assert_eq!(addresses.len(), 16);
        assert_eq!(addresses.first().map(String::as_str), Some("10.0.1.16"));
        assert_eq!(addresses.last().map(String::as_str), Some("10.0.1.31"));
        assert!(select::prefix_addresses("not a prefix").is_empty());
    }

    #[test]
    fn requests_stay_within_free_slots() {
        assert_eq!(ip_request(false, 8, 3), IpRequest::Addresses(3));
        assert_eq!(ip_request(false, 2, 9), IpRequest::Addresses(2));
        assert_eq!(ip_request(true, 8, 9), IpRequest::Prefixes(1));
        assert_eq!(ip_request(true, 40, 2), IpRequest::Prefixes(2));
    }
}
