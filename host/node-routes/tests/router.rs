//! The router against a real kernel, inside throwaway network namespaces
//! (never the machine's own). Needs root: `require_root` fails loudly
//! without it. Veth ends with set MACs stand in for ENIs.

use std::net::{IpAddr, Ipv4Addr};

use futures::TryStreamExt;
use ipam_netns::{require_root, NetLinks, NetNs};
use ipam_node_routes::{
    Mac, ObservedRule, PodRoute, PodRule, ReconcileReport, Router, RouterError, FROM_POD_PRIORITY,
    TO_POD_PRIORITY,
};
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteScope};
use rtnetlink::packet_route::rule::RuleAction;
use rtnetlink::{IpVersion, RouteMessageBuilder};

const ENI1: Mac = Mac([0x02, 0xaa, 0, 0, 0, 0x01]);
const ENI2: Mac = Mac([0x02, 0xaa, 0, 0, 0, 0x02]);
const NO_SUCH_ENI: Mac = Mac([0x02, 0xaa, 0, 0, 0, 0xff]);

fn gateway() -> Ipv4Addr {
    Ipv4Addr::new(192, 168, 1, 1)
}

fn pod(last: u8, interface_mac: Mac) -> PodRoute {
    PodRoute {
        address: Ipv4Addr::new(192, 168, 1, last),
        interface_mac,
        interface_number: if interface_mac == ENI2 { 2 } else { 1 },
        gateway: gateway(),
    }
}

/// A namespace with two "ENIs", eni1 and eni2, both down.
fn host_with_enis(test: &str) -> NetNs {
    require_root();
    let ns = NetNs::create_unique(test).expect("creating the test namespace");
    ns.block_on(|| async {
        let links = NetLinks::connect().expect("connecting to netlink");
        for (name, peer, mac) in [("eni1", "eni1-peer", ENI1), ("eni2", "eni2-peer", ENI2)] {
            links
                .add_veth(name, peer, None)
                .await
                .expect("adding a veth pair");
            links.set_mac(name, mac.0).await.expect("setting the MAC");
        }
    })
    .expect("running in the test namespace");
    ns
}

/// Every rule at priority 20 or 111 as the kernel lists it, read as a pod
/// rule (None if it is not one), sorted: duplicates would show twice.
async fn rules_at_pod_priorities(links: &NetLinks) -> Vec<Option<PodRule>> {
    let listed: Vec<_> = links
        .handle()
        .rule()
        .get(IpVersion::V4)
        .execute()
        .try_collect()
        .await
        .expect("listing rules");
    let mut rules: Vec<Option<PodRule>> = listed
        .iter()
        .map(ObservedRule::from_message)
        .filter(|rule| rule.priority == TO_POD_PRIORITY || rule.priority == FROM_POD_PRIORITY)
        .map(|rule| rule.as_pod_rule())
        .collect();
    rules.sort();
    rules
}

fn rules_of(pods: &[PodRoute]) -> Vec<Option<PodRule>> {
    let mut rules: Vec<Option<PodRule>> = pods
        .iter()
        .flat_map(|pod| pod.rules().expect("valid pod"))
        .map(Some)
        .collect();
    rules.sort();
    rules
}

/// The routes in `table`, written like `ip route` does, sorted.
async fn routes_in_table(links: &NetLinks, table: u32) -> Vec<String> {
    let listed: Vec<RouteMessage> = links
        .handle()
        .route()
        .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
        .execute()
        .try_collect()
        .await
        .expect("listing routes");
    let mut routes: Vec<String> = listed
        .iter()
        .filter(|route| {
            let in_table = route.attributes.iter().find_map(|a| match a {
                RouteAttribute::Table(t) => Some(*t),
                _ => None,
            });
            in_table.unwrap_or(u32::from(route.header.table)) == table
        })
        .map(describe_route)
        .collect();
    routes.sort();
    routes
}

fn describe_route(route: &RouteMessage) -> String {
    let mut destination = "default".to_owned();
    let mut via = String::new();
    let mut dev = String::new();
    for attribute in &route.attributes {
        match attribute {
            RouteAttribute::Destination(RouteAddress::Inet(ip)) => {
                destination = format!("{ip}/{}", route.header.destination_prefix_length)
            }
            RouteAttribute::Gateway(RouteAddress::Inet(ip)) => via = format!(" via {ip}"),
            RouteAttribute::Oif(index) => dev = format!(" dev {index}"),
            _ => {}
        }
    }
    let scope = if route.header.scope == RouteScope::Link {
        " scope link"
    } else {
        ""
    };
    format!("{destination}{via}{dev}{scope}")
}

