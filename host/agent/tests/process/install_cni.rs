//! `ipam-agent install-cni`: as the init container runs it, the plugin
//! alone; with `--conflist`, the conflist too. Flags from the environment,
//! the files put in place with their modes and no temporary left, a
//! running plugin replaced (no "text file busy"), a bad conflist refused
//! with nothing written, and the agent's own environment (NODE_NAME, ...)
//! no obstacle.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::{agent_binary, plugin_binary};

const CONFLIST: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "ipam",
  "plugins": [
    {"type": "ptp", "ipam": {"type": "ipam-cni", "socket": "/run/ipam-agent/agent.sock"}}
  ]
}"#;

struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("config")).expect("mkdir");
        std::fs::write(dir.path().join("config/05-ipam.conflist"), CONFLIST).expect("conflist");
        Node { dir }
    }

    fn bin_dir(&self) -> PathBuf {
        self.dir.path().join("opt/cni/bin")
    }

    fn conf_dir(&self) -> PathBuf {
        self.dir.path().join("etc/cni/net.d")
    }

    /// `ipam-agent install-cni` with its settings in the environment, as the
    /// DaemonSet passes them, beside the agent's own variables.
    fn install(&self, conflist: &str) -> Output {
        Command::new(agent_binary())
            .arg("install-cni")
            .env_clear()
            .env("NODE_NAME", "node-1")
            .env("IPAM_CLOUD", "none")
            .env("IPAM_AGENT_CNI_PLUGIN", plugin_binary())
            .env(
                "IPAM_AGENT_CNI_CONFLIST",
                self.dir.path().join("config").join(conflist),
            )
            .env("IPAM_AGENT_CNI_BIN_DIR", self.bin_dir())
            .env("IPAM_AGENT_CNI_CONF_DIR", self.conf_dir())
            .output()
            .expect("ipam-agent runs")
    }
}

fn listing(dir: &Path) -> Vec<(String, u32)> {
    let mut names: Vec<(String, u32)> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| {
                let e = e.expect("entry");
                let mode = e.metadata().expect("metadata").permissions().mode() & 0o7777;
                (e.file_name().to_string_lossy().into_owned(), mode)
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

fn succeeded(output: &Output) -> String {
    assert!(
        output.status.success(),
        "install-cni failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn install_cni_puts_the_plugin_and_conflist_in_place_even_over_a_running_plugin() {
    let node = Node::new();
    let stdout = succeeded(&node.install("05-ipam.conflist"));
    let plugin = node.bin_dir().join("ipam-cni");
    let conflist = node.conf_dir().join("05-ipam.conflist");
    assert!(
        stdout.contains(&format!("installed {}", plugin.display())),
        "{stdout}"
    );
    assert!(stdout.contains("ptp"), "{stdout}");
    assert_eq!(listing(&node.bin_dir()), [("ipam-cni".into(), 0o755)]);
    assert_eq!(
        listing(&node.conf_dir()),
        [("05-ipam.conflist".into(), 0o644)]
    );
    assert_eq!(
        std::fs::read(&plugin).expect("installed plugin"),
        std::fs::read(plugin_binary()).expect("plugin")
    );
    assert_eq!(
        std::fs::read_to_string(&conflist).expect("conflist"),
        CONFLIST
    );

    // The installed plugin running (a VERSION call waiting for its stdin)
    // while the next install replaces it: `cp` over it would fail with
    // ETXTBSY, a rename does not.
    let mut running = Command::new(&plugin)
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the installed plugin starts");
    let opened_for_write = std::fs::OpenOptions::new().write(true).open(&plugin);
    let busy = opened_for_write.expect_err("a running executable opened for writing");
    assert_eq!(
        busy.raw_os_error(),
        Some(26),
        "ETXTBSY (what `cp` over it would meet): {busy}"
    );
    std::fs::write(
        node.bin_dir().join(".ipam-cni.new"),
        "left by a killed install",
    )
    .expect("a leftover");
    succeeded(&node.install("05-ipam.conflist"));
    assert_eq!(listing(&node.bin_dir()), [("ipam-cni".into(), 0o755)]);
    // The old copy still answers from its own inode.
    let mut stdin = running.stdin.take().expect("stdin");
    stdin
        .write_all(br#"{"cniVersion": "1.0.0"}"#)
        .expect("the plugin's stdin");
    drop(stdin);
    let answer = running.wait_with_output().expect("the plugin's answer");
    assert!(answer.status.success(), "{answer:?}");
    assert!(String::from_utf8_lossy(&answer.stdout).contains("supportedVersions"));
}

#[test]
fn a_bad_conflist_is_refused_and_nothing_is_written() {
    let node = Node::new();
    let no_ipam = r#"{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "ptp"}]}"#;
    for (file, text, named) in [
        ("no-ipam.conflist", no_ipam, "ipam.type"),
        (
            "no-plugins.conflist",
            r#"{"cniVersion": "1.0.0", "name": "n", "plugins": []}"#,
            "`plugins` is empty",
        ),
        ("broken.conflist", "{\"cniVersion\":", "not JSON"),
        ("single.conf", CONFLIST, "NAME.conflist"),
    ] {
        std::fs::write(node.dir.path().join("config").join(file), text).expect("write");
        let output = node.install(file);
        assert_eq!(output.status.code(), Some(1), "{file}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(named) && stderr.contains(file),
            "{file}: {stderr}"
        );
        assert!(
            listing(&node.bin_dir()).is_empty(),
            "{file}: the plugin was written"
        );
        assert!(
            listing(&node.conf_dir()).is_empty(),
            "{file}: a conflist was written"
        );
    }
}

#[test]
fn the_agent_prints_its_version_and_install_cni_alone_installs_the_plugin() {
    let version = Command::new(agent_binary())
        .arg("--version")
        .env_clear()
        .output()
        .expect("ipam-agent runs");
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("ipam-agent {}", env!("CARGO_PKG_VERSION"))
    );
    // As the DaemonSet's init container runs it: the plugin, no conflist
    // (the agent installs that once it serves).
    let node = Node::new();
    let plugin_only = Command::new(agent_binary())
        .arg("install-cni")
        .env_clear()
        .env("IPAM_AGENT_CNI_PLUGIN", plugin_binary())
        .env("IPAM_AGENT_CNI_BIN_DIR", node.bin_dir())
        .env("IPAM_AGENT_CNI_CONF_DIR", node.conf_dir())
        .output()
        .expect("ipam-agent runs");
    succeeded(&plugin_only);
    assert_eq!(listing(&node.bin_dir()), [("ipam-cni".into(), 0o755)]);
    assert!(listing(&node.conf_dir()).is_empty(), "no conflist");
    // Without a plugin to install, an error naming it.
    let missing = Command::new(agent_binary())
        .args(["install-cni", "--plugin=/nonexistent/ipam-cni"])
        .env_clear()
        .env("IPAM_AGENT_CNI_BIN_DIR", node.bin_dir())
        .output()
        .expect("ipam-agent runs");
    assert_eq!(missing.status.code(), Some(1), "{missing:?}");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/ipam-cni"));
    // The agent itself still needs its node name.
    let agent = Command::new(agent_binary())
        .env_clear()
        .output()
        .expect("ipam-agent runs");
    assert_eq!(agent.status.code(), Some(2), "{agent:?}");
    assert!(String::from_utf8_lossy(&agent.stderr).contains("--node-name"));
}
