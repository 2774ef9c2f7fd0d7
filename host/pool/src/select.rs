//! Where a node's next addresses go: per-interface capacity, the interface
//! to fill, the device index of a new interface, its subnet and its security
//! groups. Every choice is deterministic and says why it was made.

use ipam_cloud::{InstanceLimits, NetworkInterface, SecurityGroup, Subnet, Tag};

use crate::tags::Ownership;

/// Addresses one interface can hold for pods: its slots less the primary
/// address (unless `use_primary_address`), sixteen per slot with /28 prefixes.
pub fn interface_capacity(
    limits: InstanceLimits,
    use_prefixes: bool,
    use_primary_address: bool,
) -> u32 {
    let per_slot = if use_prefixes { 16 } else { 1 };
    let secondary = limits
        .ipv4_per_interface
        .saturating_sub(1)
        .saturating_mul(per_slot);
    secondary.saturating_add(u32::from(use_primary_address))
}

/// Address slots an interface has left (the primary address takes one, a
/// prefix one).
pub fn free_slots(interface: &NetworkInterface, limits: InstanceLimits) -> u32 {
    let used = 1 + interface.addresses.len() + interface.prefixes.len();
    limits
        .ipv4_per_interface
        .saturating_sub(u32::try_from(used).unwrap_or(u32::MAX))
}

/// An interface's name: the last segment of its id (an ARM NIC's resource
/// name, which `spec.azure.interface-name` gives); an id without `/` (an
/// ENI's) is its own name.
pub fn interface_name(interface: &NetworkInterface) -> &str {
    interface.id.rsplit('/').next().unwrap_or(&interface.id)
}

fn has_all_tags(tags: &[Tag], wanted: &[Tag]) -> bool {
    wanted.iter().all(|w| tags.contains(w))
}

/// Which of a node's interfaces may hold pod addresses: at or above
/// first-interface-index and carrying none of the excluded tags.
pub fn usable(
    interface: &NetworkInterface,
    first_interface_index: u32,
    exclude_tags: &[Tag],
) -> bool {
    interface.index >= first_interface_index
        && !exclude_tags.iter().any(|t| interface.tags.contains(t))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceChoice<'a> {
    pub interface: &'a NetworkInterface,
    pub free_slots: u32,
    pub why: &'static str,
}

/// The interface to assign on: among usable interfaces with a free slot whose
/// subnet still has addresses, the fullest one (lowest index on a tie), so
/// that whole interfaces stay empty and can be freed; Cilium picks at random.
/// With `only_named` (Azure's `spec.azure.interface-name`), only the
/// interface of that name is considered, as Cilium's Azure mode does.
pub fn interface_to_fill<'a>(
    interfaces: &'a [NetworkInterface],
    limits: InstanceLimits,
    subnets: &[Subnet],
    first_interface_index: u32,
    exclude_tags: &[Tag],
    only_named: Option<&str>,
) -> Option<InterfaceChoice<'a>> {
    let subnet_has_room = |id: &str| {
        subnets
            .iter()
            .find(|s| s.id == id)
            .is_none_or(|s| s.available_addresses > 0)
    };
    interfaces
        .iter()
        .filter(|i| usable(i, first_interface_index, exclude_tags) && subnet_has_room(&i.subnet_id))
        .filter(|i| only_named.is_none_or(|name| interface_name(i) == name))
        .map(|i| (i, free_slots(i, limits)))
        .filter(|(_, free)| *free > 0)
        .min_by_key(|(i, free)| (*free, i.index))
        .map(|(interface, free_slots)| InterfaceChoice {
            interface,
            free_slots,
            why: "fullest usable interface with a free slot (keeps other interfaces empty)",
        })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseChoice<'a> {
    pub interface: &'a NetworkInterface,
    pub addresses: Vec<String>,
    pub why: &'static str,
}

