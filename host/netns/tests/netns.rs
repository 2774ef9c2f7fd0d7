//! Needs root: every test calls `require_root`, which fails loudly without it.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use ipam_netns::{require_root, NetLinks, NetNs, NetnsError};

fn own_netns_inode() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net")
        .expect("reading this thread's network namespace")
        .ino()
}

#[test]
fn a_namespace_is_mounted_by_name_and_gone_after_drop() {
    require_root();
    let ns = NetNs::create_unique("netns-test").expect("creating a namespace");
    let path: PathBuf = ns.path().to_owned();
    assert!(path.starts_with("/run/netns"), "{}", path.display());
    assert!(path.exists());

    let outside = own_netns_inode();
    let inside = ns.run(own_netns_inode).expect("running inside");
    assert_ne!(inside, outside, "the closure ran in the caller's namespace");
    // The caller's thread did not move.
    assert_eq!(own_netns_inode(), outside);
    // Entering twice lands in the same namespace.
    assert_eq!(
        ns.run(own_netns_inode).expect("running inside again"),
        inside
    );

    drop(ns);
    assert!(!path.exists(), "{} is left after drop", path.display());
}

#[test]
fn a_taken_name_or_a_path_for_a_name_is_refused() {
    require_root();
    let ns = NetNs::create_unique("netns-taken").expect("creating a namespace");
    match NetNs::create(ns.name()) {
        Err(NetnsError::Exists { path }) => assert_eq!(path, ns.path()),
        other => panic!("expected Exists, got {other:?}"),
    }
    // The refused second create must not have removed the first.
    assert!(ns.path().exists());
    assert!(matches!(
        NetNs::create("../etc"),
        Err(NetnsError::InvalidName { .. })
    ));
}

#[test]
fn a_panic_inside_the_namespace_reaches_the_caller() {
    require_root();
    let ns = NetNs::create_unique("netns-panic").expect("creating a namespace");
    let caught = std::panic::catch_unwind(|| ns.run(|| panic!("inside")));
    assert!(caught.is_err());
}

#[test]
fn a_new_namespace_has_only_loopback_and_links_made_there_stay_there() {
    require_root();
    let ns = NetNs::create_unique("netns-links").expect("creating a namespace");
    let mac = [0x02, 0, 0, 0, 0, 0x11];
    let (mac_seen, up_before, up_after) = ns
        .block_on(|| async move {
            let links = NetLinks::connect().expect("connecting to netlink");
            assert!(links.index("lo").await.is_ok());
            links
                .add_veth("eni-test", "eni-peer", None)
                .await
                .expect("adding a veth pair");
            links
                .set_mac("eni-test", mac)
                .await
                .expect("setting the MAC");
            let up_before = links.is_up("eni-test").await.expect("reading flags");
            links.set_up("eni-test").await.expect("setting up");
            let up_after = links.is_up("eni-test").await.expect("reading flags");
            links
                .add_address("eni-test", IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 24)
                .await
                .expect("adding an address");
            let mac_seen = links.mac("eni-test").await.expect("reading the MAC");
            (mac_seen, up_before, up_after)
        })
        .expect("running inside");
    assert_eq!(mac_seen, Some(mac));
    assert!(!up_before);
    assert!(up_after);

    // Another namespace does not see it.
    let other = NetNs::create_unique("netns-links-other").expect("creating a namespace");
    let seen_there = other
        .block_on(|| async {
            let links = NetLinks::connect().expect("connecting to netlink");
            links.index("eni-test").await
        })
        .expect("running inside");
    assert!(
        matches!(seen_there, Err(NetnsError::LinkNotFound { .. })),
        "{seen_there:?}"
    );
}

#[test]
fn a_veth_pair_joins_two_namespaces_and_carries_traffic() {
    require_root();
    let host = NetNs::create_unique("netns-veth-host").expect("creating a namespace");
    let pod = NetNs::create_unique("netns-veth-pod").expect("creating a namespace");
    let host_ip = Ipv4Addr::new(192, 0, 2, 1);
    let pod_ip = Ipv4Addr::new(192, 0, 2, 2);
    let pod_mac = [0x02, 0, 0, 0, 0, 0x22];

    host.block_on(|| async {
        let links = NetLinks::connect().expect("connecting to netlink");
        links
            .add_veth("veth-host", "veth-pod", Some(&pod))
            .await
            .expect("adding a veth pair");
        links
            .add_address("veth-host", host_ip.into(), 24)
            .await
            .expect("address");
        links.set_up("veth-host").await.expect("up");
        assert!(
            links.index("veth-pod").await.is_err(),
            "the peer stayed in the host namespace"
        );
    })
    .expect("running in host");
    pod.block_on(|| async {
        let links = NetLinks::connect().expect("connecting to netlink");
        links
            .set_mac("veth-pod", pod_mac)
            .await
            .expect("setting the MAC");
        assert_eq!(links.mac("veth-pod").await.expect("mac"), Some(pod_mac));
        links
            .add_address("veth-pod", pod_ip.into(), 24)
            .await
            .expect("address");
        links.set_up("veth-pod").await.expect("up");
    })
    .expect("running in pod");

    // A UDP datagram from the pod namespace reaches a socket in the host one.
    let receiver = host
        .run(|| std::net::UdpSocket::bind((host_ip, 0)))
        .expect("running in host")
        .expect("binding in host");
    receiver
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    let to = receiver.local_addr().expect("local address");
    pod.run(|| {
        let sender = std::net::UdpSocket::bind((pod_ip, 0)).expect("binding in pod");
        sender.send_to(b"over the veth", to).expect("sending");
    })
    .expect("running in pod");
    let mut buf = [0u8; 32];
    let (n, from) = receiver
        .recv_from(&mut buf)
        .expect("receiving over the veth");
    assert_eq!(&buf[..n], b"over the veth");
    assert_eq!(from.ip(), IpAddr::V4(pod_ip));
}

#[tokio::test]
async fn a_future_runs_inside_without_blocking_the_callers_runtime() {
    require_root();
    let ns = NetNs::create_unique("netns-future").expect("creating a namespace");
    let outside = own_netns_inode();
    let inside = ns
        .run_future(|| async { own_netns_inode() })
        .await
        .expect("running inside");
    assert_ne!(inside, outside);
}

#[test]
fn outside_programs_enter_the_namespace_by_its_name() {
    require_root();
    let ns = NetNs::create_unique("netns-ip").expect("creating a namespace");
    ns.block_on(|| async {
        let links = NetLinks::connect().expect("connecting to netlink");
        links
            .add_veth("seen-by-ip", "seen-peer", None)
            .await
            .expect("adding a veth pair");
    })
    .expect("running inside");
    let output = std::process::Command::new("ip")
        .args(["-netns", ns.name(), "-o", "link", "show", "seen-by-ip"])
        .output()
        .expect("this test needs iproute2's `ip` on PATH (apt-get install iproute2)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("seen-by-ip@seen-peer"));
}
