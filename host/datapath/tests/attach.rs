//! The program attached with tcx to a pod's host-side veth, on real
//! traffic from a pod namespace; the link pinned, reused by the next load
//! and removed by detach. Needs root: fails loudly without it.

mod support;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use aya::programs::{SchedClassifier, TcAttachType};
use ipam_datapath::{Attached, Datapath, DropReason, EndpointInfo, PinDir, ENDPOINTS_MAP};
use ipam_netns::{NetLinks, NetNs};
use support::raw_frame::send_raw_frame;
use support::*;

const HOST_END: &str = "pod0h";
const POD_END: &str = "pod0c";
const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const POD: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 7);
/// On the pod's interface, but not in the endpoint map: a spoofed source.
const SPOOFED: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 9);
const PORT: u16 = 40_123;

fn tcx_programs(ns: &NetNs) -> usize {
    ns.run(|| {
        SchedClassifier::query_tcx(HOST_END, TcAttachType::Ingress)
            .expect("querying tcx")
            .1
            .len()
    })
    .expect("entering the namespace")
}

/// Sends `count` datagrams from `source` in the pod namespace to the
/// gateway; returns how many the host namespace received.
fn send_from_pod(host: &NetNs, pod: &NetNs, source: Ipv4Addr, count: usize) -> usize {
    let receiver = host
        .run(|| {
            let socket = UdpSocket::bind((GATEWAY, PORT)).expect("binding on the host side");
            socket
                .set_read_timeout(Some(Duration::from_millis(300)))
                .expect("timeout");
            socket
        })
        .expect("entering the host namespace");
    pod.run(|| {
        let socket = UdpSocket::bind((source, 0)).expect("binding in the pod");
        for _ in 0..count {
            socket
                .send_to(b"datagram", SocketAddr::from((GATEWAY, PORT)))
                .expect("sending from the pod");
        }
    })
    .expect("entering the pod namespace");
    let mut received = 0;
    let mut buffer = [0u8; 64];
    while receiver.recv_from(&mut buffer).is_ok() {
        received += 1;
    }
    received
}

/// A host and a pod namespace joined by a veth pair: the pod holds POD and
/// SPOOFED, the host end the gateway. Returns the host end's ifindex.
fn pod_behind_veth() -> (NetNs, NetNs, u32) {
    let host = NetNs::create_unique("dp-host").expect("host namespace");
    let pod = NetNs::create_unique("dp-pod").expect("pod namespace");
    let ifindex = host
        .block_on(|| async {
            let links = NetLinks::connect().expect("netlink");
            let ifindex = links
                .add_veth(HOST_END, POD_END, Some(&pod))
                .await
                .expect("adding the veth pair");
            links
                .add_address(HOST_END, GATEWAY.into(), 24)
                .await
                .expect("gateway address");
            links.set_up(HOST_END).await.expect("host end up");
            ifindex
        })
        .expect("entering the host namespace");
    pod.block_on(|| async {
        let links = NetLinks::connect().expect("netlink");
        links.set_up("lo").await.expect("lo up");
        links.set_up(POD_END).await.expect("pod end up");
        for address in [POD, SPOOFED] {
            links
                .add_address(POD_END, address.into(), 24)
                .await
                .expect("pod address");
        }
    })
    .expect("entering the pod namespace");
    (host, pod, ifindex)
}