/// Up to `excess` unused secondary addresses to release, all from one
/// interface: the usable one with the fewest used addresses (highest index on
/// a tie), so that it empties out and can be freed whole; the mirror of
/// [`interface_to_fill`]. Addresses go highest first.
pub fn addresses_to_release<'a>(
    interfaces: &'a [NetworkInterface],
    used: &std::collections::BTreeSet<String>,
    excess: u32,
    first_interface_index: u32,
    exclude_tags: &[Tag],
) -> Option<ReleaseChoice<'a>> {
    if excess == 0 {
        return None;
    }
    interfaces
        .iter()
        .filter(|i| usable(i, first_interface_index, exclude_tags))
        .filter_map(|i| {
            let mut unused: Vec<std::net::Ipv4Addr> = i
                .addresses
                .iter()
                .copied()
                .filter(|a| !used.contains(&a.to_string()))
                .collect();
            if unused.is_empty() {
                return None;
            }
            let in_use = i.addresses.len() - unused.len();
            unused.sort_by_key(|a| std::cmp::Reverse(*a));
            Some((i, in_use, unused))
        })
        .min_by_key(|(i, in_use, _)| (*in_use, std::cmp::Reverse(i.index)))
        .map(|(interface, _, unused)| ReleaseChoice {
            interface,
            addresses: unused
                .into_iter()
                .take(excess as usize)
                .map(|a| a.to_string())
                .collect(),
            why: "usable interface with the fewest used addresses (so it can empty out)",
        })
}

/// Every address of a delegated prefix (a /28 has no network or broadcast
/// address to leave out).
pub fn prefix_addresses(net: &ipnet::Ipv4Net) -> Vec<String> {
    (u32::from(net.network())..=u32::from(net.broadcast()))
        .map(|a| std::net::Ipv4Addr::from(a).to_string())
        .collect()
}

/// The addresses an interface gives a node's pool: its secondary addresses,
/// every address of its prefixes, and its primary address with
/// use-primary-address (never the primary interface's: the node uses it).
pub fn pool_addresses(interface: &NetworkInterface, use_primary_address: bool) -> Vec<String> {
    let primary =
        (use_primary_address && interface.index != 0).then(|| interface.primary_ip.to_string());
    primary
        .into_iter()
        .chain(interface.addresses.iter().map(ToString::to_string))
        .chain(interface.prefixes.iter().flat_map(prefix_addresses))
        .collect()
}

/// A whole interface to free: not the primary, usable, this operator's
/// (created by it or adopted, [`Ownership`]), no address of it in use, and all of its pool
/// addresses within `excess`. The largest such interface (highest index on a
/// tie), so one delete returns the most. Its addresses go through the release
/// handshake like any others before the interface is deleted.
pub fn interface_to_free<'a>(
    interfaces: &'a [NetworkInterface],
    used: &std::collections::BTreeSet<String>,
    excess: u32,
    first_interface_index: u32,
    exclude_tags: &[Tag],
    owner: &Ownership,
    use_primary_address: bool,
) -> Option<ReleaseChoice<'a>> {
    if excess == 0 {
        return None;
    }
    interfaces
        .iter()
        .filter(|i| {
            i.index != 0 && usable(i, first_interface_index, exclude_tags) && owner.owns(&i.tags)
        })
        .map(|i| (i, pool_addresses(i, use_primary_address)))
        .filter(|(_, addresses)| {
            addresses.len() <= excess as usize && !addresses.iter().any(|a| used.contains(a))
        })
        .max_by_key(|(i, addresses)| (addresses.len(), i.index))
        .map(|(interface, addresses)| ReleaseChoice {
            interface,
            addresses,
            why: "an interface of ours with no used address, all of it excess (freed whole)",
        })
}

/// The lowest free device index at or above `first_interface_index`, if the
/// instance has room for another interface.
pub fn next_free_index(
    interfaces: &[NetworkInterface],
    first_interface_index: u32,
    max_interfaces: u32,
) -> Option<u32> {
    if interfaces.len() >= max_interfaces as usize {
        return None;
    }
    (first_interface_index..max_interfaces).find(|n| !interfaces.iter().any(|i| i.index == *n))
}

/// What a node asks of the subnet for a new interface (CiliumNode spec.eni).
#[derive(Debug, Clone, Default)]
pub struct SubnetQuery<'a> {
    pub vpc_id: &'a str,
    pub availability_zone: &'a str,
    pub subnet_ids: &'a [String],
    pub subnet_tags: &'a [Tag],
    /// The subnet of the node's primary interface.
    pub node_subnet: Option<&'a str>,
    /// Addresses a new interface will want.
    pub interface_capacity: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetChoice<'a> {
    pub subnet: &'a Subnet,
    pub why: &'static str,
}

