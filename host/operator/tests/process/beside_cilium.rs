//! `ipam-operator run` beside cilium-agent: CiliumNodes exactly as Cilium
//! 1.16's Go agent writes them (`ipam_ciliumnode::go_agent`: `spec.eni`,
//! `spec.azure` and `spec.alibaba-cloud` on every node, empty ones
//! included), served by the fake API server over HTTP. With the AWS
//! component against moto, a Go-shaped node and one without the empty
//! objects, same `spec.eni` and watermarks, both get their interfaces in
//! `status.eni.enis`; with the Azure component against the ARM stub, a
//! Go-shaped Azure node (carrying `"eni": {}`) gets them in
//! `status.azure.interfaces`. cilium-agent looks up each pool entry's
//! `resource` there, or hands out no address.

use std::process::Child;
use std::time::Duration;

use ipam_ciliumnode::go_agent;
use ipam_tests::arm_stub::{self, ArmStub};
use ipam_tests::fake_apiserver::{FakeApiServer, CILIUMNODES};
use ipam_tests::moto::Moto;
use serde_json::{json, Value};

use crate::support::{operator_run, terminate, write_kubeconfig};

const PRE_ALLOCATE: u64 = 4;

/// The operator with `args` against the API server of `kubeconfig`,
/// logging to `operator.log` in `dir`.
fn start(kubeconfig: &std::path::Path, dir: &std::path::Path, args: &[String]) -> Child {
    let log = std::fs::File::create(dir.join("operator.log")).expect("a log file");
    let mut args = args.to_vec();
    args.extend(
        [
            "--identity=beside-cilium",
            "--lease-namespace=kube-system",
            "--retry-period-seconds=1",
            "--resync-seconds=5",
        ]
        .map(String::from),
    );
    operator_run(dir, kubeconfig, &args)
        // A file, not a pipe: nothing has to read it while it runs.
        .stderr(log)
        .spawn()
        .expect("the operator starts")
}

/// Each pool entry's interface, and whether `interfaces` (the ids the
/// status lists) holds it.
fn resources_found(object: &Value, interfaces: &[String]) -> Vec<(String, bool)> {
    object["spec"]["ipam"]["pool"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(_, entry)| {
            let resource = entry["resource"].as_str().unwrap_or_default().to_string();
            let found = interfaces.contains(&resource);
            (resource, found)
        })
        .collect()
}

fn eni_ids(object: &Value) -> Vec<String> {
    object["status"]["eni"]["enis"]
        .as_object()
        .map(|enis| enis.keys().cloned().collect())
        .unwrap_or_default()
}

