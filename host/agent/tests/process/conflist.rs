//! The agent installs its conflist itself, against the fake API server, in
//! a temporary CNI configuration directory: not before it serves (while
//! its instance id is still missing, nothing is written; once /readyz is
//! 200 the conflist appears), never over another network's configuration
//! unless told to take over (then only under a name that sorts first), and
//! a conflist of its own that an older install left beside another
//! network's is removed.

use std::path::{Path, PathBuf};

use ipam_fake_apiserver::{FakeApiServer, CILIUMNODES};
use serde_json::json;

use crate::support::{
    cilium_node, http_get, kill, metric, node_object, pool, until, AgentSetup, NODES,
};

const CONFLIST: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "ipam",
  "plugins": [
    {"type": "ptp", "ipam": {"type": "ipam-cni", "socket": "/run/ipam-agent/agent.sock"}}
  ]
}"#;
const AWS_NODE: &str = r#"{"cniVersion": "0.4.0", "name": "aws-cni", "plugins": [
  {"name": "aws-cni", "type": "aws-cni", "vethPrefix": "eni", "mtu": "9001"},
  {"type": "egress-cni", "ipam": {"type": "host-local", "ranges": [[{"subnet": "169.254.172.0/22"}]]}}
]}"#;

/// The conflist the agent is given (as the ConfigMap mounts it) and the
/// node's configuration directory (not made yet).
struct CniDirs {
    dir: tempfile::TempDir,
}

impl CniDirs {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::create_dir(dir.path().join("config")).expect("mkdir");
        std::fs::write(dir.path().join("config/05-ipam.conflist"), CONFLIST).expect("conflist");
        Self { dir }
    }

    fn conf_dir(&self) -> PathBuf {
        self.dir.path().join("net.d")
    }

    fn flags(&self) -> Vec<String> {
        vec![
            format!(
                "--cni-conflist={}",
                self.dir.path().join("config/05-ipam.conflist").display()
            ),
            format!("--cni-conf-dir={}", self.conf_dir().display()),
            "--routing=false".into(),
        ]
    }

    fn put(&self, name: &str, text: &str) {
        std::fs::create_dir_all(self.conf_dir()).expect("the conf dir");
        std::fs::write(self.conf_dir().join(name), text).expect("a configuration");
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// The fake API server with the Node (and, given `pool`, its CiliumNode).
async fn server(with_node: bool) -> (FakeApiServer, std::net::SocketAddr) {
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    server.put(NODES, node_object());
    if with_node {
        server.put(CILIUMNODES, cilium_node(&pool(2)));
    }
    (server, api)
}

/// Waits until the agent's conflist metric shows `state`.
async fn until_state(setup: &AgentSetup, state: &str) {
    let series = format!("ipam_agent_cni_conflist{{state=\"{state}\"}}");
    until(&format!("the conflist {state}"), || {
        let page = setup.metrics(None);
        if metric(&page, &series) == Some(1.0) {
            Ok(())
        } else {
            Err(page)
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_conflist_is_installed_only_once_the_agent_serves() {
    let (server, api) = server(true).await;
    let cni = CniDirs::new();
    // No --instance-id and no provider id yet: the agent cannot register.
    let flags = cni.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let setup = AgentSetup::new(api, &flags);
    let mut agent = setup.start(None);
    let health = setup.health.clone();
    until("/readyz waiting for the provider id", || {
        match http_get(&health, "/readyz") {
            Some((503, body)) if body.contains("spec.providerID") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(
        listing(&cni.conf_dir()).is_empty(),
        "nothing installed before the agent serves"
    );
    assert!(!setup.socket().exists());

    // The cloud controller manager sets the provider id.
    server.update(NODES, crate::support::NODE, |node| {
        node["spec"]["providerID"] = json!("aws:///us-east-1a/i-0123456789abcdef0");
    });
    setup.wait_ready(None, &mut agent);
    until("the conflist installed", || {
        match listing(&cni.conf_dir()).as_slice() {
            [name] if name == "05-ipam.conflist" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(cni.conf_dir().join("05-ipam.conflist")).expect("installed"),
        CONFLIST
    );
    until_state(&setup, "installed").await;
    // Restarted: the same file, left as it is.
    kill(&mut agent);
    let mut agent = setup.start(None);
    setup.wait_ready(None, &mut agent);
    until_state(&setup, "installed").await;
    assert_eq!(listing(&cni.conf_dir()), ["05-ipam.conflist"]);
    kill(&mut agent);
}

#[tokio::test(flavor = "multi_thread")]
async fn another_network_is_kept_unless_the_agent_takes_over() {
    let (_server, api) = server(true).await;
    let cni = CniDirs::new();
    cni.put("10-aws.conflist", AWS_NODE);
    // Left by an older agent whose init container installed it.
    cni.put("05-ipam.conflist", CONFLIST);
    let mut flags = cni.flags();
    flags.push("--instance-id=i-1".into());
    let flags_ref: Vec<&str> = flags.iter().map(String::as_str).collect();
    let setup = AgentSetup::new(api, &flags_ref);
    let mut agent = setup.start(None);
    setup.wait_ready(None, &mut agent);
    until_state(&setup, "other_network").await;
    assert_eq!(
        listing(&cni.conf_dir()),
        ["10-aws.conflist"],
        "aws-node's network stays the node's"
    );
    assert_eq!(
        std::fs::read_to_string(cni.conf_dir().join("10-aws.conflist")).expect("aws-node's"),
        AWS_NODE
    );
    kill(&mut agent);

    // Told to take over: installed, sorting before aws-node's.
    let mut taking = flags.clone();
    taking.push("--cni-take-over=true".into());
    let taking: Vec<&str> = taking.iter().map(String::as_str).collect();
    let setup = AgentSetup::new(api, &taking);
    let mut agent = setup.start(None);
    setup.wait_ready(None, &mut agent);
    until_state(&setup, "installed").await;
    assert_eq!(
        listing(&cni.conf_dir()),
        ["05-ipam.conflist", "10-aws.conflist"]
    );
    kill(&mut agent);

    // A network whose file sorts first: no take-over, and the metric says so.
    std::fs::remove_file(cni.conf_dir().join("05-ipam.conflist")).expect("remove");
    cni.put(
        "00-other.conf",
        r#"{"cniVersion": "1.0.0", "name": "x", "type": "bridge"}"#,
    );
    let mut agent = setup.start(None);
    setup.wait_ready(None, &mut agent);
    until_state(&setup, "not_first").await;
    assert_eq!(
        listing(&cni.conf_dir()),
        ["00-other.conf", "10-aws.conflist"]
    );
    kill(&mut agent);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_conflist_stops_the_agent_before_it_serves() {
    let (_server, api) = server(true).await;
    let cni = CniDirs::new();
    std::fs::write(
        cni.dir.path().join("config/05-ipam.conflist"),
        r#"{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "ptp"}]}"#,
    )
    .expect("a conflist without ipam-cni");
    let mut flags = cni.flags();
    flags.push("--instance-id=i-1".into());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let setup = AgentSetup::new(api, &flags);
    let output = std::process::Command::new(crate::support::agent_binary())
        .args(&setup.args)
        .output()
        .expect("the agent runs");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--cni-conflist") && stderr.contains("ipam-cni"),
        "{stderr}"
    );
    assert!(listing(&cni.conf_dir()).is_empty());
}