/// The subnet for a new interface: among subnets in the node's VPC and zone
/// with free addresses, those named in spec (most free), else those with the
/// spec's tags (most free), else the node's own subnet if it can take a full
/// interface, else the most free one. Ties go to the lowest id.
pub fn subnet_for_interface<'a>(
    subnets: &'a [Subnet],
    query: &SubnetQuery<'_>,
) -> Option<SubnetChoice<'a>> {
    let local: Vec<&Subnet> = subnets
        .iter()
        .filter(|s| {
            s.vpc_id == query.vpc_id
                && s.availability_zone == query.availability_zone
                && s.available_addresses > 0
        })
        .collect();
    let most_free = |candidates: Vec<&'a Subnet>| {
        candidates.into_iter().max_by(|a, b| {
            a.available_addresses
                .cmp(&b.available_addresses)
                .then(b.id.cmp(&a.id))
        })
    };
    if !query.subnet_ids.is_empty() {
        let named = local
            .iter()
            .copied()
            .filter(|s| query.subnet_ids.contains(&s.id))
            .collect();
        return most_free(named).map(|subnet| SubnetChoice {
            subnet,
            why: "most free of the subnets named in spec",
        });
    }
    if !query.subnet_tags.is_empty() {
        let tagged = local
            .iter()
            .copied()
            .filter(|s| has_all_tags(&s.tags, query.subnet_tags))
            .collect();
        return most_free(tagged).map(|subnet| SubnetChoice {
            subnet,
            why: "most free of the subnets with the spec's tags",
        });
    }
    let own = query
        .node_subnet
        .and_then(|id| local.iter().copied().find(|s| s.id == id));
    if let Some(subnet) = own.filter(|s| s.available_addresses >= query.interface_capacity) {
        return Some(SubnetChoice {
            subnet,
            why: "the node's own subnet can take a full interface",
        });
    }
    most_free(local).map(|subnet| SubnetChoice {
        subnet,
        why: "most free subnet in the node's VPC and zone",
    })
}

