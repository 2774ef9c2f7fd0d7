//! Registration against metadata-service stubs written from AWS's IMDSv2
//! and Azure's IMDS references: the CiliumNode is created with the facts,
//! the flags' selection and watermarks, and an owner reference to the Node;
//! an existing one keeps what the agent does not own.

use ipam_fake_apiserver::{FakeApiServer, CILIUMNODES};
use serde_json::json;

use crate::support::{http_stub, kill, node_object, until_node, AgentSetup, NODE, NODES};

const TOKEN: &str = "imds-token";
const MAC: &str = "0e:12:34:56:78:9a";

/// IMDSv2: a token from PUT /latest/api/token (with its TTL header), then
/// GETs carrying it; 401 without it.
fn imdsv2(method: &str, target: &str, headers: &[(String, String)]) -> (u16, String) {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    if method == "PUT" && target == "/latest/api/token" {
        return match header("x-aws-ec2-metadata-token-ttl-seconds") {
            Some(_) => (200, TOKEN.into()),
            None => (400, String::new()),
        };
    }
    if header("x-aws-ec2-metadata-token") != Some(TOKEN) {
        return (401, String::new());
    }
    let interface = format!("/latest/meta-data/network/interfaces/macs/{MAC}");
    let answer = match target {
        "/latest/meta-data/instance-id" => "i-0123456789abcdef0".to_string(),
        "/latest/meta-data/instance-type" => "m5.large".into(),
        "/latest/meta-data/placement/availability-zone" => "us-east-1a".into(),
        "/latest/meta-data/mac" => MAC.into(),
        t if t == format!("{interface}/vpc-id") => "vpc-0123456789abcdef0".into(),
        t if t == format!("{interface}/subnet-id") => "subnet-0123456789abcdef0".into(),
        t if t == format!("{interface}/interface-id") => "eni-0123456789abcdef0".into(),
        t if t == format!("{interface}/device-number") => "0".into(),
        _ => return (404, String::new()),
    };
    (200, answer)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_aws_node_registers_from_imdsv2_with_its_selection_and_owner() {
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    server.put(NODES, node_object());
    let imds = http_stub(imdsv2);
    let setup = AgentSetup::new(
        api,
        &[
            "--cloud=aws",
            &format!("--imds-endpoint=http://{imds}"),
            "--eni-first-interface-index=1",
            "--eni-subnet-tags=cluster=a",
            "--eni-security-group-ids=sg-1,sg-2",
            "--pre-allocate=4",
            "--routing=false",
        ],
    );
    let mut agent = setup.start(None);
    setup.wait_ready(None, &mut agent);
    let node = until_node(&server, "registered", |n| {
        n["spec"]["instance-id"] != json!(null)
    })
    .await;
    let spec = &node["spec"];
    assert_eq!(spec["instance-id"], "i-0123456789abcdef0");
    assert_eq!(spec["eni"]["instance-type"], "m5.large");
    assert_eq!(spec["eni"]["availability-zone"], "us-east-1a");
    assert_eq!(spec["eni"]["vpc-id"], "vpc-0123456789abcdef0");
    assert_eq!(spec["eni"]["node-subnet-id"], "subnet-0123456789abcdef0");
    assert_eq!(spec["eni"]["first-interface-index"], 1);
    assert_eq!(spec["eni"]["subnet-tags"], json!({"cluster": "a"}));
    assert_eq!(spec["eni"]["security-groups"], json!(["sg-1", "sg-2"]));
    assert_eq!(spec["ipam"]["pre-allocate"], 4);
    assert_eq!(
        node["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-uid-1"}])
    );
    kill(&mut agent);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_azure_node_registers_from_imds_and_an_existing_node_keeps_the_operators_fields() {
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    server.put(NODES, node_object());
    // Already there, with the operator's pool.
    server.put(
        CILIUMNODES,
        json!({"apiVersion": "cilium.io/v2", "kind": "CiliumNode", "metadata": {"name": NODE},
               "spec": {"ipam": {"pool": {"10.0.0.9": {"resource": "nic-0"}}}}}),
    );
    let document = include_str!("../../../clouds/tests/fixtures/azure_scale_set_vm.json");
    let imds = http_stub(move |method, target, headers| {
        let metadata = headers.iter().any(|(n, v)| n == "metadata" && v == "true");
        if method == "GET" && target.starts_with("/metadata/instance?") && metadata {
            (200, document.to_string())
        } else {
            (
                400,
                "{\"error\":\"Bad request. Required metadata header not specified\"}".into(),
            )
        }
    });
    let setup = AgentSetup::new(
        api,
        &[
            "--cloud=azure",
            &format!("--imds-endpoint=http://{imds}"),
            "--routing=false",
        ],
    );
    let mut agent = setup.start(None);
    setup.wait_ready(None, &mut agent);
    let node = until_node(&server, "registered", |n| {
        n["spec"]["instance-id"] != json!(null)
    })
    .await;
    assert_eq!(
        node["spec"]["instance-id"],
        "/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourcegroups/mc_rg-aks_aks-prod_westeurope/providers/microsoft.compute/virtualmachinescalesets/aks-nodepool1-10706209-vmss/virtualmachines/3",
        "the lower-cased VM resource id, as the operator's Azure mode reads it"
    );
    assert_eq!(node["spec"]["azure"], json!({}));
    assert_eq!(
        node["spec"]["ipam"]["pool"],
        json!({"10.0.0.9": {"resource": "nic-0"}}),
        "the operator's pool is kept"
    );
    kill(&mut agent);
}
