//! Release plans as a table over one node whose pool is larger than it needs.

use ipam_ciliumnode::ReleaseState;
use ipam_cloud::Tag;

use super::*;
use crate::pool::pool_of;
use crate::tags::cluster_tag;

fn eni(index: u32, addresses: &[&str], tags: Vec<Tag>) -> NetworkInterface {
    NetworkInterface {
        id: format!("eni-{index}"),
        mac: String::new(),
        index,
        subnet_id: format!("subnet-{index}"),
        vpc_id: "vpc-1".into(),
        primary_ip: format!("10.0.{index}.1").parse().unwrap(),
        addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
        prefixes: Vec::new(),
        security_groups: Vec::new(),
        tags,
        instance_id: Some("i-1".into()),
    }
}

/// Pool of 6 on eni-1 (one used) and 2 on eni-2 (ours), pre-allocate 2: 5
/// excess.
fn instance() -> Instance {
    Instance {
        id: "i-1".into(),
        instance_type: "m5.large".into(),
        availability_zone: "zone-a".into(),
        vpc_id: "vpc-1".into(),
        interfaces: vec![
            eni(0, &[], Vec::new()),
            eni(
                1,
                &[
                    "10.0.1.2", "10.0.1.3", "10.0.1.4", "10.0.1.5", "10.0.1.6", "10.0.1.7",
                ],
                Vec::new(),
            ),
            eni(2, &["10.0.2.2", "10.0.2.3"], vec![cluster_tag("c1")]),
        ],
    }
}

fn node(release_ips: &[(&str, ReleaseState)]) -> CiliumNode {
    let mut node = CiliumNode {
        name: "node-1".into(),
        ..CiliumNode::default()
    };
    node.spec.ipam.pre_allocate = Some(2);
    node.spec.eni.first_interface_index = Some(1);
    node.status.ipam.used = [("10.0.1.2".to_string(), AllocationIp::default())].into();
    node.status.ipam.release_ips = release_ips
        .iter()
        .map(|(ip, state)| (ip.to_string(), state.clone()))
        .collect();
    node
}

const DELAY: Duration = Duration::from_secs(180);

fn run(
    node: &CiliumNode,
    free_interfaces: bool,
    capabilities: Capabilities,
    first_seen: &BTreeMap<String, Instant>,
    now: Instant,
) -> ReleasePlan {
    run_pending(node, 0, free_interfaces, capabilities, first_seen, now)
}

fn run_pending(
    node: &CiliumNode,
    pending_pods: u32,
    free_interfaces: bool,
    capabilities: Capabilities,
    first_seen: &BTreeMap<String, Instant>,
    now: Instant,
) -> ReleasePlan {
    let instance = instance();
    let pool = pool_of(node, &instance, &BTreeSet::new());
    plan(&ReleasePlanInput {
        node,
        instance: &instance,
        pool: &pool,
        pending_pods,
        capabilities,
        free_interfaces,
        ownership: &Ownership::own_only("c1"),
        first_seen,
        now,
        release_delay: DELAY,
    })
}

/// The node's plan when its eni-2 was made by Cilium's operator (its tags
/// instead of ours), under `ownership`.
fn run_on_cilium_interface(node: &CiliumNode, ownership: &Ownership) -> ReleasePlan {
    let mut instance = instance();
    instance.interfaces[2].tags = vec![
        Tag {
            key: "io.cilium/cilium-managed".into(),
            value: "true".into(),
        },
        Tag {
            key: "io.cilium/cluster-name".into(),
            value: "c1".into(),
        },
    ];
    let pool = pool_of(node, &instance, &BTreeSet::new());
    plan(&ReleasePlanInput {
        node,
        instance: &instance,
        pool: &pool,
        pending_pods: 0,
        capabilities: ALL,
        free_interfaces: true,
        ownership,
        first_seen: &BTreeMap::new(),
        now: Instant::now(),
        release_delay: DELAY,
    })
}

const ALL: Capabilities = Capabilities {
    create_interface: true,
    release: true,
    prefixes: false,
    delete_interface: true,
};

fn ips(ips: &[&str]) -> Vec<std::net::Ipv4Addr> {
    ips.iter().map(|s| s.parse().unwrap()).collect()
}

fn strings(ips: &[&str]) -> Vec<String> {
    ips.iter().map(|s| s.to_string()).collect()
}

#[test]
fn candidates_wait_out_the_delay_then_are_marked() {
    let t0 = Instant::now();
    let first = run(&node(&[]), true, ALL, &BTreeMap::new(), t0);
    assert!(first.mark.is_empty(), "seen for the first time");
    assert_eq!(
        first.first_seen.keys().cloned().collect::<Vec<_>>(),
        strings(&["10.0.2.2", "10.0.2.3"]),
        "the interface of ours with nothing used is the candidate, whole"
    );
    assert_eq!(first.action, ReleaseAction::Unassign(Vec::new()));
    let later = run(&node(&[]), true, ALL, &first.first_seen, t0 + DELAY);
    assert_eq!(later.mark, strings(&["10.0.2.2", "10.0.2.3"]));
}

