//! A node in a network namespace: loopback up, a veth end standing in for
//! the secondary interface (eni-1's MAC), the fake API server listening on
//! its loopback, the agent running inside it, and the plugin chain (ptp +
//! ipam-cni) run there as a container runtime runs it.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use ipam_fake_apiserver::{FakeApiServer, CILIUMNODES};
use ipam_netns::{NetLinks, NetNs};
use ipam_node_routes::{Direction, PodRule, Router, MAIN_TABLE, TABLE_OFFSET};
use serde_json::{json, Value};

use crate::support::{cilium_node, node_object, plugin_binary, pool, AgentSetup, ENI_MAC, NODES};

/// Debian's containernetworking-plugins.
const PTP: &str = "/usr/lib/cni/ptp";
/// The subnet's router, which ptp puts on the host side of the pod's veth.
pub const POD_GATEWAY: &str = "10.0.1.1";

pub struct NodeNs {
    pub ns: NetNs,
    pub server: FakeApiServer,
    pub setup: AgentSetup,
    /// CNI_PATH: ptp and ipam-cni.
    cni_path: tempfile::TempDir,
}

impl NodeNs {
    /// A node whose pool holds `addresses` addresses; the agent is not
    /// started yet.
    pub async fn new(addresses: u8, extra: &[&str]) -> Self {
        Self::new_with_pool(pool(addresses), extra).await
    }

    /// A node whose pool holds `addresses` (all on eni-1).
    pub async fn new_with_pool(addresses: Vec<String>, extra: &[&str]) -> Self {
        ipam_netns::require_root();
        assert!(
            std::path::Path::new(PTP).exists(),
            "{PTP} is missing: install Debian's containernetworking-plugins (cargo xtask test does)"
        );
        let ns = NetNs::create_unique("ipam-node").expect("a node namespace");
        let mac: [u8; 6] = {
            let bytes: Vec<u8> = ENI_MAC
                .split(':')
                .map(|b| u8::from_str_radix(b, 16).expect("hex"))
                .collect();
            bytes.try_into().expect("six bytes")
        };
        ns.run_future(move || async move {
            let links = NetLinks::connect().expect("netlink");
            links.set_up("lo").await.expect("lo up");
            links
                .add_veth("eni1", "eni1-peer", None)
                .await
                .expect("the ENI veth");
            links.set_mac("eni1", mac).await.expect("the ENI's MAC");
            links.set_up("eni1-peer").await.expect("peer up");
        })
        .await
        .expect("set the node up");
        let listener = ns
            .run(|| std::net::TcpListener::bind("127.0.0.1:0"))
            .expect("netns")
            .expect("bind the API server inside the node");
        let server = FakeApiServer::default();
        let api = server.serve_http_on(listener);
        server.put(NODES, node_object());
        server.put(CILIUMNODES, cilium_node(&addresses));
        let mut flags = vec!["--instance-id=i-1"];
        flags.extend_from_slice(extra);
        let setup = AgentSetup::new(api, &flags);
        let cni_path = tempfile::tempdir().expect("CNI_PATH");
        std::os::unix::fs::symlink(PTP, cni_path.path().join("ptp")).expect("link ptp");
        std::os::unix::fs::symlink(plugin_binary(), cni_path.path().join("ipam-cni"))
            .expect("link ipam-cni");
        Self {
            ns,
            server,
            setup,
            cni_path,
        }
    }

