//! What a node's instance has room for, as Cilium's operator reports it
//! per node (`pkg/ipam/node.go` statistics): interfaces that can take more
//! addresses (candidates), interfaces that could still be attached (empty
//! slots), and the most pod addresses the instance can hold (capacity).

use ipam_ciliumnode::CiliumNode;
use ipam_cloud::{Capabilities, Instance, InstanceLimits};

use crate::ipam_mode::IpamMode;
use crate::node_view::NodeView;
use crate::select;

/// A node's room, from its cached instance and its type's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Room {
    /// Attached interfaces that may hold pod addresses and have free slots.
    pub interface_candidates: u32,
    /// Device indexes (from the first one pods may use, never 0) an
    /// interface could still be created at; none when the provider cannot
    /// create interfaces or the node keeps to one named interface.
    pub empty_interface_slots: u32,
    /// Pod addresses the usable interfaces and the empty slots would hold
    /// when full: the per-interface capacity (with /28 prefixes when they
    /// would be used) times their number.
    pub capacity: u32,
}

/// Whether the node's addresses come as /28 prefixes: the operator's
/// setting, the instance type, the provider and the node all allow it.
pub fn uses_prefixes(
    node: &CiliumNode,
    limits: InstanceLimits,
    capabilities: Capabilities,
    prefix_delegation: bool,
) -> bool {
    prefix_delegation
        && limits.prefix_delegation
        && capabilities.prefixes
        && !node.spec.eni.disable_prefix_delegation
}

/// The node's room on `instance`.
pub fn room(
    node: &CiliumNode,
    instance: &Instance,
    limits: InstanceLimits,
    capabilities: Capabilities,
    prefix_delegation: bool,
    mode: IpamMode,
) -> Room {
    let first = node.first_interface_index();
    let exclude = node.exclude_interface_tags();
    let named_only = mode == IpamMode::Azure && !node.spec.azure.interface_name.is_empty();
    let usable: Vec<_> = instance
        .interfaces
        .iter()
        .filter(|i| select::usable(i, first, &exclude))
        .filter(|i| !named_only || select::interface_name(i) == node.spec.azure.interface_name)
        .collect();
    let interface_candidates = usable
        .iter()
        .filter(|i| select::free_slots(i, limits) > 0)
        .count();
    let empty_interface_slots = match capabilities.create_interface && !named_only {
        true => (first.max(1)..limits.max_interfaces)
            .filter(|n| !instance.interfaces.iter().any(|i| i.index == *n))
            .count(),
        false => 0,
    };
    let per_interface = select::interface_capacity(
        limits,
        uses_prefixes(node, limits, capabilities, prefix_delegation),
        node.spec.eni.use_primary_address,
    );
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    Room {
        interface_candidates: count(interface_candidates),
        empty_interface_slots: count(empty_interface_slots),
        capacity: per_interface
            .saturating_mul(count(usable.len()).saturating_add(count(empty_interface_slots))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_cloud::{NetworkInterface, Tag};

    const LIMITS: InstanceLimits = InstanceLimits {
        max_interfaces: 4,
        ipv4_per_interface: 4,
        ipv6_per_interface: 4,
        prefix_delegation: true,
    };

    const ALL: Capabilities = Capabilities {
        create_interface: true,
        release: true,
        prefixes: true,
        delete_interface: true,
    };

    fn interface(index: u32, secondary: usize) -> NetworkInterface {
        NetworkInterface {
            id: format!("eni-{index}"),
            mac: String::new(),
            index,
            subnet_id: "subnet-1".into(),
            vpc_id: "vpc".into(),
            primary_ip: format!("10.0.{index}.4").parse().unwrap(),
            addresses: (0..secondary)
                .map(|n| format!("10.0.{index}.{}", n + 10).parse().unwrap())
                .collect(),
            prefixes: Vec::new(),
            security_groups: Vec::new(),
            tags: Vec::new(),
            instance_id: Some("i-1".into()),
        }
    }

    fn instance(interfaces: Vec<NetworkInterface>) -> Instance {
        Instance {
            id: "i-1".into(),
            instance_type: "t".into(),
            availability_zone: "z".into(),
            vpc_id: "vpc".into(),
            interfaces,
        }
    }

    #[test]
    fn candidates_have_free_slots_and_empty_slots_are_free_indexes() {
        let node = CiliumNode::default();
        // 0 is full (primary + 3), 2 has one free slot; 1 and 3 are free.
        let i = instance(vec![interface(0, 3), interface(2, 2)]);
        let room = room(&node, &i, LIMITS, ALL, false, IpamMode::Eni);
        assert_eq!(
            room,
            Room {
                interface_candidates: 1,
                empty_interface_slots: 2,
                capacity: 3 * 4,
            }
        );
        let with_prefixes = super::room(&node, &i, LIMITS, ALL, true, IpamMode::Eni);
        assert_eq!(with_prefixes.capacity, 3 * 16 * 4, "three /28 a slot");
    }

    #[test]
    fn excluded_interfaces_and_indexes_below_the_first_hold_no_pods() {
        let mut node = CiliumNode::default();
        node.spec.eni.first_interface_index = Some(1);
        node.spec.eni.exclude_interface_tags = [("keep".to_string(), "off".to_string())].into();
        let mut theirs = interface(1, 0);
        theirs.tags = vec![Tag {
            key: "keep".into(),
            value: "off".into(),
        }];
        let i = instance(vec![interface(0, 0), theirs, interface(2, 0)]);
        let room = room(&node, &i, LIMITS, ALL, false, IpamMode::Eni);
        assert_eq!(room.interface_candidates, 1, "only eni-2");
        assert_eq!(room.empty_interface_slots, 1, "index 3");
        assert_eq!(room.capacity, 2 * 3);
    }

    #[test]
    fn no_empty_slot_without_creation_or_beside_a_named_azure_interface() {
        let node = CiliumNode::default();
        let i = instance(vec![interface(0, 0)]);
        let no_create = Capabilities {
            create_interface: false,
            ..ALL
        };
        assert_eq!(
            room(&node, &i, LIMITS, no_create, false, IpamMode::Eni).empty_interface_slots,
            0
        );
        let mut named = CiliumNode::default();
        named.spec.azure.interface_name = "eni-9".into();
        let room = room(&named, &i, LIMITS, ALL, false, IpamMode::Azure);
        assert_eq!(room, Room::default(), "eni-0 is not the named one");
    }
}
