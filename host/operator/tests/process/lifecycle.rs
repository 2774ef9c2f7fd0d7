//! `ipam-operator run` as a process: a kubeconfig pointing at a fake API
//! server on 127.0.0.1, the mock provider; the pool is written, /readyz and
//! /metrics answer, and SIGTERM hands the lease back.

use ipam_tests::fake_apiserver;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use fake_apiserver::{FakeApiServer, CILIUMNODES};
use ipam_ciliumnode::go_agent;
use serde_json::json;

use crate::support::{free_port, http_get, operator_run, terminate, write_kubeconfig};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";

/// Read a child's pipe to its end on a thread of its own, so a chatty child
/// never blocks on a full pipe while the test waits on it; the text at the
/// end.
fn drain(pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let mut pipe = pipe;
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_process_fills_a_node_serves_health_and_hands_back_its_lease() {
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    // As cilium-agent registers it in ENI mode.
    let mut node = go_agent::object(go_agent::ENI_AGENT_REGISTERED, "n1", "i-0001");
    node["spec"]["ipam"]["pre-allocate"] = json!(8);
    server.put(CILIUMNODES, node);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(&kubeconfig, api);
    let listen = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipam-operator"))
        .args([
            "run",
            "--provider",
            "mock",
            "--identity",
            "replica-1",
            "--lease-namespace",
            "kube-system",
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--listen", &listen, "--retry-period-seconds", "1"])
        .env("IPAM_CACHE_DIR", dir.path().join("cache"))
        .env("IPAM_COMPONENTS_DIR", ipam_tests::components_dir())
        .env("IPAM_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the operator starts");
    // Drained from the start, each on its own thread: the logs go to stderr,
    // and stdout is kept for the failure message.
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));

    let mut filled = false;
    for _ in 0..300 {
        let pool = server
            .get(CILIUMNODES, "n1")
            .and_then(|n| n["spec"]["ipam"]["pool"].as_object().map(|p| p.len()));
        if pool == Some(8) {
            filled = true;
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let stderr = stderr.join().unwrap_or_default();
            panic!("the operator exited: {status}: {stderr}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(filled, "n1's pool was written");
    let mut ready = false;
    for _ in 0..100 {
        if http_get(&listen, "/readyz").is_some_and(|(code, _)| code == 200) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "/readyz turned 200");
    assert_eq!(http_get(&listen, "/healthz").map(|r| r.0), Some(200));
    let (code, metrics) = http_get(&listen, "/metrics").expect("/metrics answers");
    assert_eq!(code, 200);
    // As Cilium counts: the node's capacity (m5.large: 3 interfaces of 9
    // secondary addresses), and the free addresses over all nodes.
    assert!(
        metrics.contains("cilium_operator_ipam_available_ips{target_node=\"n1\"} 27"),
        "{metrics}"
    );
    assert!(
        metrics.contains("cilium_operator_ipam_ips{type=\"available\"} 8"),
        "{metrics}"
    );
    assert!(metrics.contains("process_resident_memory_bytes"));
    for line in [
        "cilium_operator_leader 1",
        "cilium_operator_leader_transitions_total 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
    assert!(
        !metrics.contains("cilium_operator_kvstore_heartbeat"),
        "no heartbeat gauge without an etcd: {metrics}"
    );
    let lease = server.get(LEASES, "ipam-operator").expect("a lease");
    assert_eq!(lease["spec"]["holderIdentity"], "replica-1");

    // SIGTERM: a clean stop that hands the lease back.
    let status = terminate(&mut child).await;
    // The child has exited, so both pipes are at their end.
    let stderr = stderr.join().expect("the stderr reader");
    let stdout = stdout.join().expect("the stdout reader");
    assert!(status.success(), "{status}: {stderr}\nstdout: {stdout}");
    let lease = server.get(LEASES, "ipam-operator").unwrap();
    assert!(
        lease["spec"]["holderIdentity"].is_null(),
        "lease handed back: {lease}"
    );
    assert!(stderr.contains("became the leader"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "no colour escape codes when stderr is not a terminal: {stderr:?}"
    );
}

#[test]
fn a_module_whose_digest_is_not_the_pinned_one_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let pinned = "0".repeat(64);
    let output = Command::new(env!("CARGO_BIN_EXE_ipam-operator"))
        .args(["run", "--provider", "mock", "--provider-sha256", &pinned])
        // No kubeconfig: the refusal must come before any cluster is asked.
        .env("KUBECONFIG", dir.path().join("absent"))
        .env("IPAM_CACHE_DIR", dir.path().join("cache"))
        .env("IPAM_COMPONENTS_DIR", ipam_tests::components_dir())
        .output()
        .expect("the operator runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("but --provider-sha256 pins") && stderr.contains(&pinned),
        "{stderr}"
    );
}

/// The operator with `--cilium-endpoint-gc-interval-seconds=SECONDS` over a
/// CiliumEndpoint whose pod is gone; whether it was deleted within 6 s, and
/// the log.
async fn endpoint_gc_with_interval(seconds: u64) -> (bool, String) {
    use fake_apiserver::{in_namespace, CILIUMENDPOINTS};

    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    let endpoints = in_namespace(CILIUMENDPOINTS, "default");
    server.put(
        &endpoints,
        json!({"apiVersion": "cilium.io/v2", "kind": "CiliumEndpoint",
               "metadata": {"name": "pod-gone", "namespace": "default", "uid": "u-1",
                            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                                 "name": "pod-gone", "uid": "p-1"}]},
               "status": {"id": 1, "state": "ready"}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(&kubeconfig, api);
    let args = [
        "--provider=mock".to_string(),
        "--leader-elect=false".into(),
        format!("--cilium-endpoint-gc-interval-seconds={seconds}"),
    ];
    let mut child = operator_run(dir.path(), &kubeconfig, &args)
        .spawn()
        .expect("the operator starts");
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let mut deleted = false;
    for _ in 0..60 {
        if server.get(&endpoints, "pod-gone").is_none() {
            deleted = true;
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the operator exited: {status}: {}",
                stderr.join().unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = terminate(&mut child).await;
    let logs = stderr.join().unwrap_or_default();
    assert!(status.success(), "{status}: {logs}");
    (deleted, logs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_gc_interval_flag_runs_the_gc_or_turns_it_off() {
    // Deleted on the second round that sees it orphaned: 1 s apart.
    let (deleted, logs) = endpoint_gc_with_interval(1).await;
    assert!(deleted, "the orphan was collected: {logs}");
    let (deleted, logs) = endpoint_gc_with_interval(0).await;
    assert!(!deleted, "0 turns the GC off: {logs}");
    assert!(logs.contains("CiliumEndpoint GC off"), "{logs}");
}