/// Security groups for a new interface: the spec's ids, else every group in
/// the VPC with the spec's tags, else those of the primary interface.
pub fn security_groups_for_interface(
    groups: &[SecurityGroup],
    vpc_id: &str,
    spec_ids: &[String],
    spec_tags: &[Tag],
    primary: Option<&NetworkInterface>,
) -> Vec<String> {
    if !spec_ids.is_empty() {
        return spec_ids.to_vec();
    }
    if !spec_tags.is_empty() {
        let mut ids: Vec<String> = groups
            .iter()
            .filter(|g| g.vpc_id == vpc_id && has_all_tags(&g.tags, spec_tags))
            .map(|g| g.id.clone())
            .collect();
        ids.sort();
        return ids;
    }
    primary
        .map(|p| p.security_groups.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn limits(ipv4: u32, max_interfaces: u32) -> InstanceLimits {
        InstanceLimits {
            max_interfaces,
            ipv4_per_interface: ipv4,
            ipv6_per_interface: 0,
            prefix_delegation: true,
        }
    }

    fn tag(key: &str, value: &str) -> Tag {
        Tag {
            key: key.into(),
            value: value.into(),
        }
    }

    fn eni(index: u32, addresses: usize, subnet: &str) -> NetworkInterface {
        NetworkInterface {
            id: format!("eni-{index}"),
            mac: String::new(),
            index,
            subnet_id: subnet.into(),
            vpc_id: "vpc".into(),
            primary_ip: format!("10.0.{index}.1").parse().unwrap(),
            addresses: (0..addresses)
                .map(|a| format!("10.0.{index}.{}", a + 2).parse().unwrap())
                .collect(),
            prefixes: Vec::new(),
            security_groups: vec![format!("sg-{index}")],
            tags: Vec::new(),
            instance_id: Some("i".into()),
        }
    }

    fn subnet(id: &str, zone: &str, free: u32, tags: &[Tag]) -> Subnet {
        Subnet {
            id: id.into(),
            cidr: "10.0.0.0/24".parse().unwrap(),
            availability_zone: zone.into(),
            vpc_id: "vpc".into(),
            available_addresses: free,
            tags: tags.to_vec(),
        }
    }

    fn owned(mut interface: NetworkInterface) -> NetworkInterface {
        interface.tags.push(crate::tags::cluster_tag("us"));
        interface
    }

    #[test]
    fn interface_to_free_takes_only_whole_unused_interfaces_of_ours() {
        let used = |ips: &[&str]| ips.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let owner = Ownership::own_only("us");
        let mut with_prefix = owned(eni(3, 0, "s"));
        with_prefix.prefixes.push("10.0.3.16/28".parse().unwrap());
        let interfaces = vec![
            owned(eni(0, 2, "s")),
            owned(eni(1, 3, "s")),
            eni(2, 1, "s"),
            with_prefix,
        ];
        let free = |used: &BTreeSet<String>, excess, use_primary| {
            interface_to_free(&interfaces, used, excess, 0, &[], &owner, use_primary)
                .map(|c| (c.interface.index, c.addresses.len()))
        };
        // Nothing is excess; the primary interface never goes.
        assert_eq!(free(&used(&[]), 0, false), None);
        // The /28 interface is the largest that fits; eni-2 is not ours.
        assert_eq!(free(&used(&[]), 16, false), Some((3, 16)));
        assert_eq!(free(&used(&[]), 15, false), Some((1, 3)));
        // One used address keeps an interface.
        assert_eq!(free(&used(&["10.0.3.20"]), 16, false), Some((1, 3)));
        assert_eq!(free(&used(&["10.0.3.20", "10.0.1.2"]), 16, false), None);
        // With use-primary-address the primary address counts too.
        assert_eq!(free(&used(&[]), 3, true), None);
        assert_eq!(free(&used(&[]), 4, true), Some((1, 4)));
        // An interface with nothing on it fits any excess.
        let empty = vec![owned(eni(1, 0, "s"))];
        let choice = interface_to_free(&empty, &used(&[]), 1, 0, &[], &owner, false);
        assert_eq!(choice.map(|c| c.addresses.len()), Some(0));
    }

    #[test]
    fn capacity_table() {
        let m5 = limits(10, 3);
        assert_eq!(
            interface_capacity(m5, false, false),
            9,
            "primary address is not for pods"
        );
        assert_eq!(
            interface_capacity(m5, false, true),
            10,
            "use-primary-address"
        );
        assert_eq!(interface_capacity(m5, true, false), 144, "nine /28s");
        assert_eq!(interface_capacity(m5, true, true), 145);
        assert_eq!(
            interface_capacity(limits(1, 1), false, false),
            0,
            "a one-slot interface holds no pods"
        );
        assert_eq!(interface_capacity(limits(0, 1), true, false), 0);
    }

    #[test]
    fn free_slots_count_primary_addresses_and_prefixes() {
        let mut e = eni(1, 3, "s");
        assert_eq!(free_slots(&e, limits(10, 3)), 6);
        e.prefixes = vec![
            "10.1.0.0/28".parse().unwrap(),
            "10.1.0.16/28".parse().unwrap(),
        ];
        assert_eq!(free_slots(&e, limits(10, 3)), 4);
        assert_eq!(
            free_slots(&eni(1, 12, "s"), limits(10, 3)),
            0,
            "over-full never underflows"
        );
    }

    #[test]
    fn fills_the_fullest_usable_interface_first() {
        let subnets = [subnet("s", "z", 100, &[]), subnet("full", "z", 0, &[])];
        let mut excluded = eni(3, 8, "s");
        excluded.tags = vec![tag("no-pods", "true")];
        let interfaces = [
            eni(0, 8, "s"),
            eni(1, 2, "s"),
            eni(2, 6, "s"),
            excluded,
            eni(4, 9, "s"),
            eni(5, 7, "full"),
        ];
        let choice = interface_to_fill(
            &interfaces,
            limits(10, 8),
            &subnets,
            1,
            &[tag("no-pods", "true")],
            None,
        )
        .unwrap();
        // index 0 is below first-interface-index, 3 is excluded, 4 is full,
        // 5's subnet is out of addresses: index 2 (3 free) beats 1 (7 free).
        assert_eq!((choice.interface.index, choice.free_slots), (2, 3));
        let tie = [eni(2, 4, "s"), eni(1, 4, "s")];
        assert_eq!(
            interface_to_fill(&tie, limits(10, 8), &subnets, 0, &[], None)
                .unwrap()
                .interface
                .index,
            1
        );
        assert!(
            interface_to_fill(&[eni(1, 9, "s")], limits(10, 8), &subnets, 0, &[], None).is_none()
        );
    }

    #[test]
    fn a_named_interface_is_the_only_one_filled() {
        let subnets = [subnet("s", "z", 100, &[])];
        let mut first = eni(0, 2, "s");
        first.id = "/subscriptions/s/resourceGroups/RG/providers/Microsoft.Network/networkInterfaces/nic-a".into();
        let mut second = eni(1, 6, "s");
        second.id = "/subscriptions/s/resourceGroups/RG/providers/Microsoft.Network/networkInterfaces/nic-b".into();
        let interfaces = [first, second];
        let fill = |named| {
            interface_to_fill(&interfaces, limits(10, 8), &subnets, 0, &[], named)
                .map(|c| interface_name(c.interface))
        };
        assert_eq!(fill(None), Some("nic-b"), "unnamed: the fullest");
        assert_eq!(fill(Some("nic-a")), Some("nic-a"), "named: that one only");
        assert_eq!(fill(Some("nic-c")), None, "a name no interface has");
        let full = [eni(1, 9, "s")];
        assert!(
            interface_to_fill(&full, limits(10, 8), &subnets, 0, &[], Some("eni-1")).is_none(),
            "the named interface is full"
        );
        assert_eq!(interface_name(&eni(3, 0, "s")), "eni-3");
    }

    #[test]
    fn releases_from_the_emptiest_interface() {
        let used: std::collections::BTreeSet<String> = ["10.0.1.2", "10.0.1.3", "10.0.2.2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        // eni-1: 2 of 4 used; eni-2: 1 of 3 used; eni-3: none of 2 used.
        let interfaces = [eni(1, 4, "s"), eni(2, 3, "s"), eni(3, 2, "s")];
        let choice = addresses_to_release(&interfaces, &used, 5, 1, &[]).unwrap();
        assert_eq!(
            choice.interface.index, 3,
            "no used address: it can be freed whole"
        );
        assert_eq!(
            choice.addresses,
            vec!["10.0.3.3", "10.0.3.2"],
            "capped by what it has, highest first"
        );
        let choice = addresses_to_release(&interfaces[..2], &used, 1, 1, &[]).unwrap();
        assert_eq!(
            (choice.interface.index, choice.addresses.clone()),
            (2, vec!["10.0.2.4".to_string()])
        );
        assert!(
            addresses_to_release(&interfaces, &used, 0, 1, &[]).is_none(),
            "no excess"
        );
        assert!(
            addresses_to_release(&interfaces, &used, 3, 4, &[]).is_none(),
            "nothing usable"
        );
        // Fewest *used*, not fewest addresses or most unused: eni-1 has
        // more addresses but one used, eni-2 fewer but two used.
        let used: std::collections::BTreeSet<String> = ["10.0.1.2", "10.0.2.2", "10.0.2.3"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let uneven = [eni(1, 6, "s"), eni(2, 3, "s")];
        let choice = addresses_to_release(&uneven, &used, 1, 1, &[]).unwrap();
        assert_eq!(choice.interface.index, 1);
        // Two used of four against three used of six: the count of used
        // addresses decides, not their share.
        let used: std::collections::BTreeSet<String> =
            ["10.0.1.2", "10.0.1.3", "10.0.2.2", "10.0.2.3", "10.0.2.4"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        let shares = [eni(1, 4, "s"), eni(2, 6, "s")];
        let choice = addresses_to_release(&shares, &used, 1, 1, &[]).unwrap();
        assert_eq!(choice.interface.index, 1);
        let tie = [eni(1, 2, "s"), eni(4, 2, "s")];
        let choice = addresses_to_release(&tie, &Default::default(), 1, 0, &[]).unwrap();
        assert_eq!(
            choice.interface.index, 4,
            "tie: the highest index, keeping low interfaces full"
        );
    }

    #[test]
    fn next_index_table() {
        let interfaces = [eni(0, 0, "s"), eni(2, 0, "s")];
        assert_eq!(next_free_index(&interfaces, 0, 4), Some(1));
        assert_eq!(
            next_free_index(&interfaces, 2, 4),
            Some(3),
            "at or above first-interface-index"
        );
        assert_eq!(next_free_index(&interfaces, 0, 2), None, "instance full");
        assert_eq!(
            next_free_index(&interfaces, 3, 3),
            None,
            "no index left below the maximum"
        );
        assert_eq!(next_free_index(&[], 1, 3), Some(1));
    }

    #[test]
    fn subnet_choice_table() {
        let pods = [tag("tier", "pods")];
        let subnets = [
            subnet("a-small", "a", 10, &pods),
            subnet("a-big", "a", 200, &[]),
            subnet("a-pods", "a", 50, &pods),
            subnet("a-empty", "a", 0, &pods),
            subnet("b-huge", "b", 1000, &pods),
        ];
        let base = SubnetQuery {
            vpc_id: "vpc",
            availability_zone: "a",
            interface_capacity: 9,
            ..Default::default()
        };
        let choose =
            |q: &SubnetQuery| subnet_for_interface(&subnets, q).map(|c| c.subnet.id.as_str());

        let ids = vec![
            "a-small".to_string(),
            "a-pods".to_string(),
            "b-huge".to_string(),
        ];
        assert_eq!(
            choose(&SubnetQuery {
                subnet_ids: &ids,
                ..base.clone()
            }),
            Some("a-pods"),
            "named, in zone, most free"
        );
        assert_eq!(
            choose(&SubnetQuery {
                subnet_tags: &pods,
                ..base.clone()
            }),
            Some("a-pods"),
            "tagged, in zone, not empty"
        );
        assert_eq!(
            choose(&SubnetQuery {
                node_subnet: Some("a-small"),
                ..base.clone()
            }),
            Some("a-small"),
            "own subnet fits an interface"
        );
        let big_interface = SubnetQuery {
            node_subnet: Some("a-small"),
            interface_capacity: 11,
            ..base.clone()
        };
        assert_eq!(
            choose(&big_interface),
            Some("a-big"),
            "own subnet too small: most free"
        );
        assert_eq!(choose(&base), Some("a-big"));
        let none = vec!["b-huge".to_string()];
        assert_eq!(
            choose(&SubnetQuery {
                subnet_ids: &none,
                ..base.clone()
            }),
            None,
            "named subnets elsewhere do not count"
        );
        let tie = [subnet("y", "a", 5, &[]), subnet("x", "a", 5, &[])];
        assert_eq!(
            subnet_for_interface(&tie, &base).unwrap().subnet.id,
            "x",
            "ties go to the lowest id"
        );
    }

    #[test]
    fn security_group_choice_table() {
        let nodes = [tag("role", "nodes")];
        let groups = [
            SecurityGroup {
                id: "sg-b".into(),
                vpc_id: "vpc".into(),
                tags: nodes.to_vec(),
            },
            SecurityGroup {
                id: "sg-a".into(),
                vpc_id: "vpc".into(),
                tags: nodes.to_vec(),
            },
            SecurityGroup {
                id: "sg-other-vpc".into(),
                vpc_id: "other".into(),
                tags: nodes.to_vec(),
            },
            SecurityGroup {
                id: "sg-c".into(),
                vpc_id: "vpc".into(),
                tags: Vec::new(),
            },
        ];
        let primary = eni(0, 0, "s");
        let ids = vec!["sg-x".to_string()];
        assert_eq!(
            security_groups_for_interface(&groups, "vpc", &ids, &nodes, Some(&primary)),
            ids
        );
        assert_eq!(
            security_groups_for_interface(&groups, "vpc", &[], &nodes, Some(&primary)),
            vec!["sg-a", "sg-b"]
        );
        assert_eq!(
            security_groups_for_interface(&groups, "vpc", &[], &[], Some(&primary)),
            vec!["sg-0"]
        );
        assert!(security_groups_for_interface(&groups, "vpc", &[], &[], None).is_empty());
    }
}
