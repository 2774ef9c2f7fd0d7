//! What the agent's process tests share: the binaries, a kubeconfig for
//! the fake API server, a CiliumNode with a pool on one secondary
//! interface, the agent started (inside a network namespace when asked) and
//! waited for, a tiny HTTP stub for the metadata services, and the plugin
//! run as a container runtime would.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ipam_fake_apiserver::{FakeApiServer, CILIUMNODES};
use ipam_netns::NetNs;
use serde_json::{json, Value};

pub const NODES: &str = "/api/v1/nodes";
pub const NODE: &str = "n1";
/// The secondary interface the pool is on.
pub const ENI_MAC: &str = "02:00:00:00:01:01";
pub const ENI_ID: &str = "eni-1";

pub fn agent_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ipam-agent"))
}

/// The `ipam-cni` plugin: the statically linked one `cargo xtask test` and
/// `cargo xtask bench` build, as deployed (`IPAM_CNI_PLUGIN`), else the one
/// `cargo test --workspace` (or `cargo build -p ipam-cni`) builds beside
/// the agent.
pub fn plugin_binary() -> PathBuf {
    let plugin = match std::env::var_os("IPAM_CNI_PLUGIN") {
        Some(path) => PathBuf::from(path),
        None => agent_binary().with_file_name("ipam-cni"),
    };
    assert!(
        plugin.exists(),
        "{} is missing: build the plugin first (cargo xtask cni-plugin, or cargo build -p ipam-cni; \
         cargo xtask test does)",
        plugin.display()
    );
    plugin
}

pub use ipam_fake_apiserver::write_kubeconfig;

/// The Node the agent runs on.
pub fn node_object() -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "node-uid-1"}})
}

/// A CiliumNode whose pool holds `ips` on eni-1 (device 1, 10.0.1.0/24).
pub fn cilium_node(ips: &[String]) -> Value {
    let pool: serde_json::Map<String, Value> = ips
        .iter()
        .map(|ip| (ip.clone(), json!({"resource": ENI_ID})))
        .collect();
    json!({
        "apiVersion": "cilium.io/v2", "kind": "CiliumNode",
        "metadata": {"name": NODE},
        "spec": {"instance-id": "i-1", "ipam": {"pool": pool}},
        "status": {"eni": {"enis": {ENI_ID: {
            "id": ENI_ID, "mac": ENI_MAC, "number": 1,
            "subnet": {"id": "subnet-1", "cidr": "10.0.1.0/24"},
            "vpc": {"id": "vpc-1", "primary-cidr": "10.0.0.0/16"},
        }}}},
    })
}

