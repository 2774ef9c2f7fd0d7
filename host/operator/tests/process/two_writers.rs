//! `ipam-operator run` beside another writer of the CiliumNode fields it
//! owns, against the fake API server over HTTP (which records
//! managedFields as the real one does) with the mock provider.
//!
//! A second manager: the operator keeps a node's pool; Cilium's operator
//! (client-go, no fieldManager: the manager is its User-Agent's binary
//! name) updates spec.ipam.pool; the operator stops writing (the node's
//! watermark raised meanwhile, nothing patched while the window lasts),
//! `/readyz` names the writer and the node, the gauge is 1 and the node has
//! an OtherWriter Event; once the window has passed the operator writes
//! again and fills the node to its new watermark.
//!
//! Cilium's operator allocating: its Lease held and cilium-config's `ipam:
//! eni`: the operator never writes while the Lease is renewed, says so in
//! `/readyz` and the gauge; it fills the node once the node is annotated
//! `ipam.cilium.io/ignore: "true"` (Cilium's IPAM leaves it alone), stops
//! again when the annotation goes, and fills it to its new watermark once
//! the Lease expires.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipam_ciliumnode::go_agent;
use ipam_tests::fake_apiserver::{in_namespace, FakeApiServer, Logged, CILIUMNODES};
use serde_json::{json, Value};

use crate::support::{free_port, http_get, terminate, write_kubeconfig};

const PRE_ALLOCATE: usize = 8;
/// The operator's --other-writer-window-seconds here.
const WINDOW: Duration = Duration::from_secs(6);
const LEASES: &str = "/apis/coordination.k8s.io/v1/leases";
const CONFIG_MAPS: &str = "/api/v1/configmaps";
const DEPLOYMENTS: &str = "/apis/apps/v1/deployments";
const CILIUM_USER_AGENT: &str = "cilium-operator-aws/v1.16.5 (linux/amd64) kubernetes/a1b2c3d";

/// The operator under test, its endpoints and its log file.
struct Operator {
    child: Child,
    listen: String,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Operator {
    fn start(api: SocketAddr) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        write_kubeconfig(&kubeconfig, api);
        let log = dir.path().join("operator.log");
        let listen = format!("127.0.0.1:{}", free_port());
        let args = [
            "--provider=mock".to_string(),
            "--identity=two-writers".into(),
            "--lease-namespace=kube-system".into(),
            "--retry-period-seconds=1".into(),
            "--resync-seconds=2".into(),
            format!("--other-writer-window-seconds={}", WINDOW.as_secs()),
            "--other-writer-poll-seconds=1".into(),
        ];
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_ipam-operator"))
            .arg("run")
            .args(args)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--listen={listen}"))
            .env("IPAM_CACHE_DIR", dir.path().join("cache"))
            .env("IPAM_COMPONENTS_DIR", ipam_tests::components_dir())
            .env("IPAM_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            // A file, not a pipe: nothing has to read it while it runs.
            .stderr(std::fs::File::create(&log).expect("a log file"))
            .spawn()
            .expect("the operator starts");
        Self {
            child,
            listen,
            log,
            _dir: dir,
        }
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Poll `check` every 100 ms until it holds, for up to `limit`.
    async fn until(&mut self, what: &str, limit: Duration, mut check: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if check(self) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the operator exited ({status}) waiting for {what}:\n{}",
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = self.child.kill();
        panic!("not within {limit:?}: {what}\n{}", self.logs());
    }

    fn readyz(&self) -> Option<(u16, String)> {
        http_get(&self.listen, "/readyz")
    }

    fn metrics(&self) -> String {
        http_get(&self.listen, "/metrics")
            .map(|(_, text)| text)
            .unwrap_or_default()
    }
}

/// n1 as cilium-agent registers it in ENI mode, on the mock's instance.
fn node(pre_allocate: usize) -> Value {
    let mut node = go_agent::object(go_agent::ENI_AGENT_REGISTERED, "n1", "i-0001");
    node["spec"]["ipam"]["pre-allocate"] = json!(pre_allocate);
    node
}

/// The pool entries on interfaces other than `foreign`.
fn pool_of_ours(server: &FakeApiServer, foreign: &str) -> usize {
    server.get(CILIUMNODES, "n1").map_or(0, |n| {
        n["spec"]["ipam"]["pool"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, entry)| entry["resource"] != foreign)
            .count()
    })
}

/// A write of this operator's to a CiliumNode.
fn ours_to_a_node(entry: &Logged) -> bool {
    entry.method != http::Method::GET
        && entry.path.starts_with(CILIUMNODES)
        && entry.query.contains("fieldManager=ipam-operator")
}

/// A request as client-go sends it: its User-Agent, no fieldManager. The
/// status code and the body answered.
fn client_go_request(api: SocketAddr, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let body = body.to_string();
    let mut stream = TcpStream::connect(api).expect("the fake API server");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("a read timeout");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {api}\r\nUser-Agent: {CILIUM_USER_AGENT}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("the request sent");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str(body).ok())
        .unwrap_or(Value::Null);
    (code, body)
}

