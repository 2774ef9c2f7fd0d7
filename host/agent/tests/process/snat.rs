//! SNAT, as root in namespaces the test makes: a node (the agent, its
//! fake API server, a pod made through ptp and ipam-cni), an "outside"
//! network beyond the VPC and a peer inside it, each a namespace joined to
//! the node by a veth. A pod's datagram to the outside arrives from the
//! node's address; one to the VPC peer, or to a range of
//! `--snat-exclude-cidrs`, from the pod's own. The table is one table with
//! one set of rules however often the agent starts (SIGKILL or SIGTERM),
//! and follows the VPC ranges the CiliumNode names; with SNAT turned off
//! the next start removes it and the pod's address goes out unchanged.
//! Debian's `nft` lists it (a missing `nft` fails the test).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use ipam_fake_apiserver::CILIUMNODES;
use ipam_netns::{NetLinks, NetNs};
use serde_json::{json, Value};

use crate::node_ns::{assert_ok, NodeNs};
use crate::support::{kill, metric, terminate, until, NODE};

const NODE_OUTSIDE: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const OUTSIDE: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const NODE_EXCLUDED: Ipv4Addr = Ipv4Addr::new(192, 168, 7, 1);
const EXCLUDED: Ipv4Addr = Ipv4Addr::new(192, 168, 7, 2);
const NODE_PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
const POD: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 10);

/// Debian's nftables, to list what the agent wrote.
const NFT: &str = "/usr/sbin/nft";

/// `nft -j list ruleset` inside `ns`: the agent's table's rules, each as
/// nft prints its expressions, and how many tables of that name there are.
fn agent_table(ns: &NetNs) -> (usize, Vec<Value>) {
    assert!(
        std::path::Path::new(NFT).exists(),
        "{NFT} is missing: install Debian's nftables (cargo xtask test does)"
    );
    let output = ns
        .run(|| {
            std::process::Command::new(NFT)
                .args(["-j", "list", "ruleset"])
                .output()
        })
        .expect("netns")
        .expect("nft runs");
    assert_ok(&output, "nft -j list ruleset");
    let listing: Value = serde_json::from_slice(&output.stdout).expect("nft's JSON");
    let items = listing["nftables"].as_array().cloned().unwrap_or_default();
    let ours = |item: &Value, kind: &str| {
        item[kind]["family"] == "ip"
            && item[kind][if kind == "table" { "name" } else { "table" }] == "ipam-agent"
    };
    let tables = items.iter().filter(|i| ours(i, "table")).count();
    let rules = items
        .iter()
        .filter(|i| ours(i, "rule"))
        .map(|i| i["rule"]["expr"].clone())
        .collect();
    (tables, rules)
}

/// Sends one datagram from `pod` to `to`, received in `receiver`: its
/// source as the receiver sees it.
fn source_seen(pod: &NetNs, receiver: &NetNs, to: Ipv4Addr) -> Ipv4Addr {
    let socket = receiver
        .run(move || UdpSocket::bind((to, 0)))
        .expect("netns")
        .expect("bind the receiver");
    let port = socket.local_addr().expect("address").port();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read deadline");
    pod.run(move || {
        let sender = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("the pod's socket");
        sender.send_to(b"hello", (to, port)).expect("the pod sends");
    })
    .expect("netns");
    let mut buffer = [0u8; 16];
    let (_, from) = socket
        .recv_from(&mut buffer)
        .unwrap_or_else(|e| panic!("nothing from the pod reached {to}: {e}"));
    match from {
        SocketAddr::V4(from) => *from.ip(),
        SocketAddr::V6(from) => panic!("an IPv6 source {from}"),
    }
}

/// A namespace joined to the node by a veth: `node_side` on the node,
/// `far_side` in the new namespace (both /24).
fn network(node: &NodeNs, name: &str, node_side: Ipv4Addr, far_side: Ipv4Addr) -> NetNs {
    let far = NetNs::create_unique(name).expect("a namespace");
    let (near_link, far_link) = (format!("{name}0"), format!("{name}1"));
    node.ns
        .block_on(|| async {
            let links = NetLinks::connect().expect("netlink");
            links
                .add_veth(&near_link, &far_link, Some(&far))
                .await
                .expect("the veth");
            links
                .add_address(&near_link, node_side.into(), 24)
                .await
                .expect("the node's address");
            links.set_up(&near_link).await.expect("up");
        })
        .expect("netns");
    far.block_on(|| async {
        let links = NetLinks::connect().expect("netlink");
        links.set_up("lo").await.expect("lo up");
        links
            .add_address(&far_link, far_side.into(), 24)
            .await
            .expect("the far address");
        links.set_up(&far_link).await.expect("up");
    })
    .expect("netns");
    far
}

