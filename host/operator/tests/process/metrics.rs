//! `ipam-operator run` as a process, its `/metrics` read as Prometheus
//! reads it and checked against Cilium's operator's families (the table in
//! `ipam_tests::cilium_metrics`, written from Cilium's source), and cloud
//! trouble seen where a cluster's operator looks: `/readyz` and an Event
//! on the CiliumNode.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ipam_ciliumnode::go_agent;
use ipam_tests::cilium_metrics::{
    differences, CILIUM_OPERATOR_EC2, CILIUM_OPERATOR_IPAM, NOT_EXPORTED,
};
use ipam_tests::fake_apiserver::{FakeApiServer, CILIUMNODES};
use serde_json::{json, Value};

use crate::support::{free_port, http_get, terminate, write_kubeconfig};

/// The operator on the mock as if on AWS (Cilium's EC2 families), with
/// `extra` flags; its listen address.
fn operator(
    dir: &std::path::Path,
    kubeconfig: &std::path::Path,
    extra: &[&str],
) -> (Child, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_ipam-operator"))
        .args([
            "run",
            "--provider=mock",
            "--cloud=aws",
            // The mock calls nothing; an allow-list keeps AWS's default
            // (which needs a region) out of it.
            "--allow-egress=https://ec2.example.com",
            "--leader-elect=false",
        ])
        .args(extra)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--listen={listen}"))
        .env("IPAM_CACHE_DIR", dir.join("cache"))
        .env("IPAM_COMPONENTS_DIR", ipam_tests::components_dir())
        .env("IPAM_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the operator starts");
    (child, listen)
}