fn eni_table(eni_index: u32) -> Vec<String> {
    vec![
        format!("192.168.1.1/32 dev {eni_index} scope link"),
        format!("default via 192.168.1.1 dev {eni_index}"),
    ]
}

#[test]
fn installing_two_pods_gives_exactly_their_rules_and_one_table_and_twice_changes_nothing() {
    let ns = host_with_enis("routes-install");
    ns.block_on(|| async {
        let links = NetLinks::connect().expect("connecting to netlink");
        let eni1 = links.index("eni1").await.expect("eni1");
        let router = Router::connect().expect("connecting the router");
        let (a, b) = (pod(10, ENI1), pod(11, ENI1));

        for round in 0..2 {
            router.install(&a).await.expect("installing a");
            router.install(&b).await.expect("installing b");
            assert_eq!(
                rules_at_pod_priorities(&links).await,
                rules_of(&[a, b]),
                "round {round}"
            );
            assert_eq!(
                routes_in_table(&links, 11).await,
                eni_table(eni1),
                "round {round}"
            );
        }
        // The host's own rules are still there: local, main, default.
        let all: Vec<_> = links
            .handle()
            .rule()
            .get(IpVersion::V4)
            .execute()
            .try_collect()
            .await
            .expect("listing rules");
        assert_eq!(all.len(), 3 + 4);
    })
    .expect("running in the test namespace");
}

#[test]
fn a_down_interface_is_brought_up_and_its_table_rewritten_after_a_flap() {
    let ns = host_with_enis("routes-up");
    ns.block_on(|| async {
        let links = NetLinks::connect().expect("connecting to netlink");
        let eni1 = links.index("eni1").await.expect("eni1");
        let router = Router::connect().expect("connecting the router");
        let a = pod(10, ENI1);

        assert!(!links.is_up("eni1").await.expect("flags"));
        router.install(&a).await.expect("installing");
        assert!(links.is_up("eni1").await.expect("flags"));

        // Setting a link down drops its routes; installing again puts the
        // link up and the table back.
        links.set_down("eni1").await.expect("down");
        assert_eq!(routes_in_table(&links, 11).await, Vec::<String>::new());
        router.install(&a).await.expect("installing again");
        assert!(links.is_up("eni1").await.expect("flags"));
        assert_eq!(routes_in_table(&links, 11).await, eni_table(eni1));
        assert_eq!(rules_at_pod_priorities(&links).await, rules_of(&[a]));
    })
    .expect("running in the test namespace");
}

#[test]
fn removing_keeps_a_shared_table_until_its_last_pod_goes_and_twice_is_fine() {
    let ns = host_with_enis("routes-remove");
    ns.block_on(|| async {
        let links = NetLinks::connect().expect("connecting to netlink");
        let eni1 = links.index("eni1").await.expect("eni1");
        let router = Router::connect().expect("connecting the router");
        let (a, b) = (pod(10, ENI1), pod(11, ENI1));
        router.install(&a).await.expect("installing a");
        router.install(&b).await.expect("installing b");

        router.remove(&a).await.expect("removing a");
        assert_eq!(rules_at_pod_priorities(&links).await, rules_of(&[b]));
        assert_eq!(
            routes_in_table(&links, 11).await,
            eni_table(eni1),
            "b still uses table 11"
        );

        router.remove(&b).await.expect("removing b");
        assert_eq!(rules_at_pod_priorities(&links).await, rules_of(&[]));
        assert_eq!(routes_in_table(&links, 11).await, Vec::<String>::new());

        router.remove(&b).await.expect("removing b again");
        router.remove(&a).await.expect("removing a again");
        assert_eq!(rules_at_pod_priorities(&links).await, rules_of(&[]));
    })
    .expect("running in the test namespace");
}

