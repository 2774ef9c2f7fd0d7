//! Registration against metadata-service stubs written from AWS's IMDSv2
//! and Azure's IMDS references: the CiliumNode is created with the facts,
//! the flags' selection and watermarks, and an owner reference to the Node;
//! an existing one keeps what the agent does not own.

use ipam_fake_apiserver::{FakeApiServer, CILIUMNODES};
use serde_json::json;

use crate::support::{http_stub, kill, node_object, until, until_node, AgentSetup, NODE, NODES};

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

/// The Node with a provider id and the cloud controller manager's labels.
fn node_with_provider_id(provider_id: &str) -> serde_json::Value {
    let mut node = node_object();
    node["spec"] = json!({"providerID": provider_id});
    node["metadata"]["labels"] = json!({
        "node.kubernetes.io/instance-type": "m6i.large",
        "topology.kubernetes.io/zone": "us-east-1a",
    });
    node
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_metadata_service_the_instance_id_is_the_nodes_provider_id() {
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    // Registered by the kubelet before the cloud controller manager set
    // its provider id.
    server.put(NODES, node_object());
    let setup = AgentSetup::new(api, &["--routing=false"]);
    let (mut agent, log) = setup.start_logged(None);
    let health = setup.health.clone();
    // Three failed attempts (1 s, 2 s, then 4 s to wait), each shown in
    // /readyz, and one warning in the log, not one per attempt.
    let body = until(
        "/readyz after the third attempt",
        || match crate::support::http_get(&health, "/readyz") {
            Some((503, body)) if body.contains("retrying in 4s") => Ok(body),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    assert!(
        body.contains("no instance id for Node n1")
            && body.contains("--cloud=none")
            && body.contains("spec.providerID"),
        "{body}"
    );
    let text = std::fs::read_to_string(&log).expect("the agent's log");
    let warnings = text
        .lines()
        .filter(|line| line.contains("WARN") && line.contains("reading the instance's facts"))
        .count();
    assert_eq!(warnings, 1, "one warning for the same error:\n{text}");
    assert!(
        server.get(CILIUMNODES, NODE).is_none(),
        "nothing registered yet"
    );

    server.put(
        NODES,
        node_with_provider_id("aws:///us-east-1a/i-0123456789abcdef0"),
    );
    setup.wait_ready(None, &mut agent);
    let node = until_node(&server, "registered", |n| {
        n["spec"]["instance-id"] != json!(null)
    })
    .await;
    assert_eq!(node["spec"]["instance-id"], "i-0123456789abcdef0");
    assert_eq!(node["spec"]["eni"]["availability-zone"], "us-east-1a");
    assert_eq!(node["spec"]["eni"]["instance-type"], "m6i.large");
    assert!(
        node["spec"]["eni"].get("vpc-id").is_none(),
        "a fact not known is not named: {node}"
    );
    let text = std::fs::read_to_string(&log).expect("the agent's log");
    assert!(
        text.contains("Node spec.providerID") && text.contains("instance facts read"),
        "{text}"
    );
    kill(&mut agent);
}

#[tokio::test(flavor = "multi_thread")]
async fn when_the_metadata_service_fails_the_provider_id_stands_in_and_known_facts_stay() {
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    server.put(
        NODES,
        node_with_provider_id("aws:///us-east-1a/i-0123456789abcdef0"),
    );
    // Registered by an earlier run that had the metadata service.
    server.put(
        CILIUMNODES,
        json!({"apiVersion": "cilium.io/v2", "kind": "CiliumNode", "metadata": {"name": NODE},
               "spec": {"instance-id": "i-0123456789abcdef0",
                        "eni": {"vpc-id": "vpc-1", "node-subnet-id": "subnet-1"}}}),
    );
    let imds = http_stub(|_, _, _| (500, "down for maintenance".into()));
    let setup = AgentSetup::new(
        api,
        &[
            "--cloud=aws",
            &format!("--imds-endpoint=http://{imds}"),
            "--routing=false",
        ],
    );
    let mut agent = setup.start(None);
    setup.wait_ready(None, &mut agent);
    let node = until_node(&server, "registered again", |n| {
        n["spec"]["eni"]["instance-type"] == "m6i.large"
    })
    .await;
    assert_eq!(node["spec"]["instance-id"], "i-0123456789abcdef0");
    assert_eq!(node["spec"]["eni"]["vpc-id"], "vpc-1", "kept: {node}");
    assert_eq!(node["spec"]["eni"]["node-subnet-id"], "subnet-1");
    kill(&mut agent);

    // A provider id of another cloud is refused, naming both.
    server.put(
        NODES,
        node_with_provider_id(
            "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm",
        ),
    );
    let mut agent = setup.start(None);
    let health = setup.health.clone();
    until(
        "/readyz naming the other cloud",
        || match crate::support::http_get(&health, "/readyz") {
            Some((503, body))
                if body.contains("azure instance") && body.contains("--cloud=aws") =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    kill(&mut agent);
}
