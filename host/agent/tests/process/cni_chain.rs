//! The reference chain, as root in namespaces the test makes: ptp
//! (Debian's containernetworking-plugins, CNI 1.0.0) delegating to
//! ipam-cni, which asks the agent. A pod gets its address, reaches the host
//! side, has its policy routes; CHECK, DEL (twice) and GC behave as the
//! spec says.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

use ipam_netns::NetNs;
use serde_json::json;

use crate::node_ns::{assert_ok, json_out, NodeNs, POD_GATEWAY};
use crate::support::{kill, until_node};

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_gets_an_address_through_ptp_reaches_the_host_and_gives_it_back() {
    let node = NodeNs::new(4, &[]).await;
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
    let result = json_out(&added);
    assert_eq!(result["cniVersion"], "1.0.0");
    assert_eq!(result["ips"][0]["address"], "10.0.1.10/24");
    assert_eq!(result["ips"][0]["gateway"], POD_GATEWAY);

    // The pod reaches the host side of its veth (where ptp put the gateway).
    let listener = node
        .ns
        .run(|| TcpListener::bind((POD_GATEWAY, 0)))
        .expect("netns")
        .expect("listen on the gateway inside the node");
    let port = listener.local_addr().expect("address").port();
    let accepted = std::thread::spawn(move || {
        let (mut stream, peer) = listener.accept().expect("the pod connects");
        let mut hello = [0u8; 5];
        stream.read_exact(&mut hello).expect("read");
        (peer.ip().to_string(), hello)
    });
    pod.run(move || {
        let mut stream = TcpStream::connect_timeout(
            &(POD_GATEWAY.parse::<Ipv4Addr>().unwrap(), port).into(),
            Duration::from_secs(5),
        )
        .expect("the pod reaches the host side");
        stream.write_all(b"hello").expect("write");
    })
    .expect("netns");
    let (peer, hello) = accepted.join().expect("the accepting thread");
    assert_eq!(
        (peer.as_str(), &hello),
        ("10.0.1.10", b"hello"),
        "from the pod's own address"
    );

    // Its policy routes are in.
    assert_eq!(node.routed().await, ["10.0.1.10".parse().unwrap()].into());

    // CHECK with the ADD's result.
    let check = node.cni(
        "ptp",
        "CHECK",
        "pod-a",
        Some(&pod),
        &node.config("1.0.0", json!({"prevResult": result})),
    );
    assert_ok(&check, "CHECK");

    // DEL frees it (routes gone); DEL again succeeds.
    for round in 0..2 {
        let deleted = node.cni(
            "ptp",
            "DEL",
            "pod-a",
            Some(&pod),
            &node.config("1.0.0", json!({})),
        );
        assert_ok(&deleted, &format!("DEL #{round}"));
    }
    assert!(node.routed().await.is_empty(), "routes removed");
    let state = std::fs::read_to_string(node.setup.state_file()).expect("the state file");
    assert!(!state.contains("10.0.1.10"), "{state}");
    // CHECK of a container the agent does not know: error code 3.
    let unknown = node.cni(
        "ipam-cni",
        "CHECK",
        "pod-a",
        Some(&pod),
        &node.config("1.0.0", json!({"prevResult": result})),
    );
    assert!(!unknown.status.success());
    assert_eq!(json_out(&unknown)["code"], 3);
    kill(&mut agent);
}

#[tokio::test(flavor = "multi_thread")]
async fn gc_frees_what_is_not_in_the_valid_attachments() {
    let node = NodeNs::new(4, &[]).await;
    let mut agent = node.setup.start(Some(&node.ns));
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    let pods: Vec<NetNs> = (0..2)
        .map(|_| NetNs::create_unique("ipam-pod").expect("a pod namespace"))
        .collect();
    for (n, pod) in pods.iter().enumerate() {
        let added = node.cni(
            "ptp",
            "ADD",
            &format!("pod-{n}"),
            Some(pod),
            &node.config("1.0.0", json!({})),
        );
        assert_ok(&added, "ADD");
    }
    assert_eq!(node.routed().await.len(), 2);
    // GC (CNI 1.1.0; ptp 1.1 predates it, so the runtime's call reaches
    // the IPAM plugin directly here).
    let gc = node.cni(
        "ipam-cni",
        "GC",
        "",
        None,
        &node.config(
            "1.1.0",
            json!({"cni.dev/valid-attachments": [{"containerID": "pod-0", "ifname": "eth0"}]}),
        ),
    );
    assert_ok(&gc, "GC");
    let routed = node.routed().await;
    assert_eq!(
        routed,
        ["10.0.1.10".parse().unwrap()].into(),
        "pod-1's address freed"
    );
    // Freed in the saved allocations and in status.ipam.used too.
    let saved: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(node.setup.state_file()).expect("the state file"),
    )
    .expect("the state file is JSON");
    let containers: Vec<&str> = saved["allocations"]
        .as_array()
        .expect("allocations")
        .iter()
        .filter_map(|a| a["container-id"].as_str())
        .collect();
    assert_eq!(containers, ["pod-0"], "{saved}");
    until_node(
        &node.server,
        "status.ipam.used without pod-1's address",
        |n| {
            n["status"]["ipam"]["used"]
                .as_object()
                .is_some_and(|used| used.keys().eq(["10.0.1.10"].iter()))
        },
    )
    .await;
    let status = node.cni(
        "ipam-cni",
        "STATUS",
        "",
        None,
        &node.config("1.1.0", json!({})),
    );
    assert_ok(&status, "STATUS");
    kill(&mut agent);
    let down = node.cni(
        "ipam-cni",
        "STATUS",
        "",
        None,
        &node.config("1.1.0", json!({})),
    );
    assert_eq!(
        json_out(&down)["code"],
        50,
        "the agent is gone: plugin not available"
    );
}