/// Adds `address/24` to `link` in `ns`.
fn add_address(ns: &NetNs, link: &str, address: Ipv4Addr) {
    ns.block_on(|| async {
        let links = NetLinks::connect().expect("netlink");
        links
            .add_address(link, address.into(), 24)
            .await
            .expect("an address");
    })
    .expect("netns");
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_leave_the_vpc_as_the_node_and_keep_their_address_inside() {
    // The CiliumNode's VPC is 10.0.0.0/16 (support::cilium_node).
    let mut node = NodeNs::new(
        4,
        &[
            "--routing=false",
            "--snat=true",
            "--snat-exclude-cidrs=192.168.0.0/16",
        ],
    )
    .await;
    assert_eq!(
        agent_table(&node.ns),
        (0, vec![]),
        "no table before the agent"
    );
    let outside = network(&node, "out", NODE_OUTSIDE, OUTSIDE);
    let peer = network(&node, "peer", NODE_PEER, PEER);
    add_address(&node.ns, "out0", NODE_EXCLUDED);
    add_address(&outside, "out1", EXCLUDED);
    node.ns
        .run(|| std::fs::write("/proc/sys/net/ipv4/ip_forward", "1"))
        .expect("netns")
        .expect("forwarding on in the node");

    let mut agent = node.setup.start(Some(&node.ns));
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    let pod = NetNs::create_unique("ipam-pod").expect("a pod namespace");
    let added = node.cni(
        "ptp",
        "ADD",
        "pod-a",
        Some(&pod),
        &node.config("1.0.0", json!({})),
    );
    assert_ok(&added, "ADD");

    assert_eq!(
        source_seen(&pod, &outside, OUTSIDE),
        NODE_OUTSIDE,
        "beyond the VPC: the node's address"
    );
    assert_eq!(
        source_seen(&pod, &peer, PEER),
        POD,
        "inside the VPC: the pod's own"
    );
    assert_eq!(
        source_seen(&pod, &outside, EXCLUDED),
        POD,
        "an excluded range: the pod's own"
    );
    let (tables, rules) = agent_table(&node.ns);
    assert_eq!((tables, rules.len()), (1, 3), "{rules:#?}");
    // As nft reads them back: two ranges kept, the VPC masqueraded.
    let text: Vec<String> = rules.iter().map(Value::to_string).collect();
    for (rule, (field, address, length, action)) in text.iter().zip([
        ("daddr", "10.0.0.0", 16, "return"),
        ("daddr", "192.168.0.0", 16, "return"),
        ("saddr", "10.0.0.0", 16, "masquerade"),
    ]) {
        for part in [
            format!("\"field\":\"{field}\""),
            format!("\"addr\":\"{address}\",\"len\":{length}"),
            format!("\"{action}\":null"),
        ] {
            assert!(rule.contains(&part), "{part} in {rule}");
        }
    }
    let page = node.setup.metrics(Some(&node.ns));
    assert_eq!(
        metric(&page, "ipam_agent_snat_ranges{kind=\"masqueraded\"}"),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        metric(&page, "ipam_agent_snat_ranges{kind=\"kept\"}"),
        Some(2.0),
        "{page}"
    );

    // Restarts, killed or stopped: still one table, the same three rules.
    for round in 0..3 {
        if round % 2 == 0 {
            kill(&mut agent);
        } else {
            assert!(terminate(&mut agent).success());
        }
        agent = node.setup.start(Some(&node.ns));
        node.setup.wait_ready(Some(&node.ns), &mut agent);
        let (again_tables, again) = agent_table(&node.ns);
        assert_eq!((again_tables, &again), (1, &rules), "after restart {round}");
    }
    assert_eq!(
        source_seen(&pod, &outside, OUTSIDE),
        NODE_OUTSIDE,
        "after the restarts"
    );

    // The VPC gains a range (a secondary CIDR): the table follows.
    node.server.update(CILIUMNODES, NODE, |cilium_node| {
        cilium_node["status"]["eni"]["enis"]["eni-1"]["vpc"]["cidrs"] = json!(["100.64.0.0/16"]);
    });
    until("the table with the VPC's secondary range", || {
        let (_, rules) = agent_table(&node.ns);
        if rules.len() == 5 {
            Ok(())
        } else {
            Err(format!("{rules:#?}"))
        }
    })
    .await;

    // SNAT turned off: the next start removes the table, and the pod's
    // own address goes out as it is.
    kill(&mut agent);
    for flag in &mut node.setup.args {
        if flag == "--snat=true" {
            *flag = "--snat=false".into();
        }
    }
    agent = node.setup.start(Some(&node.ns));
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    assert_eq!(agent_table(&node.ns), (0, vec![]), "the table removed");
    assert_eq!(
        source_seen(&pod, &outside, OUTSIDE),
        POD,
        "no SNAT: the pod's own address"
    );
    kill(&mut agent);
}