fn azure_ids(object: &Value) -> Vec<String> {
    object["status"]["azure"]["interfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["id"].as_str().map(String::from))
        .collect()
}

/// Wait until every node in `names` has a pool of at least PRE_ALLOCATE
/// whose every entry is on an interface `interfaces` lists; the nodes then.
async fn until_served(
    server: &FakeApiServer,
    names: &[&str],
    interfaces: fn(&Value) -> Vec<String>,
    child: &mut Child,
    log: &std::path::Path,
) -> Vec<Value> {
    for _ in 0..600 {
        let objects: Vec<Value> = names
            .iter()
            .filter_map(|name| server.get(CILIUMNODES, name))
            .collect();
        let served = objects.len() == names.len()
            && objects.iter().all(|object| {
                let found = resources_found(object, &interfaces(object));
                found.len() as u64 >= PRE_ALLOCATE && found.iter().all(|(_, ok)| *ok)
            });
        if served {
            return objects;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the operator exited: {status}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let objects: Vec<Value> = names
        .iter()
        .filter_map(|name| server.get(CILIUMNODES, name))
        .collect();
    let _ = child.kill();
    panic!(
        "not every pool entry's interface is in the status the agents read: {objects:#?}\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_eni_mode_go_shaped_and_bare_nodes_both_get_status_eni() {
    let moto = Moto::start();
    let seeded = moto.seed_with(2);
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(&kubeconfig, api);

    // As Cilium 1.16's agent registers it: "azure": {}, "alibaba-cloud": {}.
    let mut go_shaped =
        go_agent::object(go_agent::ENI_AGENT_REGISTERED, "go", &seeded.instances[0]);
    go_shaped["spec"]["ipam"]["pre-allocate"] = json!(PRE_ALLOCATE);
    assert_eq!(go_shaped["spec"]["azure"], json!({}));
    // The same spec.eni and watermarks, without the empty objects.
    let bare = json!({"apiVersion": "cilium.io/v2", "kind": "CiliumNode",
        "metadata": {"name": "bare"},
        "spec": {"instance-id": seeded.instances[1], "eni": go_shaped["spec"]["eni"],
                 "ipam": {"pre-allocate": PRE_ALLOCATE}}});
    server.put(CILIUMNODES, go_shaped);
    server.put(CILIUMNODES, bare);

    let settings = dir.path().join("aws.json");
    std::fs::write(
        &settings,
        json!({"region": "us-east-1", "endpoint": moto.endpoint, "cluster-name": "test",
               "subnet-tags": {"ipam": "pods"}, "security-group-tags": {"ipam": "pods"}})
        .to_string(),
    )
    .unwrap();
    let credentials = dir.path().join("credentials.yaml");
    std::fs::write(
        &credentials,
        "access-key-id: AKIDTEST\nsecret-access-key: secret\n",
    )
    .unwrap();
    let mut child = start(
        &kubeconfig,
        dir.path(),
        &[
            "--provider=aws".into(),
            // No --ipam-mode: AWS's is ENI.
            "--cloud=aws".into(),
            "--cluster-name=test".into(),
            format!("--provider-settings={}", settings.display()),
            format!("--provider-credentials={}", credentials.display()),
            format!("--allow-egress={}", moto.endpoint),
        ],
    );
    let log = dir.path().join("operator.log");
    let nodes = until_served(&server, &["go", "bare"], eni_ids, &mut child, &log).await;
    for object in &nodes {
        assert!(
            azure_ids(object).is_empty(),
            "no status.azure in ENI mode: {object:#}"
        );
    }
    assert!(terminate(&mut child).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_azure_mode_a_go_shaped_node_carrying_spec_eni_gets_status_azure() {
    let arm = ArmStub::start().await;
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(&kubeconfig, api);

    // As Cilium 1.16's agent registers it: "eni": {}, "alibaba-cloud": {};
    // the instance id lower-cased, as Cilium writes it.
    let instance = arm_stub::scale_set_vm_id().to_ascii_lowercase();
    let mut node = go_agent::object(go_agent::AZURE_AGENT_REGISTERED, "aks-pool-0", &instance);
    node["spec"]["ipam"]["pre-allocate"] = json!(PRE_ALLOCATE);
    assert_eq!(node["spec"]["eni"], json!({}));
    server.put(CILIUMNODES, node);

    let settings = dir.path().join("azure.json");
    std::fs::write(&settings, arm.settings().to_string()).unwrap();
    let credentials = dir.path().join("credentials.yaml");
    std::fs::write(&credentials, format!("access-token: {}\n", arm_stub::TOKEN)).unwrap();
    let mut child = start(
        &kubeconfig,
        dir.path(),
        &[
            "--provider=azure".into(),
            // No --ipam-mode: Azure's is azure.
            "--cloud=azure".into(),
            format!("--provider-settings={}", settings.display()),
            format!("--provider-credentials={}", credentials.display()),
            format!("--allow-egress={}", arm.endpoint),
        ],
    );
    let log = dir.path().join("operator.log");
    let nodes = until_served(&server, &["aks-pool-0"], azure_ids, &mut child, &log).await;
    assert!(
        eni_ids(&nodes[0]).is_empty(),
        "no status.eni in Azure mode: {:#}",
        nodes[0]
    );
    assert!(terminate(&mut child).await.success());
}
