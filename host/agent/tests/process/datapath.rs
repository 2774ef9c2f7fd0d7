//! The eBPF datapath driven by the agent, as root in namespaces the test
//! makes, on a bpffs the test gives the agent (`--bpffs`, mounted by the
//! agent, unmounted by the test): a conflist of ptp (delegating to
//! ipam-cni) then ipam-cni as the chained datapath step. A pod's own
//! traffic passes and is counted, a spoofed source is dropped and counted;
//! a SIGKILLed and restarted agent drops not one packet of a running
//! stream; a pinned map with another layout is re-created at start and the
//! running pod's endpoint written into it again; an upgrade from an older
//! layout's pins drops no spoofed and loses no own datagram, and removes the
//! older pins only after this run's program is on the pod's interface.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aya::maps::{HashMap, MapData, MapInfo};
use aya::programs::{SchedClassifier, TcAttachType};
use ipam_agent::datapath::PIN_FOLDER;
use ipam_datapath::{MapLayout, PinDir, ENDPOINTS_MAP};
use ipam_netns::{NetLinks, NetNs};
use serde_json::{json, Value};

use crate::node_ns::{assert_ok, json_out, NodeNs, POD_GATEWAY};
use crate::support::{kill, metric, NODE};

pub const POD_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 10);
/// Put on the pod's interface by the test, never allocated: a spoofed source.
pub const SPOOFED: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 99);
/// Put on the node by the test after the agent started.
const HOST_ADDED: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 200);

/// The object `cargo xtask ebpf` builds; `IPAM_EBPF_OBJECT` names it when
/// xtask runs the tests.
pub fn ebpf_object() -> PathBuf {
    let path = std::env::var_os("IPAM_EBPF_OBJECT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ebpf/agent-ebpf.o")
        });
    assert!(
        path.exists(),
        "the eBPF object {} is missing: build it with `cargo xtask ebpf` or set IPAM_EBPF_OBJECT",
        path.display()
    );
    path
}

/// A folder the agent mounts bpffs on (or the test, with `mounted`);
/// unmounted and removed on drop, so the test's pins never meet the host's.
pub struct TestBpffs(PathBuf);

impl TestBpffs {
    pub fn new(name: &str) -> Self {
        Self(std::env::temp_dir().join(format!("ipam-agent-{name}-{}", std::process::id())))
    }

    /// One the test mounts itself, as the node does for a DaemonSet's agent,
    /// which cannot mount without CAP_SYS_ADMIN.
    pub fn mounted(name: &str) -> Self {
        let bpffs = Self::new(name);
        std::fs::create_dir_all(&bpffs.0)
            .unwrap_or_else(|e| panic!("creating {}: {e}", bpffs.0.display()));
        rustix::mount::mount(
            "bpffs",
            &bpffs.0,
            "bpf",
            rustix::mount::MountFlags::empty(),
            None,
        )
        .unwrap_or_else(|e| panic!("mounting bpffs on {}: {e}", bpffs.0.display()));
        bpffs
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn pins(&self) -> PinDir {
        PinDir::new(self.0.join(PIN_FOLDER))
    }
}

impl Drop for TestBpffs {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
        let _ = std::fs::remove_dir(&self.0);
    }
}

pub async fn datapath_node(bpffs: &TestBpffs) -> NodeNs {
    let object = format!("--datapath-object={}", ebpf_object().display());
    let folder = format!("--bpffs={}", bpffs.0.display());
    NodeNs::new(4, &[&object, &folder, "--host-address-sync-secs=1"]).await
}

