//! The datapath with the DaemonSet's privileges and nothing more (deploy/:
//! root, `capabilities: {drop: [ALL], add: [BPF, NET_ADMIN]}`,
//! `allowPrivilegeEscalation: false`). The agent is started through
//! util-linux's setpriv as runc starts such a container: bounding set BPF
//! and NET_ADMIN (root executing the agent then holds exactly those,
//! permitted and effective), nothing inheritable or ambient, no_new_privs.
//! bpffs is mounted by the test beforehand, as the node has it: the agent
//! could not mount one without CAP_SYS_ADMIN. A pod's attach through the
//! CNI chain loads, pins and writes what it should, a restart reuses the
//! pins, DEL detaches; without the node's bpffs the agent cannot mount
//! one; with either of the two capabilities taken away it cannot load the
//! datapath, for the reason that capability answers:
//!
//! - BPF: creating the maps and loading the program (without it bpf(2) is
//!   refused altogether where kernel.unprivileged_bpf_disabled is set, and
//!   a tc program is refused anyway);
//! - NET_ADMIN: loading a program of the tc type (BPF_PROG_TYPE_SCHED_CLS)
//!   and attaching it, besides the agent's routes.
//!
//! No PERFMON: without it the verifier applies its Spectre v1 mitigation
//! (no `bypass_spec_v1`) and refuses pointer arithmetic whose bounds differ
//! between the paths it explores, "pointer arithmetic with it prohibited
//! for !root", such as a compiler-emitted loop zeroing a value on the stack
//! at variable offsets. The program has no such variable-offset stack
//! arithmetic (a new interface entry is inserted from a static, keys are
//! built from words), so the two suffice. Holding the agent to exactly
//! these two here is what catches a program change that would need
//! PERFMON again: its load would fail in the first test.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use ipam_datapath::ENDPOINTS_MAP;
use ipam_netns::NetNs;

use crate::datapath::{
    add_pod, datapath_node, del_pod, host_veth, ifindex, send, spoof, tcx_programs, TestBpffs,
    POD_ADDRESS, SPOOFED,
};
use crate::node_ns::NodeNs;
use crate::support::{kill, metric, Running};

/// util-linux's; Debian's `util-linux` package.
const SETPRIV: &str = "/usr/bin/setpriv";
/// What the DaemonSet adds for the datapath, by setpriv's names, with
/// their bits (linux/capability.h).
const DATAPATH_CAPABILITIES: [(&str, u32); 2] = [("bpf", 39), ("net_admin", 12)];

/// setpriv's arguments for a root container holding `capabilities` (its
/// names: `bpf`, `net_admin`, ...) and nothing else.
fn container_privileges(capabilities: &[&str]) -> Vec<String> {
    assert!(
        Path::new(SETPRIV).exists(),
        "{SETPRIV} is missing: install util-linux (Debian's util-linux package)"
    );
    let added: String = capabilities.iter().map(|c| format!(",+{c}")).collect();
    vec![
        SETPRIV.into(),
        "--no-new-privs".into(),
        "--inh-caps=-all".into(),
        format!("--bounding-set=-all{added}"),
    ]
}

/// The agent with `capabilities` alone, its log going to `logs`.
fn start(node: &NodeNs, capabilities: &[&str], logs: Stdio) -> Running {
    let launcher = container_privileges(capabilities);
    let launcher: Vec<&str> = launcher.iter().map(String::as_str).collect();
    node.setup.start_through(Some(&node.ns), &launcher, logs)
}

/// The capability sets and no_new_privs of a running process, as
/// /proc/PID/status shows them (hex masks).
fn privileges(pid: u32) -> BTreeMap<String, String> {
    let path = format!("/proc/{pid}/status");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .filter(|line| line.starts_with("Cap") || line.starts_with("NoNewPrivs"))
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_string(), value.trim().to_string()))
        .collect()
}

/// What a root container with the datapath's capabilities added to
/// `drop: [ALL]` and no privilege escalation runs with.
fn expected_privileges() -> BTreeMap<String, String> {
    let mask = DATAPATH_CAPABILITIES
        .iter()
        .fold(0u64, |mask, (_, bit)| mask | 1u64 << bit);
    let held = format!("{mask:016x}");
    let none = format!("{:016x}", 0);
    [
        ("CapInh", &none),
        ("CapPrm", &held),
        ("CapEff", &held),
        ("CapBnd", &held),
        ("CapAmb", &none),
        ("NoNewPrivs", &"1".to_string()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), value.clone()))
    .collect()
}