/// Poll every 200 ms until `done` gives a value, failing after `limit`.
async fn until<T>(limit: Duration, what: &str, mut done: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = done() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn pool_len(server: &FakeApiServer) -> usize {
    server
        .get(CILIUMNODES, "n1")
        .and_then(|n| n["spec"]["ipam"]["pool"].as_object().map(|p| p.len()))
        .unwrap_or(0)
}

/// The node agent's side of the release handshake: every address marked
/// for release is ready to go, and a released one is dropped.
fn answer_release_handshake(server: &FakeApiServer) {
    server.update(CILIUMNODES, "n1", |node| {
        let Some(states) = node["status"]["ipam"]["release-ips"].as_object_mut() else {
            return;
        };
        states.retain(|_, state| state != "released");
        for state in states.values_mut() {
            if state == "marked-for-release" {
                *state = Value::from("ready-for-release");
            }
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_page_has_every_family_of_ciliums_operator_as_prometheus_reads_it() {
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    // 12 on m5.large: 9 on the primary interface, 3 on a created one.
    let mut node = go_agent::object(go_agent::ENI_AGENT_REGISTERED, "n1", "i-0001");
    node["spec"]["ipam"]["pre-allocate"] = json!(12);
    server.put(CILIUMNODES, node);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(&kubeconfig, api);
    // A resync a second and room for one get-vpcs every 2 s: the resyncs
    // wait for EC2's DescribeVpcs bucket, as Cilium records waits.
    let (mut child, listen) = operator(
        dir.path(),
        &kubeconfig,
        &[
            "--release-delay-seconds=0",
            "--free-interfaces=false",
            "--resync-seconds=1",
            "--rate-bucket=DescribeVpcs=1:0.5",
        ],
    );
    until(Duration::from_secs(120), "n1's pool of 12", || {
        (pool_len(&server) == 12).then_some(())
    })
    .await;

    // Down to 2: the excess is marked, the test answers as the agent, and
    // the operator releases it.
    server.update(CILIUMNODES, "n1", |node| {
        node["spec"]["ipam"]["pre-allocate"] = json!(2);
    });
    let page = until(Duration::from_secs(60), "addresses released", || {
        answer_release_handshake(&server);
        let (_, page) = http_get(&listen, "/metrics")?;
        (page.contains("cilium_operator_ipam_ip_release_ops{")
            && page.contains("cilium_operator_ec2_api_rate_limit_duration_seconds_count{"))
        .then_some(page)
    })
    .await;

    let ipam = differences(&page, CILIUM_OPERATOR_IPAM, NOT_EXPORTED);
    assert!(ipam.is_empty(), "{ipam:#?}\n{page}");
    let ec2 = differences(&page, CILIUM_OPERATOR_EC2, &[]);
    assert!(ec2.is_empty(), "{ec2:#?}\n{page}");
    for line in [
        "# TYPE cilium_operator_ipam_ip_allocation_ops counter",
        "# TYPE cilium_operator_ipam_interface_creation_ops counter",
        "cilium_operator_ipam_nodes{category=\"total\"} 1",
        "cilium_operator_ec2_api_duration_seconds_count{operation=\"AssignPrivateIpAddresses\",response_code=\"OK\"}",
        "cilium_operator_ec2_api_rate_limit_duration_seconds_count{operation=\"DescribeVpcs\"}",
        "cilium_operator_ipam_release_duration_seconds_count{type=\"releaseIP\",status=\"success\"",
        "cilium_operator_ipam_allocation_duration_seconds_count{type=\"createInterfaceAndAllocateIP\",status=\"success\"",
    ] {
        assert!(page.contains(line), "{line} in\n{page}");
    }
    assert!(
        !page.contains("# EOF") && !page.contains("_ops_total{"),
        "{page}"
    );
    let status = terminate(&mut child).await;
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_fail_readyz_and_are_told_once_on_the_node() {
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    let mut node = go_agent::object(go_agent::ENI_AGENT_REGISTERED, "n1", "i-0001");
    node["spec"]["ipam"]["pre-allocate"] = json!(4);
    server.put(CILIUMNODES, node);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(&kubeconfig, api);
    // The mock's cloud, refusing every assign-ips as unauthorized.
    let settings = dir.path().join("mock.yaml");
    std::fs::write(
        &settings,
        format!(
            "{}\nfaults:\n  - {{operation: assign-ips, error: unauthorized, times: 1000000}}\n",
            ipam_tests::MOCK_SETTINGS
        ),
    )
    .unwrap();
    let (mut child, listen) = operator(
        dir.path(),
        &kubeconfig,
        &[&format!("--provider-settings={}", settings.display())],
    );
    // Passes fail and back off (1 s, 2 s, ...): wait for a few of them.
    until(Duration::from_secs(120), "three failed assign-ips", || {
        let (_, page) = http_get(&listen, "/metrics")?;
        let failed = page.lines().find_map(|l| {
            l.strip_prefix(
                "cilium_operator_ipam_allocation_duration_seconds_count{type=\"allocateIP\",status=\"failed\",subnet_id=\"subnet-a1\"} ",
            )
        })?;
        (failed.parse::<u64>().ok()? >= 3).then_some(())
    })
    .await;
    let (code, body) = http_get(&listen, "/readyz").expect("/readyz answers");
    assert_eq!(code, 503, "{body}");
    let mut lines = body.lines();
    assert_eq!(
        lines.next(),
        Some("not ready: the cloud refuses the provider's credentials")
    );
    let problem = lines.next().unwrap_or_default();
    assert!(
        problem.starts_with("CloudUnauthorized: assign-ips failed ")
            && problem.ends_with("unauthorized: injected fault on assign-ips"),
        "{body}"
    );
    let told: Vec<Value> = server
        .writes()
        .into_iter()
        .filter(|w| w.path.contains("/events"))
        .filter_map(|w| w.body)
        .filter(|e| e["reason"] == "CloudUnauthorized")
        .collect();
    assert_eq!(told.len(), 1, "once, not on every failed pass: {told:#?}");
    assert_eq!(told[0]["type"], "Warning");
    assert_eq!(told[0]["regarding"]["kind"], "CiliumNode");
    assert_eq!(told[0]["regarding"]["name"], "n1");
    let status = terminate(&mut child).await;
    assert!(status.success(), "{status}");
}