/// The conflist's ADD: ptp (with ipam-cni as its IPAM), then ipam-cni
/// chained with ptp's result; returns that result (which the datapath
/// step prints unchanged).
pub fn add_pod(node: &NodeNs, container: &str, pod: &NetNs) -> Value {
    // The pod exists, so a restarted agent keeps its address.
    node.server.put(
        "/api/v1/pods",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": container, "namespace": "default"},
               "spec": {"nodeName": NODE, "containers": []}}),
    );
    let added = node.cni(
        "ptp",
        "ADD",
        container,
        Some(pod),
        &node.config("1.0.0", json!({})),
    );
    assert_ok(&added, "ptp ADD");
    let result = json_out(&added);
    let chained = node.cni(
        "ipam-cni",
        "ADD",
        container,
        Some(pod),
        &datapath_step(node, Some(&result)),
    );
    assert_ok(&chained, "datapath step ADD");
    assert_eq!(
        json_out(&chained),
        result,
        "the prevResult passes unchanged"
    );
    result
}

/// The conflist's DEL, in libcni's order: the chained step first.
pub fn del_pod(node: &NodeNs, container: &str, pod: &NetNs, result: &Value) {
    let chained = node.cni(
        "ipam-cni",
        "DEL",
        container,
        Some(pod),
        &datapath_step(node, Some(result)),
    );
    assert_ok(&chained, "datapath step DEL");
    let del = node.cni(
        "ptp",
        "DEL",
        container,
        Some(pod),
        &node.config("1.0.0", json!({"prevResult": result})),
    );
    assert_ok(&del, "ptp DEL");
}

fn datapath_step(node: &NodeNs, prev: Option<&Value>) -> Value {
    let mut config = json!({"cniVersion": "1.0.0", "name": "ipam-test", "type": "ipam-cni",
                            "socket": node.setup.socket()});
    if let Some(prev) = prev {
        config["prevResult"] = prev.clone();
    }
    config
}

/// ptp's host-side veth in a result.
pub fn host_veth(result: &Value) -> String {
    result["interfaces"]
        .as_array()
        .and_then(|interfaces| interfaces.iter().find(|i| i.get("sandbox").is_none()))
        .and_then(|i| i["name"].as_str())
        .unwrap_or_else(|| panic!("no host-side interface in {result}"))
        .to_string()
}

fn metric_or_zero(page: &str, name: &str) -> f64 {
    metric(page, name).unwrap_or(0.0)
}

/// A UDP socket on the gateway inside the node, where the pod's traffic goes.
fn receiver(node: &NodeNs) -> UdpSocket {
    let socket = node
        .ns
        .run(|| UdpSocket::bind((POD_GATEWAY.parse::<Ipv4Addr>().expect("gateway"), 0)))
        .expect("netns")
        .expect("bind on the gateway inside the node");
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    socket
}

/// A UDP socket in the pod bound to `source`.
fn sender(pod: &NetNs, source: Ipv4Addr) -> UdpSocket {
    pod.run(move || UdpSocket::bind((source, 0)))
        .expect("netns")
        .unwrap_or_else(|e| panic!("bind {source} in the pod: {e}"))
}

/// Sends `count` datagrams from `source`; how many arrived.
pub fn send(pod: &NetNs, node: &NodeNs, source: Ipv4Addr, count: usize) -> usize {
    let receiver = receiver(node);
    let to = receiver.local_addr().expect("address");
    let sender = sender(pod, source);
    for _ in 0..count {
        sender.send_to(b"datagram", to).expect("send from the pod");
    }
    let mut received = 0;
    let mut buffer = [0u8; 64];
    while receiver.recv_from(&mut buffer).is_ok() {
        received += 1;
    }
    received
}

fn tcx_program_ids(node: &NodeNs, interface: &str) -> Vec<u32> {
    let interface = interface.to_string();
    node.ns
        .run(move || {
            SchedClassifier::query_tcx(&interface, TcAttachType::Ingress)
                .expect("querying tcx")
                .1
                .iter()
                .map(|program| program.id())
                .collect()
        })
        .expect("netns")
}

/// An interface's ifindex in the node.
pub fn ifindex(node: &NodeNs, interface: &str) -> u32 {
    node.ns
        .block_on(|| async {
            let links = NetLinks::connect().expect("netlink");
            links.index(interface).await.expect("the veth's index")
        })
        .expect("netns")
}