/// Cilium's operator's Update of n1's pool: one address added on its own
/// interface, the object as read sent back (409 on a stale one: read
/// again). The object as the API server stored it.
fn cilium_adds_to_the_pool(server: &FakeApiServer, api: SocketAddr, interface: &str) -> Value {
    for _ in 0..20 {
        let mut object = server.get(CILIUMNODES, "n1").expect("n1");
        object["spec"]["ipam"]["pool"]["10.250.0.9"] = json!({"resource": interface});
        let (code, stored) = client_go_request(api, "PUT", &format!("{CILIUMNODES}/n1"), &object);
        if code == 200 {
            return stored;
        }
        assert_eq!(code, 409, "Cilium's update answered {code}");
    }
    panic!("Cilium's update kept conflicting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_manager_writing_the_pool_pauses_the_operator_until_its_window_passes() {
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    server.put(CILIUMNODES, node(PRE_ALLOCATE));
    let mut operator = Operator::start(api);
    operator
        .until(
            "n1's pool filled and /readyz 200",
            Duration::from_secs(60),
            |op| {
                pool_of_ours(&server, "-") == PRE_ALLOCATE
                    && op.readyz().is_some_and(|(code, _)| code == 200)
            },
        )
        .await;

    let foreign = "eni-cilium-0001";
    let written = Instant::now();
    let stored = cilium_adds_to_the_pool(&server, api, foreign);
    // As stored by that write: a write of the operator's racing the pause
    // may take the field (and with it the entry) a moment later.
    let recorded = stored["metadata"]["managedFields"].clone();
    assert!(
        recorded.as_array().into_iter().flatten().any(|e| {
            e["manager"] == "cilium-operator-aws"
                && e["fieldsV1"]["f:spec"]["f:ipam"]["f:pool"].is_object()
        }),
        "the API server records Cilium's write under its binary's name: {recorded:#}"
    );
    let mut reason = String::new();
    operator
        .until(
            "/readyz naming the other writer",
            Duration::from_secs(5),
            |op| match op.readyz() {
                Some((503, body)) if body.contains("cilium-operator-aws") => {
                    reason = body;
                    true
                }
                _ => false,
            },
        )
        .await;
    let paused_at = server.log().len();
    assert!(
        reason.contains("changed spec.ipam.pool of CiliumNode n1"),
        "{reason}"
    );
    // The node now wants more: the operator would write, and must not.
    server.patch(
        CILIUMNODES,
        "n1",
        &json!({"spec": {"ipam": {"pre-allocate": PRE_ALLOCATE + 4}}}),
    );
    let metrics = operator.metrics();
    assert!(
        metrics.contains("cilium_operator_ipam_other_writer{manager=\"cilium-operator-aws\"} 1"),
        "{metrics}"
    );
    let event = |log: &[Logged]| {
        log.iter().any(|entry| {
            entry.path.contains("/events")
                && entry.code < 300
                && entry.body.as_ref().is_some_and(|b| {
                    b["reason"] == "OtherWriter"
                        && b["type"] == "Warning"
                        && b["regarding"]["name"] == "n1"
                        && b["note"]
                            .as_str()
                            .is_some_and(|n| n.contains("cilium-operator-aws"))
                })
        })
    };
    operator
        .until("an OtherWriter Event on n1", Duration::from_secs(5), |_| {
            event(&server.log())
        })
        .await;

    // The entry's time is whole seconds: until a second before the window
    // ends, the pause holds whatever the rounding.
    let surely_paused = WINDOW - Duration::from_millis(1500);
    tokio::time::sleep(surely_paused.saturating_sub(written.elapsed())).await;
    let log = server.log();
    let during: Vec<&Logged> = log[paused_at..]
        .iter()
        .filter(|e| ours_to_a_node(e))
        .collect();
    assert!(
        during.is_empty(),
        "the operator wrote while another writer was seen: {during:#?}"
    );
    let events = log
        .iter()
        // A repeated Event is a PATCH of the first (kube's Recorder): count
        // every write, not only creations.
        .filter(|e| e.method != http::Method::GET && e.path.contains("/events"))
        .filter(|e| {
            e.body
                .as_ref()
                .is_some_and(|b| b["reason"] == "OtherWriter")
        })
        .count();
    assert_eq!(events, 1, "one Event for the episode, not one per pass");
    let marked = log.len();

    operator
        .until(
            "the operator writing again and n1 filled to its new watermark",
            Duration::from_secs(30),
            |_| {
                pool_of_ours(&server, foreign) >= PRE_ALLOCATE + 4
                    && server.log()[marked..].iter().any(ours_to_a_node)
            },
        )
        .await;
    operator
        .until("the gauge back to 0", Duration::from_secs(5), |op| {
            op.metrics()
                .contains("cilium_operator_ipam_other_writer{manager=\"cilium-operator-aws\"} 0")
        })
        .await;
    let logs = operator.logs();
    assert!(
        logs.contains("another writer: the engine stops writing")
            && logs.contains("no other writer any more: the engine writes again"),
        "{logs}"
    );
    assert!(terminate(&mut operator.child).await.success());
}

/// Cilium's operator as its chart deploys it in ENI mode: cilium-config
/// with `ipam: eni`, the Deployment passing only its config dir, the Lease
/// held by its leader and renewed while `renewing`.
fn cilium_operator_in_eni_mode(server: &FakeApiServer, renewing: Arc<AtomicBool>) {
    let namespace = "kube-system";
    server.put(
        &in_namespace(CONFIG_MAPS, namespace),
        json!({"metadata": {"name": "cilium-config"},
               "data": {"ipam": "eni", "enable-ipv4": "true"}}),
    );
    server.put(
        &in_namespace(DEPLOYMENTS, namespace),
        json!({"metadata": {"name": "cilium-operator"},
               "spec": {"selector": {"matchLabels": {"name": "cilium-operator"}},
                        "template": {"spec": {"containers": [{
                            "name": "cilium-operator",
                            "image": "quay.io/cilium/operator-aws:v1.16.5",
                            "command": ["cilium-operator-aws"],
                            "args": ["--config-dir=/tmp/cilium/config-map",
                                     "--debug=$(CILIUM_DEBUG)"]}]}}}}),
    );
    let leases = in_namespace(LEASES, namespace);
    let lease = |now: jiff::Timestamp| {
        json!({"metadata": {"name": "cilium-operator-resource-lock"},
               "spec": {"holderIdentity": "ip-10-0-1-17.ec2.internal-tqg5xlmnbc",
                        "leaseDurationSeconds": 3, "acquireTime": now.to_string(),
                        "renewTime": now.to_string(), "leaseTransitions": 0}})
    };
    server.put(&leases, lease(jiff::Timestamp::now()));
    let server = server.clone();
    // Renewed as its leader does, every second, on a thread of its own.
    std::thread::spawn(move || {
        while renewing.load(Ordering::SeqCst) {
            let now = jiff::Timestamp::now().to_string();
            server.update(&leases, "cilium-operator-resource-lock", |lease| {
                lease["spec"]["renewTime"] = json!(now);
            });
            std::thread::sleep(Duration::from_secs(1));
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cilium_operators_lease_held_in_eni_mode_keeps_the_operator_from_writing_but_for_nodes_it_ignores(
) {
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    server.put(CILIUMNODES, node(PRE_ALLOCATE));
    let renewing = Arc::new(AtomicBool::new(true));
    cilium_operator_in_eni_mode(&server, renewing.clone());
    let mut operator = Operator::start(api);
    operator
        .until(
            "/readyz naming Cilium's operator",
            Duration::from_secs(60),
            |op| {
                op.readyz().is_some_and(|(code, body)| {
                    code == 503
                        && body.contains("Cilium's operator allocates in IPAM mode eni")
                        && body.contains("kube-system/cilium-operator-resource-lock")
                        && body.contains("ip-10-0-1-17.ec2.internal-tqg5xlmnbc")
                })
            },
        )
        .await;
    // Long enough for a leader to have filled the node several times over.
    operator
        .until(
            "the lease taken by the operator",
            Duration::from_secs(10),
            |_| {
                server
                    .get(&in_namespace(LEASES, "kube-system"), "ipam-operator")
                    .is_some_and(|l| l["spec"]["holderIdentity"] == "two-writers")
            },
        )
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let metrics = operator.metrics();
    assert!(
        metrics.contains("cilium_operator_ipam_other_writer{manager=\"cilium-operator\"} 1"),
        "{metrics}"
    );
    let log = server.log();
    let written: Vec<&Logged> = log.iter().filter(|e| ours_to_a_node(e)).collect();
    assert!(
        written.is_empty(),
        "the operator wrote while Cilium's operator allocates: {written:#?}"
    );
    assert_eq!(pool_of_ours(&server, "-"), 0);

    // Cilium's IPAM told to leave n1 alone: nothing to fight over.
    let annotate = |value: Value| {
        server.patch(
            CILIUMNODES,
            "n1",
            &json!({"metadata": {"annotations": {"ipam.cilium.io/ignore": value}}}),
        );
    };
    annotate(json!("true"));
    operator
        .until(
            "n1 filled once annotated for Cilium to ignore",
            Duration::from_secs(30),
            |op| {
                pool_of_ours(&server, "-") == PRE_ALLOCATE
                    && op.readyz().is_some_and(|(code, _)| code == 200)
            },
        )
        .await;
    let metrics = operator.metrics();
    assert!(
        metrics.contains("cilium_operator_ipam_other_writer{manager=\"cilium-operator\"} 0"),
        "{metrics}"
    );

    // The annotation gone, and more wanted: paused again.
    annotate(Value::Null);
    operator
        .until(
            "/readyz naming Cilium's operator again",
            Duration::from_secs(10),
            |op| {
                op.readyz()
                    .is_some_and(|(code, body)| code == 503 && body.contains("Cilium's operator"))
            },
        )
        .await;
    let paused_at = server.log().len();
    server.patch(
        CILIUMNODES,
        "n1",
        &json!({"spec": {"ipam": {"pre-allocate": PRE_ALLOCATE + 4}}}),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let written: Vec<Logged> = server.log()[paused_at..]
        .iter()
        .filter(|e| ours_to_a_node(e))
        .cloned()
        .collect();
    assert!(written.is_empty(), "written while paused: {written:#?}");

    // Cilium's operator stops: its Lease expires.
    renewing.store(false, Ordering::SeqCst);
    operator
        .until(
            "n1 filled once the Lease expired",
            Duration::from_secs(30),
            |op| {
                pool_of_ours(&server, "-") == PRE_ALLOCATE + 4
                    && op.readyz().is_some_and(|(code, _)| code == 200)
            },
        )
        .await;
    let metrics = operator.metrics();
    assert!(
        metrics.contains("cilium_operator_ipam_other_writer{manager=\"cilium-operator\"} 0"),
        "{metrics}"
    );
    assert!(terminate(&mut operator.child).await.success());
}