pub fn pool(count: u8) -> Vec<String> {
    (10..10 + count).map(|n| format!("10.0.1.{n}")).collect()
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub use ipam_health_http::probe::get as http_get;

/// One agent's files and addresses.
pub struct AgentSetup {
    pub dir: tempfile::TempDir,
    pub health: String,
    pub args: Vec<String>,
}

impl AgentSetup {
    /// An agent for the fake server at `api`, with `extra` flags.
    pub fn new(api: SocketAddr, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        write_kubeconfig(&dir.path().join("kubeconfig"), api);
        let health = format!("127.0.0.1:{}", free_port());
        let mut args: Vec<String> = vec![
            format!("--node-name={NODE}"),
            format!("--kubeconfig={}", dir.path().join("kubeconfig").display()),
            format!("--state-dir={}", dir.path().join("state").display()),
            format!("--socket={}", dir.path().join("agent.sock").display()),
            format!("--listen={health}"),
        ];
        // Status patches come quickly in tests unless asked otherwise.
        if !extra
            .iter()
            .any(|flag| flag.starts_with("--status-interval-ms"))
        {
            args.push("--status-interval-ms=20".into());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        Self { dir, health, args }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("agent.sock")
    }

    pub fn state_file(&self) -> PathBuf {
        self.dir.path().join("state").join("allocations.json")
    }

    /// Start the agent, inside `ns` when given (a child forked from a
    /// thread in the namespace lives in it).
    pub fn start(&self, ns: Option<&NetNs>) -> Running {
        self.start_through(ns, &[], Stdio::null())
    }

    /// Start the agent as `start` does, through `launcher` when it is not
    /// empty (a program and its arguments that exec the agent with its own
    /// arguments appended, so the child's pid is the agent's), its log
    /// (standard error) going to `logs`.
    pub fn start_through(&self, ns: Option<&NetNs>, launcher: &[&str], logs: Stdio) -> Running {
        let spawn = move || {
            let mut command = match launcher.split_first() {
                Some((program, arguments)) => {
                    let mut command = Command::new(program);
                    command.args(arguments).arg(agent_binary());
                    command
                }
                None => Command::new(agent_binary()),
            };
            command
                .args(&self.args)
                .env("IPAM_LOG", "info")
                .stdout(Stdio::inherit())
                .stderr(logs)
                .spawn()
                .expect("start ipam-agent")
        };
        Running(match ns {
            Some(ns) => ns.run(spawn).expect("enter the namespace"),
            None => spawn(),
        })
    }

    /// Start the agent as `start` does, its log (standard error) going to
    /// a file in the setup's directory, whose path is returned; each start
    /// appends to it.
    pub fn start_logged(&self, ns: Option<&NetNs>) -> (Running, PathBuf) {
        let path = self.dir.path().join("agent.log");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("the agent's log file");
        (self.start_through(ns, &[], Stdio::from(file)), path)
    }

    /// Wait until /readyz answers 200 (from inside `ns` when given).
    pub fn wait_ready(&self, ns: Option<&NetNs>, child: &mut Child) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the agent exited before it was ready: {status}");
            }
            let health = self.health.clone();
            let answer = match ns {
                Some(ns) => ns.run(move || http_get(&health, "/readyz")).expect("netns"),
                None => http_get(&health, "/readyz"),
            };
            if matches!(answer, Some((200, _))) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the agent was not ready within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn metrics(&self, ns: Option<&NetNs>) -> String {
        let health = self.health.clone();
        let answer = match ns {
            Some(ns) => ns
                .run(move || http_get(&health, "/metrics"))
                .expect("netns"),
            None => http_get(&health, "/metrics"),
        };
        answer.expect("the metrics page").1
    }
}

/// Poll `probe` every 20 ms until it gives a value; after 20 s fail with
/// `what` and what it last saw.
pub async fn until<T>(what: &str, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = match probe() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        assert!(Instant::now() < deadline, "{what}: not within 20 s; {seen}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait until `check` holds on the fake server's CiliumNode.
pub async fn until_node(
    server: &FakeApiServer,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    until(what, || match server.get(CILIUMNODES, NODE) {
        Some(node) if check(&node) => Ok(node),
        other => Err(format!("the node: {:#}", other.unwrap_or_default())),
    })
    .await
}

/// A metric's value on the agent's page (`name` with its labels).
pub fn metric(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// A plain HTTP stub on 127.0.0.1 answering by method and path (query
/// included); `answer` gets the request's method, target and headers
/// (lower-cased names) and returns status and body.
pub fn http_stub(
    answer: impl Fn(&str, &str, &[(String, String)]) -> (u16, String) + Send + Sync + 'static,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let address = listener.local_addr().expect("address");
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    return;
                }
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap_or_default().to_string();
                let target = parts.next().unwrap_or_default().to_string();
                let mut headers = Vec::new();
                let mut length = 0usize;
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':') {
                        let name = name.trim().to_ascii_lowercase();
                        if name == "content-length" {
                            length = value.trim().parse().unwrap_or(0);
                        }
                        headers.push((name, value.trim().to_string()));
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let (status, body) = answer(&method, &target, &headers);
                let mut stream = reader.into_inner();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    address
}

/// A running agent, killed when dropped (a failing test must not leave it
/// holding the test's output open).
pub struct Running(pub Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        kill(&mut self.0);
    }
}

/// SIGTERM, and the exit status once the agent has stopped (within 20 s).
pub fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let signalled = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(signalled.success(), "kill -TERM {}", child.id());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("waiting for the agent") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the agent still runs 20 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILL and reap.
pub fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}