#[test]
fn attached_to_a_veth_it_passes_the_pods_own_traffic_and_drops_spoofed() {
    require_privileges();
    let bpffs = TestBpffs::mount("attach");
    let (host, pod, ifindex) = pod_behind_veth();

    let pins = PinDir::new(bpffs.path());
    let (first, attached) = host
        .run(|| {
            let (mut datapath, _) = Datapath::load(&object(), pins.clone()).expect("loading");
            datapath
                .set_endpoint(POD.into(), EndpointInfo::pod(ifindex, 1))
                .expect("writing the pod's endpoint");
            let attached = datapath.attach(HOST_END).expect("attaching");
            (datapath, attached)
        })
        .expect("entering the host namespace");
    assert_eq!(attached, (ifindex, Attached::NewLink));
    assert!(pins.link(ifindex).exists(), "the link was not pinned");
    assert_eq!(tcx_programs(&host), 1);

    assert_eq!(send_from_pod(&host, &pod, POD, 5), 5, "own source");
    assert_eq!(send_from_pod(&host, &pod, SPOOFED, 5), 0, "spoofed source");
    let counters = first
        .counters(ifindex)
        .expect("reading counters")
        .expect("counters of the pod's interface");
    // ARP (and possibly IPv6 neighbour discovery) passes too.
    assert!(counters.packets >= 5, "{counters:?}");
    assert_eq!(
        counters.dropped(DropReason::UnknownSource),
        5,
        "{counters:?}"
    );

    // Frames cut inside their IP header, which BPF_PROG_TEST_RUN refuses to
    // run, reach the program from a real interface: dropped as malformed.
    let host_mac = host
        .block_on(|| async {
            let links = NetLinks::connect().expect("netlink");
            links.mac(HOST_END).await.expect("reading the MAC")
        })
        .expect("entering the host namespace")
        .expect("the host end has a MAC");
    pod.block_on(|| async {
        let links = NetLinks::connect().expect("netlink");
        let pod_end = links.index(POD_END).await.expect("the pod end's index");
        for (ether_type, cut_at) in [(0x0800u16, 10), (0x86dd, 20)] {
            let mut frame = host_mac.to_vec();
            frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 7]);
            frame.extend_from_slice(&ether_type.to_be_bytes());
            frame.extend_from_slice(&ipv4_udp(POD.octets())[14..14 + cut_at]);
            send_raw_frame(pod_end, &frame).expect("sending a truncated frame");
        }
    })
    .expect("entering the pod namespace");
    // A frame sent on a veth is handled by the peer's tc program in the
    // receive path, which may run after the send returns: polled.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let after = loop {
        let counters = first
            .counters(ifindex)
            .expect("reading counters")
            .expect("counters of the pod's interface");
        if counters.dropped(DropReason::Malformed) >= 2 || std::time::Instant::now() > deadline {
            break counters;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(after.dropped(DropReason::Malformed), 2, "{after:?}");
    drop(first);

    // The pinned link outlives the loader, and the next load takes it over.
    assert_eq!(tcx_programs(&host), 1);
    assert_eq!(
        send_from_pod(&host, &pod, SPOOFED, 1),
        0,
        "spoofed, unowned link"
    );
    let second = host
        .run(|| {
            let (mut datapath, _) = Datapath::load(&object(), pins.clone()).expect("reloading");
            let attached = datapath.attach(HOST_END).expect("attaching again");
            assert_eq!(attached, (ifindex, Attached::ReplacedInPinnedLink));
            datapath
        })
        .expect("entering the host namespace");
    assert_eq!(
        tcx_programs(&host),
        1,
        "the link was duplicated, not reused"
    );
    assert_eq!(
        send_from_pod(&host, &pod, POD, 3),
        3,
        "own source after reload"
    );

    assert!(second.detach(ifindex).expect("detaching"));
    assert!(!second.detach(ifindex).expect("detaching twice"));
    // The kernel releases an unpinned link from a work queue, a moment later.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while tcx_programs(&host) != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the program is still attached 5 s after its link was unpinned"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        send_from_pod(&host, &pod, SPOOFED, 2),
        2,
        "no program, no check"
    );
}

#[test]
fn an_older_layouts_pins_go_once_this_builds_program_is_on() {
    require_privileges();
    let bpffs = TestBpffs::mount("older-layout");
    let (host, pod, ifindex) = pod_behind_veth();
    let pins = PinDir::new(bpffs.path());
    // What an older layout version leaves: its maps and its program's
    // pinned link in a folder of its own. Made here by moving this build's
    // link pin into such a folder.
    let older = bpffs.path().join("v1");
    assert_ne!(pins.path(), older.as_path(), "this build is layout 1");
    host.run(|| {
        let (mut datapath, _) = Datapath::load(&object(), pins.clone()).expect("loading");
        datapath
            .set_endpoint(POD.into(), EndpointInfo::pod(ifindex, 1))
            .expect("writing the pod's endpoint");
        datapath.attach(HOST_END).expect("attaching");
        std::fs::create_dir_all(older.join("links")).expect("the older folder");
        std::fs::rename(
            pins.link(ifindex),
            older.join("links").join(format!("tcx-ingress-{ifindex}")),
        )
        .expect("moving the link pin");
        std::fs::rename(pins.map(ENDPOINTS_MAP), older.join(ENDPOINTS_MAP))
            .expect("moving the endpoint map pin");
    })
    .expect("entering the host namespace");
    assert_eq!(tcx_programs(&host), 1);

    // This build comes up: a fresh endpoint map, its own link beside the
    // older one. Both programs pass the pod's own address.
    let datapath = host
        .run(|| {
            let (mut datapath, _) = Datapath::load(&object(), pins.clone()).expect("reloading");
            datapath
                .set_endpoint(POD.into(), EndpointInfo::pod(ifindex, 1))
                .expect("writing the pod's endpoint again");
            let attached = datapath.attach(HOST_END).expect("attaching again");
            assert_eq!(attached, (ifindex, Attached::NewLink));
            datapath
        })
        .expect("entering the host namespace");
    assert_eq!(tcx_programs(&host), 2);
    assert_eq!(send_from_pod(&host, &pod, POD, 3), 3, "own source, both on");

    let removed = pins.remove_other_versions().expect("removing older pins");
    assert_eq!(removed, std::slice::from_ref(&older));
    assert!(!older.exists());
    assert!(pins.path().exists(), "this build's own pins went too");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while tcx_programs(&host) != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the older program is still attached 5 s after its pins went"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(send_from_pod(&host, &pod, POD, 3), 3, "own source after");
    assert_eq!(send_from_pod(&host, &pod, SPOOFED, 2), 0, "spoofed after");
    assert_eq!(
        pins.remove_other_versions().expect("removing again"),
        Vec::<std::path::PathBuf>::new()
    );
    drop(datapath);
}
