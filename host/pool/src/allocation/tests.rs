//! Allocation plans as a table: each row a node and its instance, and the
//! plan that must come out.

use std::collections::BTreeMap;

use ipam_ciliumnode::{AllocationIp, CiliumNode};
use ipam_cloud::{NetworkInterface, Tag};

use super::*;
use crate::tags::{CLUSTER_TAG, CREATED_AT_TAG, NODE_TAG};

fn limits(ipv4: u32, max_interfaces: u32, prefix_delegation: bool) -> InstanceLimits {
    InstanceLimits {
        max_interfaces,
        ipv4_per_interface: ipv4,
        ipv6_per_interface: 0,
        prefix_delegation,
    }
}

fn eni(index: u32, addresses: usize, subnet: &str) -> NetworkInterface {
    NetworkInterface {
        id: format!("eni-{index}"),
        mac: String::new(),
        index,
        subnet_id: subnet.into(),
        vpc_id: "vpc-1".into(),
        primary_ip: format!("10.0.{index}.1").parse().unwrap(),
        addresses: (0..addresses)
            .map(|a| format!("10.0.{index}.{}", a + 2).parse().unwrap())
            .collect(),
        prefixes: Vec::new(),
        security_groups: vec!["sg-node".into()],
        tags: Vec::new(),
        instance_id: Some("i-1".into()),
    }
}

fn instance(interfaces: Vec<NetworkInterface>) -> Instance {
    Instance {
        id: "i-1".into(),
        instance_type: "m5.large".into(),
        availability_zone: "zone-a".into(),
        vpc_id: "vpc-1".into(),
        interfaces,
    }
}

fn subnet(id: &str, free: u32) -> Subnet {
    Subnet {
        id: id.into(),
        cidr: "10.0.0.0/16".parse().unwrap(),
        availability_zone: "zone-a".into(),
        vpc_id: "vpc-1".into(),
        available_addresses: free,
        tags: Vec::new(),
    }
}

fn node(pre_allocate: u32, used: usize) -> CiliumNode {
    let mut node = CiliumNode {
        name: "node-1".into(),
        ..CiliumNode::default()
    };
    node.spec.instance_id = "i-1".into();
    node.spec.ipam.pre_allocate = Some(pre_allocate);
    // Pods only on secondary interfaces: the primary is never filled.
    node.spec.eni.first_interface_index = Some(1);
    node.status.ipam.used = (0..used)
        .map(|i| (format!("10.9.0.{i}"), AllocationIp::default()))
        .collect::<BTreeMap<_, _>>();
    node
}

const ALL: Capabilities = Capabilities {
    create_interface: true,
    release: true,
    prefixes: true,
    delete_interface: true,
};

struct Row {
    why: &'static str,
    node: CiliumNode,
    instance: Instance,
    limits: InstanceLimits,
    subnets: Vec<Subnet>,
    capabilities: Capabilities,
    prefix_delegation: bool,
    pending_pods: u32,
    mode: IpamMode,
    want: AllocationPlan,
}

fn row(why: &'static str, node: CiliumNode, instance: Instance, want: AllocationPlan) -> Row {
    Row {
        why,
        node,
        instance,
        limits: limits(10, 3, false),
        subnets: vec![subnet("subnet-a", 1000)],
        capabilities: ALL,
        prefix_delegation: false,
        pending_pods: 0,
        mode: IpamMode::Eni,
        want,
    }
}

/// A node whose spec.azure names `interface` (the last segment of an id).
fn named(pre_allocate: u32, interface: &str) -> CiliumNode {
    let mut node = node(pre_allocate, 0);
    node.spec.azure.interface_name = interface.into();
    node
}

fn create(index: u32, ipv4_count: u32, use_prefixes: bool) -> CreateInterfaceRequest {
    CreateInterfaceRequest {
        instance_id: "i-1".into(),
        index,
        subnet_id: "subnet-a".into(),
        security_groups: vec!["sg-node".into()],
        description: "ipam-operator: c1 on node-1".into(),
        tags: vec![
            Tag {
                key: CLUSTER_TAG.into(),
                value: "c1".into(),
            },
            Tag {
                key: NODE_TAG.into(),
                value: "node-1".into(),
            },
            Tag {
                key: CREATED_AT_TAG.into(),
                value: "1700000000".into(),
            },
        ],
        delete_on_termination: true,
        ipv4_count,
        use_prefixes,
    }
}