fn datapath_capabilities() -> Vec<&'static str> {
    DATAPATH_CAPABILITIES
        .iter()
        .map(|(name, _)| *name)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn bpf_and_net_admin_are_all_the_datapath_needs() {
    let bpffs = TestBpffs::mounted("caps");
    let node = datapath_node(&bpffs).await;
    // Its log on the test's output: a failure to start says why there.
    let mut agent = start(&node, &datapath_capabilities(), Stdio::inherit());
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    assert_eq!(
        privileges(agent.id()),
        expected_privileges(),
        "the agent runs with the datapath's capabilities alone"
    );
    assert!(
        bpffs.pins().map(ENDPOINTS_MAP).exists(),
        "the program is loaded with its maps pinned"
    );

    // A pod through the conflist's chain: ptp (ipam-cni as its IPAM), then
    // the datapath step, which has the agent attach and write the endpoint.
    let pod = NetNs::create_unique("ipam-pod").expect("a pod namespace");
    let result = add_pod(&node, "pod-c", &pod);
    let veth = host_veth(&result);
    assert_eq!(tcx_programs(&node, &veth), 1, "the program is on {veth}");
    let ifindex = ifindex(&node, &veth);
    assert!(bpffs.pins().link(ifindex).exists(), "the link is pinned");
    let saved = std::fs::read_to_string(node.setup.state_file()).expect("the state file");
    assert!(
        saved.contains(&format!(r#""host-ifname":"{veth}""#)),
        "the attach is saved: {saved}"
    );
    // The endpoint is written: the pod's own address passes (an address
    // missing from the endpoint map is dropped as unknown_source), another
    // one on its interface does not.
    spoof(&pod);
    assert_eq!(send(&pod, &node, POD_ADDRESS, 3), 3, "own source passes");
    assert_eq!(send(&pod, &node, SPOOFED, 3), 0, "spoofed source dropped");
    let page = node.setup.metrics(Some(&node.ns));
    assert_eq!(
        metric(
            &page,
            r#"ipam_agent_cni_requests_total{command="ATTACH",result="ok"}"#
        ),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        metric(
            &page,
            r#"ipam_agent_datapath_drops_total{reason="unknown_source"}"#
        ),
        Some(3.0),
        "{page}"
    );

    // A restart (a container restart keeps the node's bpffs) reopens the
    // pinned maps and link with the same capabilities.
    kill(&mut agent);
    let mut agent = start(&node, &datapath_capabilities(), Stdio::inherit());
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    let page = node.setup.metrics(Some(&node.ns));
    assert_eq!(
        metric(&page, "ipam_agent_datapath_maps_recreated_total"),
        Some(0.0),
        "the pinned maps were reused: {page}"
    );
    assert_eq!(
        tcx_programs(&node, &veth),
        1,
        "the pinned link was reused, not doubled"
    );
    assert_eq!(send(&pod, &node, POD_ADDRESS, 3), 3, "after the restart");
    assert_eq!(send(&pod, &node, SPOOFED, 3), 0, "after the restart");

    del_pod(&node, "pod-c", &pod, &result);
    assert!(!bpffs.pins().link(ifindex).exists(), "DEL unpins the link");
    kill(&mut agent);
}

/// The agent started with `capabilities` alone exits before it is ready;
/// its log.
fn refused_start(capabilities: &[&str], node: &NodeNs) -> String {
    let mut agent = start(node, capabilities, Stdio::piped());
    let mut logs = agent.stderr.take().expect("the agent's log");
    let reading = std::thread::spawn(move || {
        let mut text = String::new();
        // Whatever was written before a read error is still the evidence.
        let _ = logs.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = agent.try_wait().expect("waiting for the agent") {
            break status;
        }
        if Instant::now() > deadline {
            kill(&mut agent);
            let logs = reading.join().expect("the log reader");
            panic!("the agent with {capabilities:?} alone still runs after 30 s:\n{logs}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let logs = reading.join().expect("the log reader");
    assert!(
        !status.success(),
        "the agent with {capabilities:?} alone: {status}\n{logs}"
    );
    logs
}

#[tokio::test(flavor = "multi_thread")]
async fn without_either_of_them_the_datapath_does_not_load() {
    let bpffs = TestBpffs::mounted("caps-less");
    let node = datapath_node(&bpffs).await;
    // Without CAP_BPF, creating the maps already fails where the kernel
    // refuses unprivileged BPF (kernel.unprivileged_bpf_disabled set, as
    // here); elsewhere loading the program does.
    let unprivileged_bpf_disabled =
        std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled")
            .expect("the sysctl")
            .trim()
            != "0";
    let without_bpf = if unprivileged_bpf_disabled {
        "failed to create map"
    } else {
        "BPF_PROG_LOAD syscall returned Operation not permitted"
    };
    for (missing, reason) in [
        ("bpf", without_bpf),
        (
            "net_admin",
            "BPF_PROG_LOAD syscall returned Operation not permitted",
        ),
    ] {
        let capabilities: Vec<&str> = datapath_capabilities()
            .into_iter()
            .filter(|name| *name != missing)
            .collect();
        let logs = refused_start(&capabilities, &node);
        assert!(
            logs.contains("loading the datapath") && logs.contains(reason),
            "the agent without {missing} failed otherwise than with {reason:?}:\n{logs}"
        );
        if missing == "net_admin" {
            assert!(
                !logs.contains("failed to create map"),
                "with CAP_BPF the maps are made: {logs}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_nodes_bpffs_the_agent_cannot_mount_one() {
    // Nothing mounted on the folder: the agent's own mount needs
    // CAP_SYS_ADMIN, which the DaemonSet does not give.
    let bpffs = TestBpffs::new("caps-unmounted");
    let node = datapath_node(&bpffs).await;
    let logs = refused_start(&datapath_capabilities(), &node);
    assert!(
        logs.contains("mounting bpffs") && logs.contains("Operation not permitted"),
        "the agent without a bpffs failed otherwise:\n{logs}"
    );
}
