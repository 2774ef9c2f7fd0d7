//! `ipam-operator run` with a real etcd (Debian's, started on 127.0.0.1 by
//! the test) and the fake API server: the kvstore duties run only once the
//! replica leads, write in Cilium's layout, show in /metrics, and a SIGTERM
//! gives the lock lease back while the heartbeat and services stay.

use std::process::{Command, Stdio};
use std::time::Duration;

use ipam_kvstore::testing::EtcdServer;
use ipam_tests::fake_apiserver::{in_namespace, FakeApiServer, ENDPOINTSLICES, SERVICES};
use serde_json::json;

use crate::support::{free_port, http_get, operator_run, terminate, write_kubeconfig};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
const SERVICE_KEY: &str = "cilium/state/services/v1/east/shop/cart";

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kvstore_duties_run_only_while_leading_in_cilium_s_layout() {
    let etcd = EtcdServer::start().await;
    let kv = etcd.client().await;
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    // Another replica holds the lease, renewed just now.
    server.put(
        LEASES,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "ipam-operator", "namespace": "kube-system"},
               "spec": {"holderIdentity": "replica-0", "leaseDurationSeconds": 3,
                        "acquireTime": now(), "renewTime": now(), "leaseTransitions": 0}}),
    );
    server.put(
        &in_namespace(SERVICES, "shop"),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "cart", "namespace": "shop",
                            "annotations": {"service.cilium.io/global": "true"}},
               "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}),
    );
    server.put(
        &in_namespace(ENDPOINTSLICES, "shop"),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "cart-1", "namespace": "shop",
                            "labels": {"kubernetes.io/service-name": "cart"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": ["10.0.1.5"], "conditions": {"ready": true}}],
               "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}),
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(&kubeconfig, api);
    let listen = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipam-operator"))
        .args(["run", "--provider", "mock", "--identity", "replica-1"])
        .args([
            "--lease-namespace",
            "kube-system",
            "--retry-period-seconds",
            "1",
        ])
        .args([
            "--lease-duration-seconds",
            "3",
            "--renew-deadline-seconds",
            "2",
        ])
        .args(["--etcd-endpoints", &etcd.endpoint()])
        .args(["--cluster-name", "east", "--cluster-id", "3"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--listen", &listen])
        .env("IPAM_CACHE_DIR", dir.path().join("cache"))
        .env("IPAM_COMPONENTS_DIR", ipam_tests::components_dir())
        .env("IPAM_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the operator starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let logs = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());

    // While replica-0 renews, replica-1 follows and writes nothing to etcd.
    for _ in 0..3 {
        server.update(LEASES, "ipam-operator", |lease| {
            lease["spec"]["renewTime"] = json!(now());
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the operator exited: {status}: {}",
                logs.join().unwrap_or_default()
            );
        }
    }
    assert!(http_get(&listen, "/healthz").is_some_and(|(code, _)| code == 200));
    assert!(
        kv.get("cilium/.heartbeat").await.unwrap().is_none(),
        "a follower writes no heartbeat"
    );
    assert!(kv.get(SERVICE_KEY).await.unwrap().is_none());
    let (_, metrics) = http_get(&listen, "/metrics").expect("/metrics answers");
    for line in [
        "cilium_operator_leader 0",
        "cilium_operator_leader_transitions_total 0",
        "cilium_operator_kvstore_heartbeat_timestamp_seconds 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "a follower: {line} in {metrics}"
        );
    }
    let took_over_after = jiff::Timestamp::now().as_second();

    // replica-0 stops renewing: replica-1 takes over and the duties start.
    let mut written = None;
    for _ in 0..200 {
        if let (Some(beat), Some(service)) = (
            kv.get("cilium/.heartbeat").await.unwrap(),
            kv.get(SERVICE_KEY).await.unwrap(),
        ) {
            written = Some((beat, service));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let Some((beat, service)) = written else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "the leader wrote no heartbeat or global service in 20 s; its log:\n{}",
            logs.join().unwrap_or_default()
        );
    };
    String::from_utf8_lossy(&beat.value)
        .parse::<jiff::Timestamp>()
        .expect("the heartbeat is an RFC 3339 time");
    let service: serde_json::Value = serde_json::from_slice(&service.value).unwrap();
    assert_eq!(service["cluster"], "east");
    assert_eq!(service["clusterID"], 3);
    assert_eq!(
        service["frontends"]["10.96.0.10"]["http"],
        json!({"Protocol": "TCP", "Port": 80})
    );
    assert_eq!(
        service["backends"]["10.0.1.5"]["http"],
        json!({"Protocol": "TCP", "Port": 8080})
    );
    let config = kv
        .get("cilium/cluster-config/east")
        .await
        .unwrap()
        .expect("the cluster config");
    let config: serde_json::Value = serde_json::from_slice(&config.value).unwrap();
    assert_eq!(config["id"], 3);
    assert!(kv
        .get("cilium/synced/east/cilium/state/services/v1")
        .await
        .unwrap()
        .is_some());
    let lease = server.get(LEASES, "ipam-operator").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "replica-1");

    // The gauge is set once etcd has answered the write the test saw.
    let mut heartbeat_at = 0;
    for _ in 0..100 {
        let (_, metrics) = http_get(&listen, "/metrics").expect("/metrics answers");
        heartbeat_at = metric(
            &metrics,
            "cilium_operator_kvstore_heartbeat_timestamp_seconds",
        );
        if heartbeat_at > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        (took_over_after..=jiff::Timestamp::now().as_second()).contains(&heartbeat_at),
        "the heartbeat's time, written since the takeover: {heartbeat_at}"
    );
    let (_, metrics) = http_get(&listen, "/metrics").expect("/metrics answers");
    for line in [
        "cilium_operator_leader 1",
        "cilium_operator_leader_transitions_total 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "the leader: {line} in {metrics}"
        );
    }
    // The stores' rounds last their resync interval (5 min): counted when
    // they end; what they wrote is checked above.
    for duty in ["heartbeat", "lock-sweeper", "identity-gc"] {
        assert!(
            metrics.contains(&format!(
                "cilium_operator_duty_runs_total{{duty=\"{duty}\"}}"
            )) || metrics.contains(&format!(
                "cilium_operator_duty_duration_seconds_count{{duty=\"{duty}\"}}"
            )),
            "{duty} ran: {metrics}"
        );
    }

    // SIGTERM: the session's keys stay for the next leader; the lock
    // lease is revoked.
    let status = terminate(&mut child).await;
    let logs = logs.join().unwrap_or_default();
    assert!(status.success(), "{status}: {logs}");
    assert!(
        kv.get("cilium/.heartbeat").await.unwrap().is_some(),
        "the heartbeat outlives the process"
    );
    assert!(
        kv.get(SERVICE_KEY).await.unwrap().is_some(),
        "services outlive the process"
    );
    let leases = kv.raw().leases().await.unwrap();
    assert_eq!(
        leases.leases().len(),
        1,
        "only the session lease is left: {logs}"
    );
    assert!(logs.contains("kvstore: connected to etcd"), "{logs}");
}

/// The value of the series `name` (no labels) on a metrics page; 0 when
/// absent.
fn metric(page: &str, name: &str) -> i64 {
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// `ipam-operator run` with `etcd` flags, until it exits (it must, within
/// 60 s); its status and log.
async fn refused_start(etcd: &[String]) -> (std::process::ExitStatus, String) {
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(&kubeconfig, api);
    let mut args = vec!["--provider=mock".to_string(), "--leader-elect=false".into()];
    args.extend_from_slice(etcd);
    let mut child = operator_run(dir.path(), &kubeconfig, &args)
        .spawn()
        .expect("the operator starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let logs = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    for _ in 0..600 {
        if let Ok(Some(status)) = child.try_wait() {
            return (status, logs.join().unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    panic!(
        "the operator still runs with {etcd:?}: {}",
        logs.join().unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_etcd_address_password_or_ca_stops_the_start() {
    // Nothing listens there.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let (status, logs) = refused_start(&["--etcd-endpoints".into(), closed.clone()]).await;
    assert!(!status.success(), "{status}");
    assert!(
        logs.contains("connecting to etcd") && logs.contains(&closed),
        "the error names the endpoint: {logs}"
    );

    let etcd = EtcdServer::start().await;
    etcd.enable_auth("root", "s3cret").await;
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, "wrong").unwrap();
    let (status, logs) = refused_start(&[
        "--etcd-endpoints".into(),
        etcd.endpoint(),
        "--etcd-username".into(),
        "root".into(),
        format!("--etcd-password-file={}", password.display()),
    ])
    .await;
    assert!(!status.success(), "{status}");
    assert!(logs.contains("connecting to etcd"), "{logs}");

    // A TLS etcd whose serving certificate comes from another CA than the
    // one the operator is told to trust.
    let tls = EtcdServer::start_tls().await;
    let other = EtcdServer::start_tls().await;
    let files = tls.config().tls.expect("a TLS config");
    let (cert, key) = files.client.expect("a client certificate");
    let other_ca = other.config().tls.and_then(|t| t.ca).expect("the other CA");
    let (status, logs) = refused_start(&[
        "--etcd-endpoints".into(),
        tls.endpoint(),
        format!("--etcd-ca-file={}", other_ca.display()),
        format!("--etcd-cert-file={}", cert.display()),
        format!("--etcd-key-file={}", key.display()),
    ])
    .await;
    assert!(!status.success(), "{status}");
    assert!(logs.contains("connecting to etcd"), "{logs}");
}