fn assign(interface: &str, request: IpRequest, fallback: Option<IpRequest>) -> AllocationPlan {
    AllocationPlan::Assign {
        interface: interface.into(),
        subnet: "subnet-a".into(),
        request,
        fallback,
        why: "fullest usable interface with a free slot (keeps other interfaces empty)",
    }
}

fn rows() -> Vec<Row> {
    let primary_only = instance(vec![eni(0, 0, "subnet-a")]);
    let two_with_room = || {
        instance(vec![
            eni(0, 0, "subnet-a"),
            eni(1, 6, "subnet-a"),
            eni(2, 2, "subnet-a"),
        ])
    };
    vec![
        Row {
            mode: IpamMode::Azure,
            ..row(
                "Azure mode: only the interface spec.azure.interface-name names is filled",
                named(12, "eni-2"),
                two_with_room(),
                assign("eni-2", IpRequest::Addresses(4), None),
            )
        },
        row(
            "ENI mode: spec.azure.interface-name plays no part",
            named(12, "eni-2"),
            two_with_room(),
            assign("eni-1", IpRequest::Addresses(3), None),
        ),
        Row {
            mode: IpamMode::Azure,
            ..row(
                "Azure mode without a name: any interface, the fullest first",
                named(12, ""),
                two_with_room(),
                assign("eni-1", IpRequest::Addresses(3), None),
            )
        },
        Row {
            mode: IpamMode::Azure,
            ..row(
                "Azure mode: a named interface the instance lacks blocks, naming it",
                named(12, "nic-9"),
                two_with_room(),
                AllocationPlan::Blocked(
                    "interface nic-9 (spec.azure.interface-name) is full, out of subnet addresses or not on instance i-1".into(),
                ),
            )
        },
        row(
            "a pool of 8 with nothing used is satisfied at pre-allocate 8",
            node(8, 0),
            instance(vec![eni(0, 0, "subnet-a"), eni(1, 8, "subnet-a")]),
            AllocationPlan::Satisfied,
        ),
        row(
            "the fullest interface with room is filled, up to its free slots",
            node(12, 0),
            instance(vec![
                eni(0, 0, "subnet-a"),
                eni(1, 6, "subnet-a"),
                eni(2, 2, "subnet-a"),
            ]),
            assign("eni-1", IpRequest::Addresses(3), None),
        ),
        Row {
            pending_pods: 5,
            ..row(
                "pending pods count as used: the surge is one allocation",
                node(2, 0),
                instance(vec![eni(0, 0, "subnet-a"), eni(1, 0, "subnet-a")]),
                assign("eni-1", IpRequest::Addresses(7), None),
            )
        },
        Row {
            subnets: vec![subnet("subnet-a", 2)],
            ..row(
                "never more than the subnet has",
                node(8, 0),
                instance(vec![eni(0, 0, "subnet-a"), eni(1, 0, "subnet-a")]),
                assign("eni-1", IpRequest::Addresses(2), None),
            )
        },
        Row {
            prefix_delegation: true,
            limits: limits(10, 3, true),
            ..row(
                "with prefixes: one /28, and 8 single addresses if no /28 is free",
                node(8, 0),
                instance(vec![eni(0, 0, "subnet-a"), eni(1, 0, "subnet-a")]),
                assign(
                    "eni-1",
                    IpRequest::Prefixes(1),
                    Some(IpRequest::Addresses(8)),
                ),
            )
        },
        Row {
            prefix_delegation: true,
            limits: limits(10, 3, true),
            capabilities: Capabilities {
                prefixes: false,
                ..ALL
            },
            ..row(
                "prefixes asked for, but the provider cannot assign them: addresses",
                node(8, 0),
                instance(vec![eni(0, 0, "subnet-a"), eni(1, 0, "subnet-a")]),
                assign("eni-1", IpRequest::Addresses(8), None),
            )
        },
        Row {
            prefix_delegation: true,
            ..row(
                "prefixes asked for, but the instance type has none: addresses",
                node(8, 0),
                instance(vec![eni(0, 0, "subnet-a"), eni(1, 0, "subnet-a")]),
                assign("eni-1", IpRequest::Addresses(8), None),
            )
        },
        row(
            "every interface full: a new one at the next index",
            node(8, 0),
            primary_only.clone(),
            AllocationPlan::Create {
                request: create(1, 8, false),
                fallback: None,
                why: "the node's own subnet can take a full interface",
            },
        ),
        Row {
            prefix_delegation: true,
            limits: limits(10, 3, true),
            ..row(
                "a new interface with one /28, else 8 addresses",
                node(8, 0),
                primary_only.clone(),
                AllocationPlan::Create {
                    request: create(1, 1, true),
                    fallback: Some(create(1, 8, false)),
                    why: "the node's own subnet can take a full interface",
                },
            )
        },
        Row {
            capabilities: Capabilities {
                create_interface: false,
                ..ALL
            },
            ..row(
                "full, and the provider cannot create interfaces",
                node(8, 0),
                primary_only.clone(),
                AllocationPlan::Blocked(
                    "every interface is full and the provider cannot create interfaces".into(),
                ),
            )
        },
        Row {
            limits: limits(10, 1, false),
            ..row(
                "full, and the instance takes no more interfaces",
                node(8, 0),
                primary_only.clone(),
                AllocationPlan::Blocked("instance i-1 has no room for another interface".into()),
            )
        },
        Row {
            subnets: vec![subnet("subnet-a", 0)],
            ..row(
                "full, and no subnet has room",
                node(8, 0),
                primary_only,
                AllocationPlan::Blocked(
                    "no subnet in the node's VPC and zone has free addresses".into(),
                ),
            )
        },
    ]
}