/// Puts the test's own extra address, SPOOFED (not the pod's), on the
/// pod's interface.
pub fn spoof(pod: &NetNs) {
    pod.block_on(|| async {
        let links = NetLinks::connect().expect("netlink");
        links
            .add_address("eth0", SPOOFED.into(), 32)
            .await
            .expect("a second address in the pod");
    })
    .expect("netns");
}

pub fn tcx_programs(node: &NodeNs, interface: &str) -> usize {
    tcx_program_ids(node, interface).len()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chained_pod_is_held_to_its_own_address_and_counted() {
    let bpffs = TestBpffs::new("e2e");
    let node = datapath_node(&bpffs).await;
    let mut agent = node.setup.start(Some(&node.ns));
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    let pod = NetNs::create_unique("ipam-pod").expect("a pod namespace");

    let result = add_pod(&node, "pod-a", &pod);
    assert_eq!(result["ips"][0]["address"], "10.0.1.10/24");
    let veth = host_veth(&result);
    assert_eq!(tcx_programs(&node, &veth), 1, "the program is on {veth}");
    let ifindex = ifindex(&node, &veth);
    assert!(bpffs.pins().link(ifindex).exists(), "the link is pinned");
    spoof(&pod);

    let before = node.setup.metrics(Some(&node.ns));
    assert_eq!(send(&pod, &node, POD_ADDRESS, 5), 5, "own source passes");
    assert_eq!(send(&pod, &node, SPOOFED, 5), 0, "spoofed source dropped");
    let after = node.setup.metrics(Some(&node.ns));
    let packets = metric_or_zero(&after, "ipam_agent_datapath_packets_total")
        - metric_or_zero(&before, "ipam_agent_datapath_packets_total");
    assert!(packets >= 5.0, "packets counted: {packets}\n{after}");
    assert!(
        metric_or_zero(&after, "ipam_agent_datapath_bytes_total") > 0.0,
        "{after}"
    );
    let spoofed = r#"ipam_agent_datapath_drops_total{reason="unknown_source"}"#;
    assert_eq!(
        metric_or_zero(&after, spoofed) - metric_or_zero(&before, spoofed),
        5.0,
        "{after}"
    );
    assert_eq!(
        metric(&after, "ipam_agent_datapath_maps_recreated_total"),
        Some(0.0),
        "{after}"
    );
    assert_eq!(
        metric(
            &after,
            r#"ipam_agent_cni_requests_total{command="ATTACH",result="ok"}"#
        ),
        Some(1.0),
        "{after}"
    );

    // An address the node gains is synced as the host's within a second or
    // two (polled, one datagram at a time, until one is dropped as
    // host_source); from then on a pod sending from it is dropped so.
    node.ns
        .block_on(|| async {
            let links = NetLinks::connect().expect("netlink");
            links
                .add_address("eni1", HOST_ADDED.into(), 32)
                .await
                .expect("a new address on the node");
        })
        .expect("netns");
    pod.block_on(|| async {
        let links = NetLinks::connect().expect("netlink");
        links
            .add_address("eth0", HOST_ADDED.into(), 32)
            .await
            .expect("the node's address in the pod");
    })
    .expect("netns");
    let host_source = r#"ipam_agent_datapath_drops_total{reason="host_source"}"#;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        send(&pod, &node, HOST_ADDED, 1);
        let page = node.setup.metrics(Some(&node.ns));
        if metric_or_zero(&page, host_source) >= 1.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the node's new address was never synced as the host's: {page}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = metric_or_zero(&node.setup.metrics(Some(&node.ns)), host_source);
    assert_eq!(send(&pod, &node, HOST_ADDED, 2), 0, "host source dropped");
    let page = node.setup.metrics(Some(&node.ns));
    assert_eq!(metric_or_zero(&page, host_source) - before, 2.0, "{page}");

    // The datapath step refuses an address that is not the attachment's.
    let mut forged = result.clone();
    forged["ips"][0]["address"] = json!("10.0.1.11/24");
    let refused = node.cni(
        "ipam-cni",
        "ADD",
        "pod-a",
        Some(&pod),
        &datapath_step(&node, Some(&forged)),
    );
    assert!(!refused.status.success(), "a forged address was attached");
    assert_eq!(json_out(&refused)["code"], 101);

    // DEL detaches (the pin goes at once, the program when the kernel
    // releases the link or ptp deletes the veth); a second DEL is fine.
    del_pod(&node, "pod-a", &pod, &result);
    assert!(!bpffs.pins().link(ifindex).exists(), "the link pin stays");
    del_pod(&node, "pod-a", &pod, &result);
    let counted = metric_or_zero(
        &node.setup.metrics(Some(&node.ns)),
        "ipam_agent_datapath_packets_total",
    );
    assert!(
        counted >= packets,
        "the detached endpoint's counts stay in the sums: {counted} < {packets}"
    );
    kill(&mut agent);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_agent_drops_not_one_packet_of_a_running_stream() {
    let bpffs = TestBpffs::new("restart");
    let node = datapath_node(&bpffs).await;
    let mut agent = node.setup.start(Some(&node.ns));
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    let pod = NetNs::create_unique("ipam-pod").expect("a pod namespace");
    let result = add_pod(&node, "pod-s", &pod);
    let veth = host_veth(&result);

    let receiver = receiver(&node);
    let to: SocketAddr = receiver.local_addr().expect("address");
    let sender = sender(&pod, POD_ADDRESS);
    let sending = std::thread::spawn(move || {
        let mut sent = 0u64;
        let until = Instant::now() + Duration::from_secs(4);
        while Instant::now() < until {
            sender
                .send_to(&sent.to_be_bytes(), to)
                .expect("send from the pod");
            sent += 1;
            std::thread::sleep(Duration::from_micros(500));
        }
        (sent, Instant::now())
    });
    let receiving = std::thread::spawn(move || {
        let mut received = std::collections::BTreeSet::new();
        let mut buffer = [0u8; 16];
        // Ends 500 ms after the last datagram.
        while let Ok((length, _)) = receiver.recv_from(&mut buffer) {
            if length == 8 {
                let mut number = [0u8; 8];
                number.copy_from_slice(&buffer[..8]);
                received.insert(u64::from_be_bytes(number));
            }
        }
        received
    });

    std::thread::sleep(Duration::from_millis(800));
    kill(&mut agent);
    std::thread::sleep(Duration::from_millis(300));
    let mut agent = node.setup.start(Some(&node.ns));
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    let ready_at = Instant::now();

    let (sent, stream_ended) = sending.join().expect("the sending thread");
    assert!(
        ready_at < stream_ended,
        "the restarted agent was ready only after the stream ended: nothing was tested across it"
    );
    let received = receiving.join().expect("the receiving thread");
    let missing: Vec<u64> = (0..sent).filter(|n| !received.contains(n)).collect();
    let page = node.setup.metrics(Some(&node.ns));
    assert!(sent > 1000, "the stream was too thin: {sent}");
    assert!(
        missing.is_empty(),
        "{} of {sent} datagrams lost across the restart, first {:?}; the agent's metrics:\n{page}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );

    assert_eq!(
        metric(&page, "ipam_agent_datapath_maps_recreated_total"),
        Some(0.0),
        "the pinned maps were reused: {page}"
    );
    assert_eq!(
        metric(
            &page,
            r#"ipam_agent_datapath_drops_total{reason="unknown_source"}"#
        ),
        Some(0.0),
        "{page}"
    );
    let packets = metric_or_zero(&page, "ipam_agent_datapath_packets_total");
    assert!(
        packets >= sent as f64,
        "the reused counters hold the whole stream: {packets} < {sent}"
    );
    assert_eq!(
        tcx_programs(&node, &veth),
        1,
        "the pinned link was reused, not doubled"
    );
    assert_eq!(send(&pod, &node, POD_ADDRESS, 3), 3, "after the restart");
    del_pod(&node, "pod-s", &pod, &result);
    kill(&mut agent);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pinned_map_with_another_layout_is_recreated_and_its_endpoints_written_again() {
    let bpffs = TestBpffs::new("layout");
    let node = datapath_node(&bpffs).await;
    let mut agent = node.setup.start(Some(&node.ns));
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    let pod = NetNs::create_unique("ipam-pod").expect("a pod namespace");
    let result = add_pod(&node, "pod-l", &pod);
    let veth = host_veth(&result);
    let before = tcx_program_ids(&node, &veth);
    let saved = std::fs::read_to_string(node.setup.state_file()).expect("the state file");
    assert!(
        saved.contains(&format!(r#""host-ifname":"{veth}""#)),
        "the veth is saved with the allocation: {saved}"
    );
    kill(&mut agent);

    // While the agent is down, what a build with a 16-byte endpoint value
    // would have left at the map's pin.
    let pins = bpffs.pins();
    std::fs::remove_file(pins.map(ENDPOINTS_MAP)).expect("unpinning the endpoint map");
    let expected = MapLayout::ENDPOINTS;
    let older: HashMap<MapData, [u8; 20], [u8; 16]> =
        HashMap::create(expected.max_entries, 0).expect("creating the older map");
    older
        .pin(pins.map(ENDPOINTS_MAP))
        .expect("pinning the older map");

    let mut agent = node.setup.start(Some(&node.ns));
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    let page = node.setup.metrics(Some(&node.ns));
    assert_eq!(
        metric(&page, "ipam_agent_datapath_maps_recreated_total"),
        Some(1.0),
        "{page}"
    );
    let info = MapInfo::from_pin(pins.map(ENDPOINTS_MAP)).expect("the new pin");
    assert_eq!(info.value_size(), expected.value_size);

    // The link runs this run's program, over the re-created map, which
    // holds the pod again: its own traffic passes, a spoofed source does not.
    let after = tcx_program_ids(&node, &veth);
    assert_eq!(after.len(), 1, "one program on {veth}: {after:?}");
    assert_ne!(
        after, before,
        "the pinned link still runs the older program"
    );
    assert_eq!(send(&pod, &node, POD_ADDRESS, 3), 3, "own source passes");
    spoof(&pod);
    assert_eq!(send(&pod, &node, SPOOFED, 2), 0, "spoofed source dropped");
    del_pod(&node, "pod-l", &pod, &result);
    kill(&mut agent);
}

/// Sends from `source` in the pod every 200 µs for `length`; how many it
/// sent and the datagrams that arrived (by number).
fn stream(
    pod: &NetNs,
    node: &NodeNs,
    source: Ipv4Addr,
    length: Duration,
) -> std::thread::JoinHandle<(u64, std::collections::BTreeSet<u64>)> {
    let receiver = receiver(node);
    let to: SocketAddr = receiver.local_addr().expect("address");
    let sender = sender(pod, source);
    std::thread::spawn(move || {
        let receiving = std::thread::spawn(move || {
            let mut received = std::collections::BTreeSet::new();
            let mut buffer = [0u8; 16];
            while let Ok((8, _)) = receiver.recv_from(&mut buffer) {
                let mut number = [0u8; 8];
                number.copy_from_slice(&buffer[..8]);
                received.insert(u64::from_be_bytes(number));
            }
            received
        });
        let mut sent = 0u64;
        let until = Instant::now() + length;
        while Instant::now() < until {
            sender
                .send_to(&sent.to_be_bytes(), to)
                .expect("send from the pod");
            sent += 1;
            std::thread::sleep(Duration::from_micros(200));
        }
        (sent, receiving.join().expect("the receiving thread"))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_from_another_layout_leaves_no_pod_unchecked_and_the_older_pins_go_after() {
    let bpffs = TestBpffs::new("upgrade");
    let node = datapath_node(&bpffs).await;
    let mut agent = node.setup.start(Some(&node.ns));
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    let pod = NetNs::create_unique("ipam-pod").expect("a pod namespace");
    let result = add_pod(&node, "pod-u", &pod);
    let veth = host_veth(&result);
    let older_program = tcx_program_ids(&node, &veth);
    kill(&mut agent);

    // What an older build with another map layout leaves while it is
    // replaced: its maps and its program's pinned link in its own
    // `v<N>` folder; its program still checks the pod.
    let pins = bpffs.pins();
    let older = pins.path().parent().expect("the pin base").join("v1");
    assert_ne!(pins.path(), older.as_path(), "this build is layout 1");
    std::fs::rename(pins.path(), &older).expect("renaming this build's pins to an older layout's");
    spoof(&pod);
    assert_eq!(
        send(&pod, &node, SPOOFED, 2),
        0,
        "the older program drops a spoofed source"
    );

    // Spoofed and own traffic flow while the new build starts: no spoofed
    // datagram passes and the pod's own all do. (The kernel detaches an
    // unpinned link from a work queue, after the new link is usually on,
    // so the streams cannot tell the agent's order: its log does, below.)
    let spoofed = stream(&pod, &node, SPOOFED, Duration::from_secs(4));
    let own = stream(&pod, &node, POD_ADDRESS, Duration::from_secs(4));
    std::thread::sleep(Duration::from_millis(500));
    let log_path = bpffs.0.with_extension("log");
    let log = std::fs::File::create(&log_path).expect("the agent's log file");
    let mut agent = node
        .setup
        .start_through(Some(&node.ns), &[], std::process::Stdio::from(log));
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    let ready_at = Instant::now();
    let (spoofed_sent, spoofed_passed) = spoofed.join().expect("the spoofed stream");
    let (own_sent, own_passed) = own.join().expect("the pod's own stream");
    assert!(
        ready_at + Duration::from_millis(500) < Instant::now(),
        "the new agent was ready only as the streams ended: nothing was tested across the switch"
    );
    assert!(
        spoofed_sent > 1000 && own_sent > 1000,
        "thin streams: {spoofed_sent}, {own_sent}"
    );
    assert!(
        spoofed_passed.is_empty(),
        "{} of {spoofed_sent} spoofed datagrams passed during the upgrade, first {:?}",
        spoofed_passed.len(),
        spoofed_passed.iter().take(10).collect::<Vec<_>>()
    );
    let lost: Vec<u64> = (0..own_sent).filter(|n| !own_passed.contains(n)).collect();
    assert!(
        lost.is_empty(),
        "{} of {own_sent} of the pod's own datagrams lost, first {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );

    assert!(
        !older.exists(),
        "the older layout's pins are still at {}",
        older.display()
    );
    let log = std::fs::read_to_string(&log_path).expect("the agent's log");
    let _ = std::fs::remove_file(&log_path);
    let line_of = |text: &str| log.lines().position(|line| line.contains(text));
    let restored = line_of("endpoint restored")
        .unwrap_or_else(|| panic!("no endpoint restored in the agent's log:\n{log}"));
    let removed = line_of("pins of another map layout removed")
        .unwrap_or_else(|| panic!("the older pins' removal is not in the agent's log:\n{log}"));
    assert!(
        restored < removed
            && log
                .lines()
                .nth(restored)
                .is_some_and(|line| line.contains(&veth)),
        "the older layout's pins went before this build's program was on {veth}:\n{log}"
    );
    let now = tcx_program_ids(&node, &veth);
    assert_eq!(now.len(), 1, "only this build's program on {veth}: {now:?}");
    assert_ne!(now, older_program, "{veth} still runs the older program");
    assert_eq!(
        send(&pod, &node, SPOOFED, 2),
        0,
        "spoofed source dropped after"
    );
    assert_eq!(
        send(&pod, &node, POD_ADDRESS, 3),
        3,
        "own source passes after"
    );
    del_pod(&node, "pod-u", &pod, &result);
    kill(&mut agent);
}
