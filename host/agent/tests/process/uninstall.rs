//! Restart or uninstall, as root in namespaces the test makes: an agent
//! with everything on (its conflist, the plugin's directory, routes, SNAT,
//! the datapath on a bpffs the test mounts) and a pod through the chain.
//! At SIGTERM the agent reads its pod's owner DaemonSet from the fake API
//! server: while the DaemonSet is there (a restart), everything stays and
//! the next agent takes over; once it is deleted (an uninstall), the
//! agent removes the conflist, the plugin, the pod's routes and rules, the
//! SNAT table and the pinned BPF objects before it exits.

use std::path::{Path, PathBuf};

use ipam_netns::NetNs;
use serde_json::json;

use crate::datapath::{add_pod, TestBpffs};
use crate::node_ns::NodeNs;
use crate::support::terminate;

const DAEMONSETS: &str = "/apis/apps/v1/namespaces/kube-system/daemonsets";
const AGENT_POD: &str = "ipam-agent-x7k2p";
const CONFLIST: &str = r#"{"cniVersion": "1.0.0", "name": "ipam",
  "plugins": [{"type": "ptp", "ipam": {"type": "ipam-cni"}}]}"#;

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Whether the node holds the agent's SNAT table (`nft list table`).
fn has_snat_table(ns: &NetNs) -> bool {
    let nft = "/usr/sbin/nft";
    assert!(
        Path::new(nft).exists(),
        "{nft} is missing: install Debian's nftables (cargo xtask test does)"
    );
    let output = ns
        .run(|| {
            std::process::Command::new(nft)
                .args(["list", "table", "ip", "ipam-agent"])
                .output()
        })
        .expect("netns")
        .expect("nft runs");
    output.status.success()
}

/// Everything the agent put on the node, as (what, there or not).
struct Footprint {
    conflist: bool,
    plugin: bool,
    routed: usize,
    snat: bool,
    pins: Vec<String>,
}

async fn footprint(node: &NodeNs, cni: &Path, pins: &Path) -> Footprint {
    Footprint {
        conflist: listing(&cni.join("net.d")).contains(&"05-ipam.conflist".to_string()),
        plugin: cni.join("bin/ipam-cni").exists(),
        routed: node.routed().await.len(),
        snat: has_snat_table(&node.ns),
        pins: listing(pins),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_keeps_everything_and_an_uninstall_removes_it_all() {
    let bpffs = TestBpffs::mounted("uninstall");
    let cni = tempfile::tempdir().expect("the CNI directories");
    let cni_dir: PathBuf = cni.path().to_path_buf();
    std::fs::create_dir_all(cni_dir.join("config")).expect("mkdir");
    std::fs::write(cni_dir.join("config/05-ipam.conflist"), CONFLIST).expect("the conflist");
    // What the init container installed.
    std::fs::create_dir_all(cni_dir.join("bin")).expect("mkdir");
    std::fs::write(cni_dir.join("bin/ipam-cni"), b"\x7fELF the plugin").expect("the plugin");
    let pins = bpffs.path().join(ipam_agent::datapath::PIN_FOLDER);
    let flags = [
        format!(
            "--datapath-object={}",
            crate::datapath::ebpf_object().display()
        ),
        format!("--bpffs={}", bpffs.path().display()),
        format!(
            "--cni-conflist={}",
            cni_dir.join("config/05-ipam.conflist").display()
        ),
        format!("--cni-conf-dir={}", cni_dir.join("net.d").display()),
        format!("--cni-bin-dir={}", cni_dir.join("bin").display()),
        "--snat=true".to_string(),
        format!("--pod-name={AGENT_POD}"),
        "--pod-namespace=kube-system".to_string(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let node = NodeNs::new(4, &flags).await;
    node.server.put(
        DAEMONSETS,
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": "ipam-agent", "namespace": "kube-system", "uid": "ds-uid-1"}}),
    );
    node.server.put(
        "/api/v1/namespaces/kube-system/pods",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": AGENT_POD, "namespace": "kube-system",
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                                 "name": "ipam-agent", "uid": "ds-uid-1",
                                                 "controller": true}]},
               "spec": {"nodeName": crate::support::NODE, "containers": []}}),
    );
    let mut agent = node.setup.start(Some(&node.ns));
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    let pod = NetNs::create_unique("ipam-pod").expect("a pod namespace");
    add_pod(&node, "pod-a", &pod);
    let wanted =
        |f: &Footprint| f.conflist && f.plugin && f.routed == 1 && f.snat && !f.pins.is_empty();
    crate::support::until("the conflist installed", || {
        if listing(&cni_dir.join("net.d")).is_empty() {
            Err("no conflist yet".to_string())
        } else {
            Ok(())
        }
    })
    .await;
    let before = footprint(&node, &cni_dir, &pins).await;
    assert!(
        wanted(&before),
        "all in place: conflist {}, plugin {}, routed {}, snat {}, pins {:?}",
        before.conflist,
        before.plugin,
        before.routed,
        before.snat,
        before.pins
    );

    // A restart (the DaemonSet is there): SIGTERM keeps everything.
    assert!(terminate(&mut agent).success());
    let kept = footprint(&node, &cni_dir, &pins).await;
    assert!(
        wanted(&kept),
        "kept: conflist {}, plugin {}, routed {}, snat {}, pins {:?}",
        kept.conflist,
        kept.plugin,
        kept.routed,
        kept.snat,
        kept.pins
    );
    assert_eq!(kept.pins, before.pins);
    let mut agent = node.setup.start(Some(&node.ns));
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    assert!(
        wanted(&footprint(&node, &cni_dir, &pins).await),
        "the next agent carries on"
    );

    // Uninstalled: the DaemonSet goes first, then its pods get SIGTERM.
    node.server.delete(DAEMONSETS, "ipam-agent");
    assert!(terminate(&mut agent).success());
    let after = footprint(&node, &cni_dir, &pins).await;
    assert!(!after.conflist, "the conflist removed");
    assert!(!after.plugin, "the plugin removed");
    assert_eq!(after.routed, 0, "the pod's routes and rules removed");
    assert!(!after.snat, "the SNAT table removed");
    assert!(!pins.exists(), "the pins removed: {:?}", after.pins);
    assert!(listing(&cni_dir.join("net.d")).is_empty());
    assert!(
        node.setup.state_file().exists(),
        "the allocations stay for an agent installed again before a reboot"
    );
    drop(pod);
}