#[test]
fn plans() {
    let security_groups = [SecurityGroup {
        id: "sg-node".into(),
        vpc_id: "vpc-1".into(),
        tags: Vec::new(),
    }];
    for row in rows() {
        let input = AllocationInput {
            node: &row.node,
            instance: &row.instance,
            limits: row.limits,
            subnets: &row.subnets,
            security_groups: &security_groups,
            needed: needed(&row.node, &row.instance, &BTreeSet::new(), row.pending_pods),
            capabilities: row.capabilities,
            prefix_delegation: row.prefix_delegation,
            cluster_name: "c1",
            now_unix: 1_700_000_000,
            mode: row.mode,
        };
        assert_eq!(plan(&input), row.want, "{}", row.why);
    }
}

#[test]
fn withheld_addresses_are_not_in_the_pool_so_they_are_needed_again() {
    let node = node(8, 0);
    let instance = instance(vec![eni(0, 0, "subnet-a"), eni(1, 8, "subnet-a")]);
    assert_eq!(needed(&node, &instance, &BTreeSet::new(), 0), 0);
    let withheld: BTreeSet<String> = ["10.0.1.2".to_string(), "10.0.1.3".to_string()].into();
    assert_eq!(needed(&node, &instance, &withheld, 0), 2);
}

#[test]
fn prefixes_expand_to_all_sixteen_addresses() {
    let addresses = select::prefix_addresses(&"10.0.1.16/28".parse().unwrap());
    assert_eq!(addresses.len(), 16);
    assert_eq!(addresses.first().map(String::as_str), Some("10.0.1.16"));
    assert_eq!(addresses.last().map(String::as_str), Some("10.0.1.31"));
}

#[test]
fn requests_stay_within_free_slots() {
    assert_eq!(ip_request(false, 8, 3), IpRequest::Addresses(3));
    assert_eq!(ip_request(false, 2, 9), IpRequest::Addresses(2));
    assert_eq!(ip_request(true, 8, 9), IpRequest::Prefixes(1));
    assert_eq!(ip_request(true, 40, 2), IpRequest::Prefixes(2));
}