#[test]
fn an_interface_goes_whole_once_the_agent_released_all_of_it() {
    let ready = ReleaseState::ReadyForRelease;
    let t0 = Instant::now();
    let half = node(&[
        ("10.0.2.2", ready.clone()),
        ("10.0.2.3", ReleaseState::MarkedForRelease),
    ]);
    assert_eq!(
        run(&half, true, ALL, &BTreeMap::new(), t0).action,
        ReleaseAction::Unassign(vec![Unassign {
            interface: "eni-2".into(),
            subnet: "subnet-2".into(),
            addresses: ips(&["10.0.2.2"]),
        }]),
        "not all of it yet: nothing is deleted (the ready one is unassigned)"
    );
    let all = node(&[("10.0.2.2", ready.clone()), ("10.0.2.3", ready)]);
    assert_eq!(
        run(&all, true, ALL, &BTreeMap::new(), t0).action,
        ReleaseAction::FreeInterface(FreeInterface {
            interface: "eni-2".into(),
            index: 2,
            subnet: "subnet-2".into(),
            addresses: strings(&["10.0.2.2", "10.0.2.3"]),
        })
    );
}

#[test]
fn an_interface_cilium_made_is_freed_whole_only_when_adopted() {
    let ready = ReleaseState::ReadyForRelease;
    let all = node(&[("10.0.2.2", ready.clone()), ("10.0.2.3", ready)]);
    let adopting = Ownership::new(
        "c1",
        vec![Tag {
            key: "io.cilium/cluster-name".into(),
            value: "c1".into(),
        }],
    );
    assert!(
        matches!(
            run_on_cilium_interface(&all, &adopting).action,
            ReleaseAction::FreeInterface(FreeInterface { ref interface, .. }) if interface == "eni-2"
        ),
        "adopted by its tag: freed whole like one of ours"
    );
    assert_eq!(
        run_on_cilium_interface(&all, &Ownership::own_only("c1")).action,
        ReleaseAction::Unassign(vec![Unassign {
            interface: "eni-2".into(),
            subnet: "subnet-2".into(),
            addresses: ips(&["10.0.2.2", "10.0.2.3"]),
        }]),
        "not adopted: its released addresses are unassigned, the interface stays"
    );
}

#[test]
fn without_interface_freeing_unused_secondaries_of_the_emptiest_interface_go() {
    let t0 = Instant::now();
    let plan = run(&node(&[]), false, ALL, &BTreeMap::new(), t0);
    assert_eq!(
        plan.first_seen.keys().cloned().collect::<Vec<_>>(),
        strings(&["10.0.2.2", "10.0.2.3"]),
        "eni-2 has no used address: it empties first"
    );
    let no_delete = Capabilities {
        delete_interface: false,
        ..ALL
    };
    assert_eq!(
        run(&node(&[]), true, no_delete, &BTreeMap::new(), t0).first_seen,
        plan.first_seen,
        "a provider that cannot delete interfaces frees none"
    );
}

#[test]
fn a_whole_interface_is_deleted_only_with_freeing_on_and_a_provider_that_deletes() {
    let ready = ReleaseState::ReadyForRelease;
    let all = node(&[("10.0.2.2", ready.clone()), ("10.0.2.3", ready)]);
    let unassign = ReleaseAction::Unassign(vec![Unassign {
        interface: "eni-2".into(),
        subnet: "subnet-2".into(),
        addresses: ips(&["10.0.2.2", "10.0.2.3"]),
    }]);
    let t0 = Instant::now();
    assert_eq!(
        run(&all, false, ALL, &BTreeMap::new(), t0).action,
        unassign,
        "freeing off: its addresses are unassigned, the interface stays"
    );
    let no_delete = Capabilities {
        delete_interface: false,
        ..ALL
    };
    assert_eq!(
        run(&all, true, no_delete, &BTreeMap::new(), t0).action,
        unassign,
        "the provider cannot delete interfaces"
    );
}

#[test]
fn a_provider_that_cannot_release_gets_nothing_marked_and_marks_are_withdrawn() {
    let no_release = Capabilities {
        release: false,
        ..ALL
    };
    let marked = node(&[("10.0.2.2", ReleaseState::MarkedForRelease)]);
    let plan = run(&marked, true, no_release, &BTreeMap::new(), Instant::now());
    assert!(plan.first_seen.is_empty());
    assert_eq!(plan.unmark, strings(&["10.0.2.2"]));
    assert_eq!(plan.action, ReleaseAction::Unassign(Vec::new()));
}

#[test]
fn addresses_pending_pods_are_about_to_take_are_not_excess() {
    let t0 = Instant::now();
    // 5 excess; 3 pods waiting leave 2, and 5 leave none.
    let some = run_pending(&node(&[]), 3, false, ALL, &BTreeMap::new(), t0);
    assert_eq!(some.first_seen.len(), 2, "{some:?}");
    let none = run_pending(&node(&[]), 5, true, ALL, &BTreeMap::new(), t0);
    assert!(none.first_seen.is_empty(), "{none:?}");
    assert_eq!(none.action, ReleaseAction::Unassign(Vec::new()));
}