    /// The network configuration: ptp with ipam-cni, `extra` merged in.
    pub fn config(&self, version: &str, extra: Value) -> Value {
        let mut config = json!({
            "cniVersion": version, "name": "ipam-test", "type": "ptp", "ipMasq": false,
            "ipam": {"type": "ipam-cni", "socket": self.setup.socket()},
        });
        if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
            config.extend(extra.clone());
        }
        config
    }

    /// Run `plugin` (ptp, or ipam-cni directly) for `command` inside the
    /// node, as a runtime would.
    pub fn cni(
        &self,
        plugin: &str,
        command: &str,
        container: &str,
        pod_ns: Option<&NetNs>,
        config: &Value,
    ) -> Output {
        let binary = self.cni_path.path().join(plugin);
        let cni_path = self.cni_path.path().to_path_buf();
        let netns: Option<PathBuf> = pod_ns.map(|ns| ns.path().to_path_buf());
        let stdin = serde_json::to_vec(config).expect("config");
        let container = container.to_string();
        let command = command.to_string();
        self.ns
            .run(move || {
                let mut cmd = Command::new(binary);
                cmd.env_clear()
                    .env("CNI_COMMAND", &command)
                    .env("CNI_CONTAINERID", &container)
                    .env("CNI_IFNAME", "eth0")
                    .env("CNI_PATH", &cni_path)
                    .env(
                        "CNI_ARGS",
                        format!("K8S_POD_NAMESPACE=default;K8S_POD_NAME={container}"),
                    )
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                if let Some(netns) = &netns {
                    cmd.env("CNI_NETNS", netns);
                }
                let mut child = cmd.spawn().expect("run the plugin");
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(&stdin)
                    .expect("write the config");
                child.wait_with_output().expect("the plugin's output")
            })
            .expect("netns")
    }

    /// The pod addresses routed in the node, each checked to have exactly
    /// its two rules: one `to` rule (priority 20) in the main table, one
    /// `from` rule (priority 111) in a secondary interface's table. A missing,
    /// duplicated or misplaced rule fails the test, naming the rules.
    pub async fn routed(&self) -> BTreeSet<Ipv4Addr> {
        let rules = self
            .ns
            .run_future(|| async {
                let router = Router::connect().expect("netlink");
                router.pod_rule_list().await.expect("the rules")
            })
            .await
            .expect("netns");
        routed_addresses(&rules)
    }
}

/// The addresses of `rules`, each of which must have exactly one `to` rule
/// in the main table and one `from` rule in a secondary interface's table.
pub fn routed_addresses(rules: &[PodRule]) -> BTreeSet<Ipv4Addr> {
    let addresses: BTreeSet<Ipv4Addr> = rules.iter().map(|r| r.address).collect();
    for address in &addresses {
        let of = |direction: Direction| -> Vec<u32> {
            rules
                .iter()
                .filter(|r| r.address == *address && r.direction == direction)
                .map(|r| r.table)
                .collect()
        };
        let (to, from) = (of(Direction::ToPod), of(Direction::FromPod));
        assert_eq!(to, [MAIN_TABLE], "{address}: its to-rules: {rules:?}");
        // A secondary interface's table is above the offset and never one
        // of the kernel's own (default 253, main 254, local 255).
        assert!(
            from.len() == 1 && from[0] > TABLE_OFFSET && !(253..=255).contains(&from[0]),
            "{address}: its from-rules are not one in a secondary interface's table: {rules:?}"
        );
    }
    addresses
}

/// The output's stdout as JSON, with stderr in the panic if it is not.
pub fn json_out(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): status {}, stdout {:?}, stderr {:?}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

pub fn assert_ok(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what}: {} stdout {:?} stderr {:?}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_missing_duplicated_or_misplaced_rule_is_caught() {
    let address: Ipv4Addr = "10.0.1.10".parse().unwrap();
    let whole = [PodRule::to_pod(address), PodRule::from_pod(address, 11)];
    assert_eq!(routed_addresses(&whole), [address].into());
    let broken: [&[PodRule]; 4] = [
        &[PodRule::from_pod(address, 11)],
        &[whole[0], whole[1], whole[1]],
        &[whole[0], PodRule::from_pod(address, MAIN_TABLE)],
        &[whole[0], whole[0], whole[1]],
    ];
    for rules in broken {
        let caught = std::panic::catch_unwind(|| routed_addresses(rules));
        assert!(caught.is_err(), "not caught: {rules:?}");
    }
}
