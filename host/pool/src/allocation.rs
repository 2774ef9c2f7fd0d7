//! What one allocation step for a node should do, decided from the node and
//! its cached instance: nothing (satisfied), nothing possible (blocked, with
//! the reason), assign on the interface chosen by
//! [`select::interface_to_fill`], or create an interface at the next free
//! index in the chosen subnet. With /28 prefixes the plan carries the /32
//! request to fall back to when the subnet has no free /28. The engine
//! executes plans; nothing here calls a cloud or reads a clock.

use std::collections::BTreeSet;

use ipam_ciliumnode::CiliumNode;
use ipam_cloud::{
    Capabilities, CreateInterfaceRequest, Instance, InstanceLimits, IpRequest, SecurityGroup,
    Subnet,
};

use crate::ipam_mode::IpamMode;
use crate::node_view::NodeView;
use crate::pool::{count, pool_of};
use crate::room;
use crate::select::{self, SubnetQuery};
use crate::tags::ownership_tags;
use crate::watermarks;

/// Addresses the node still needs: its watermarks over the pool its instance
/// gives it, with pods pending on it counted as used (the surge is part of
/// the need, so a burst is one allocation and max-allocate still caps it).
pub fn needed(
    node: &CiliumNode,
    instance: &Instance,
    withheld: &BTreeSet<String>,
    pending_pods: u32,
) -> u32 {
    let available = count(pool_of(node, instance, withheld).len());
    let demand = count(node.status.ipam.used.len()).saturating_add(pending_pods);
    watermarks::needed(node.watermarks(), available, demand)
}

/// Everything a plan is decided from.
#[derive(Debug, Clone, Copy)]
pub struct AllocationInput<'a> {
    pub node: &'a CiliumNode,
    pub instance: &'a Instance,
    pub limits: InstanceLimits,
    /// Subnets and security groups as last listed.
    pub subnets: &'a [Subnet],
    pub security_groups: &'a [SecurityGroup],
    /// From [`needed`].
    pub needed: u32,
    pub capabilities: Capabilities,
    /// The operator's setting: use /28 prefixes where the instance type and
    /// the provider allow.
    pub prefix_delegation: bool,
    pub cluster_name: &'a str,
    /// Unix seconds, for the created-at tag of a new interface.
    pub now_unix: u64,
    /// The operator's IPAM mode: in Azure mode a node's
    /// `spec.azure.interface-name` limits allocation to that interface.
    pub mode: IpamMode,
}

// A plan is made and executed one at a time, never stored in bulk: boxing the
// create request would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocationPlan {
    /// The node has what it needs.
    Satisfied,
    /// Needs addresses but nothing can give them now; the reason is for people.
    Blocked(String),
    Assign {
        interface: String,
        subnet: String,
        request: IpRequest,
        /// Asked instead when the subnet has no free /28 for `request`.
        fallback: Option<IpRequest>,
        why: &'static str,
    },
    Create {
        request: CreateInterfaceRequest,
        /// Asked instead when the subnet has no free /28 for `request`.
        fallback: Option<CreateInterfaceRequest>,
        why: &'static str,
    },
}

/// How many addresses or /28s to ask for, within the interface's free slots.
pub fn ip_request(use_prefixes: bool, wanted: u32, free_slots: u32) -> IpRequest {
    if use_prefixes {
        IpRequest::Prefixes(wanted.div_ceil(16).clamp(1, free_slots.max(1)))
    } else {
        IpRequest::Addresses(wanted.clamp(1, free_slots.max(1)))
    }
}

/// The next step for the node.
pub fn plan(input: &AllocationInput<'_>) -> AllocationPlan {
    let AllocationInput {
        node,
        instance,
        limits,
        subnets,
        ..
    } = *input;
    if input.needed == 0 {
        return AllocationPlan::Satisfied;
    }
    let wanted = watermarks::allocation_size(input.needed, node.watermarks().max_above_watermark);
    let use_prefixes =
        room::uses_prefixes(node, limits, input.capabilities, input.prefix_delegation);

    let exclude = node.exclude_interface_tags();
    let only_named = match input.mode {
        IpamMode::Azure => Some(node.spec.azure.interface_name.as_str()).filter(|n| !n.is_empty()),
        IpamMode::Eni => None,
    };
    if let Some(choice) = select::interface_to_fill(
        &instance.interfaces,
        limits,
        subnets,
        node.first_interface_index(),
        &exclude,
        only_named,
    ) {
        // Never ask the subnet for more than it has (as last seen).
        let subnet_free = subnets
            .iter()
            .find(|s| s.id == choice.interface.subnet_id)
            .map_or(u32::MAX, |s| s.available_addresses);
        let wanted = wanted.min(subnet_free);
        return AllocationPlan::Assign {
            interface: choice.interface.id.clone(),
            subnet: choice.interface.subnet_id.clone(),
            request: ip_request(use_prefixes, wanted, choice.free_slots),
            fallback: use_prefixes.then(|| ip_request(false, wanted, choice.free_slots)),
            why: choice.why,
        };
    }

    if let Some(name) = only_named {
        // Cilium's Azure mode never goes past the named interface.
        return AllocationPlan::Blocked(format!(
            "interface {name} (spec.azure.interface-name) is full, out of subnet addresses or not on instance {}",
            instance.id
        ));
    }
    if !input.capabilities.create_interface {
        return AllocationPlan::Blocked(
            "every interface is full and the provider cannot create interfaces".into(),
        );
    }
    let Some(index) = select::next_free_index(
        &instance.interfaces,
        node.first_interface_index().max(1),
        limits.max_interfaces,
    ) else {
        return AllocationPlan::Blocked(format!(
            "instance {} has no room for another interface",
            instance.id
        ));
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
    let Some(subnet) = select::subnet_for_interface(subnets, &query) else {
        return AllocationPlan::Blocked(
            "no subnet in the node's VPC and zone has free addresses".into(),
        );
    };
    let security_groups = select::security_groups_for_interface(
        input.security_groups,
        &instance.vpc_id,
        &node.spec.eni.security_groups,
        &node.security_group_tags(),
        primary,
    );
    let slots = limits.ipv4_per_interface.saturating_sub(1);
    let (IpRequest::Addresses(ipv4_count) | IpRequest::Prefixes(ipv4_count)) =
        ip_request(use_prefixes, wanted, slots);
    let request = CreateInterfaceRequest {
        instance_id: instance.id.clone(),
        index,
        subnet_id: subnet.subnet.id.clone(),
        security_groups,
        description: format!("ipam-operator: {} on {}", input.cluster_name, node.name),
        tags: ownership_tags(input.cluster_name, &node.name, input.now_unix),
        delete_on_termination: node.spec.eni.delete_on_termination.unwrap_or(true),
        ipv4_count,
        use_prefixes,
    };
    let fallback = use_prefixes.then(|| CreateInterfaceRequest {
        use_prefixes: false,
        ipv4_count: wanted.min(slots),
        ..request.clone()
    });
    AllocationPlan::Create {
        request,
        fallback,
        why: subnet.why,
    }
}

#[cfg(test)]
mod tests;