#[test]
fn after_a_restart_a_fresh_router_sees_the_rules_and_converges_leaving_other_rules_alone() {
    let ns = host_with_enis("routes-restart");
    let (a, b, c, d) = (pod(10, ENI1), pod(11, ENI1), pod(20, ENI2), pod(12, ENI1));

    // Before the restart: three pods, and two rules of someone else's that
    // sit at pod priorities but are not pod rules.
    ns.block_on(|| async {
        let links = NetLinks::connect().expect("connecting to netlink");
        let router = Router::connect().expect("connecting the router");
        for pod in [a, b, c] {
            router.install(&pod).await.expect("installing");
        }
        let rules = links.handle().rule();
        rules
            .add()
            .v4()
            .priority(FROM_POD_PRIORITY)
            .input_interface("eni2")
            .table_id(12)
            .action(RuleAction::ToTable)
            .execute()
            .await
            .expect("adding a rule with an interface selector");
        rules
            .add()
            .v4()
            .priority(TO_POD_PRIORITY)
            .destination_prefix(Ipv4Addr::new(192, 168, 1, 99), 32)
            .table_id(100)
            .action(RuleAction::ToTable)
            .execute()
            .await
            .expect("adding a to-rule into another table");
    })
    .expect("running in the test namespace");

    // After: a new runtime, a new connection, a new router.
    ns.block_on(|| async {
        let links = NetLinks::connect().expect("connecting to netlink");
        let eni1 = links.index("eni1").await.expect("eni1");
        let eni2 = links.index("eni2").await.expect("eni2");
        let router = Router::connect().expect("connecting the router");

        let mut installed: Vec<(IpAddr, u32)> = router
            .installed()
            .await
            .expect("listing installed")
            .into_iter()
            .map(|rule| (IpAddr::V4(rule.address), rule.table))
            .collect();
        installed.sort();
        let want: Vec<(IpAddr, u32)> = [(a, 11), (b, 11), (c, 12)]
            .into_iter()
            .map(|(pod, table)| (IpAddr::V4(pod.address), table))
            .collect();
        assert_eq!(installed, want);

        let report = router.reconcile(&[a, d]).await.expect("reconciling");
        assert_eq!(report, ReconcileReport::default());
        let mut expected = rules_of(&[a, d]);
        expected.extend([None, None]); // the two rules that are not pod rules
        expected.sort();
        assert_eq!(rules_at_pod_priorities(&links).await, expected);
        assert_eq!(routes_in_table(&links, 11).await, eni_table(eni1));
        // c is gone, but someone else's rule still looks up table 12.
        assert_eq!(routes_in_table(&links, 12).await, eni_table(eni2));

        // Converging again changes nothing.
        router.reconcile(&[a, d]).await.expect("reconciling again");
        assert_eq!(rules_at_pod_priorities(&links).await, expected);
    })
    .expect("running in the test namespace");
}

#[test]
fn reconcile_flushes_a_table_no_rule_uses_any_more() {
    let ns = host_with_enis("routes-flush");
    ns.block_on(|| async {
        let links = NetLinks::connect().expect("connecting to netlink");
        let router = Router::connect().expect("connecting the router");
        let (a, c) = (pod(10, ENI1), pod(20, ENI2));
        router.reconcile(&[a, c]).await.expect("reconciling");
        assert_eq!(rules_at_pod_priorities(&links).await, rules_of(&[a, c]));
        assert_eq!(routes_in_table(&links, 12).await.len(), 2);

        router.reconcile(&[a]).await.expect("reconciling");
        assert_eq!(rules_at_pod_priorities(&links).await, rules_of(&[a]));
        assert_eq!(routes_in_table(&links, 12).await, Vec::<String>::new());
        assert_eq!(routes_in_table(&links, 11).await.len(), 2);
    })
    .expect("running in the test namespace");
}

#[test]
fn a_full_node_reconciles_thousands_of_rules_in_both_directions() {
    let ns = host_with_enis("routes-many");
    ns.block_on(|| async {
        let links = NetLinks::connect().expect("connecting to netlink");
        let router = Router::connect().expect("connecting the router");
        // 2,000 pods (4,000 rules): every one added, then every one deleted.
        let pods: Vec<PodRoute> = (0..2_000u32)
            .map(|n| PodRoute {
                address: Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 1, 0, 0)) + n),
                ..pod(10, ENI1)
            })
            .collect();
        router.reconcile(&pods).await.expect("reconciling to all");
        assert_eq!(rules_at_pod_priorities(&links).await, rules_of(&pods));
        router.reconcile(&[]).await.expect("reconciling to none");
        assert_eq!(rules_at_pod_priorities(&links).await, Vec::new());
    })
    .expect("running in the test namespace");
}

#[test]
fn an_interface_not_on_the_host_is_a_typed_error_and_holds_back_only_its_pods() {
    let ns = host_with_enis("routes-missing");
    ns.block_on(|| async {
        let links = NetLinks::connect().expect("connecting to netlink");
        let router = Router::connect().expect("connecting the router");
        let lost = PodRoute {
            interface_number: 3,
            ..pod(30, NO_SUCH_ENI)
        };

        match router.install(&lost).await {
            Err(RouterError::InterfaceNotFound { mac }) => assert_eq!(mac, NO_SUCH_ENI),
            other => panic!("expected InterfaceNotFound, got {other:?}"),
        }
        assert_eq!(rules_at_pod_priorities(&links).await, rules_of(&[]));

        let a = pod(10, ENI1);
        let report = router.reconcile(&[a, lost]).await.expect("reconciling");
        assert_eq!(report.missing_interfaces, vec![NO_SUCH_ENI]);
        assert_eq!(rules_at_pod_priorities(&links).await, rules_of(&[a]));
    })
    .expect("running in the test namespace");
}
