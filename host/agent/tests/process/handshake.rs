//! The agent against the fake API server, through the plugin's protocol:
//! status.ipam.used published with owner and interface, the release
//! handshake answered as cilium-agent answers it, and only the agent's own
//! status fields written.

use std::path::PathBuf;
use std::time::Duration;

use ipam_cni::protocol::{ask, AgentRequest, AgentResponse, Attachment, PodRef};
use ipam_fake_apiserver::{FakeApiServer, CILIUMNODES};
use serde_json::{json, Value};

use crate::support::{
    cilium_node, kill, node_object, pool, until, until_node, AgentSetup, Running, NODE, NODES,
};

pub fn attachment(id: &str) -> Attachment {
    serde_json::from_value(json!({"container_id": id, "ifname": "eth0"})).expect("an attachment")
}

pub async fn request(socket: PathBuf, request: AgentRequest) -> AgentResponse {
    tokio::task::spawn_blocking(move || ask(&socket, &request, Duration::from_secs(10)))
        .await
        .expect("the blocking task")
        .expect("the agent answers")
}

pub fn add(id: &str, pod: &str) -> AgentRequest {
    AgentRequest::Add {
        attachment: attachment(id),
        netns: format!("/run/netns/{id}"),
        pod: Some(PodRef {
            namespace: "default".into(),
            name: pod.into(),
        }),
    }
}

pub fn address(response: &AgentResponse) -> String {
    match response {
        AgentResponse::Allocated(allocation) => allocation.address.addr().to_string(),
        other => panic!("not allocated: {other:?}"),
    }
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"nodeName": NODE, "containers": []}})
}

/// The fake API server holding the Node, its CiliumNode with four pool
/// addresses and the pods `a` and `b`, and a ready agent for it, without
/// routes.
pub async fn agent_with_pods_a_and_b() -> (FakeApiServer, AgentSetup, Running) {
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    server.put(NODES, node_object());
    server.put(CILIUMNODES, cilium_node(&pool(4)));
    for name in ["a", "b"] {
        server.put("/api/v1/pods", pod(name));
    }
    let setup = AgentSetup::new(api, &["--instance-id=i-1", "--routing=false"]);
    let mut agent = setup.start(None);
    setup.wait_ready(None, &mut agent);
    (server, setup, agent)
}

#[tokio::test(flavor = "multi_thread")]
async fn used_is_published_and_the_handshake_is_answered_as_cilium_agent_does() {
    let (server, setup, mut agent) = agent_with_pods_a_and_b().await;
    let socket = setup.socket();

    let a = request(socket.clone(), add("ca", "a")).await;
    assert_eq!(address(&a), "10.0.1.10");
    match &a {
        AgentResponse::Allocated(allocation) => {
            assert_eq!(
                allocation.address.to_string(),
                "10.0.1.10/24",
                "the subnet's prefix"
            );
            assert_eq!(
                allocation.gateway,
                Some("10.0.1.1".parse().unwrap()),
                "the subnet's router"
            );
        }
        _ => unreachable!(),
    }
    until_node(&server, "a published", |n| {
        n["status"]["ipam"]["used"]["10.0.1.10"]
            == json!({"owner": "default/a", "resource": "eni-1"})
    })
    .await;

    // The operator marks a used and an unused address.
    server.patch(
        CILIUMNODES,
        NODE,
        &json!({"status": {"ipam": {"release-ips": {
            "10.0.1.10": "marked-for-release", "10.0.1.11": "marked-for-release"}}}}),
    );
    until_node(&server, "answered", |n| {
        n["status"]["ipam"]["release-ips"]
            == json!({"10.0.1.10": "do-not-release", "10.0.1.11": "ready-for-release"})
    })
    .await;
    // An address in the handshake is not handed out.
    let b = request(socket.clone(), add("cb", "b")).await;
    assert_eq!(address(&b), "10.0.1.12");

    // Released and gone from the pool: the entry goes.
    let mut smaller = pool(4);
    smaller.retain(|ip| ip != "10.0.1.11");
    server.update(CILIUMNODES, NODE, |node| {
        node["spec"]["ipam"]["pool"] = cilium_node(&smaller)["spec"]["ipam"]["pool"].clone();
        node["status"]["ipam"]["release-ips"]["10.0.1.11"] = json!("released");
    });
    until_node(&server, "released entry removed", |n| {
        n["status"]["ipam"]["release-ips"]
            .get("10.0.1.11")
            .is_none()
    })
    .await;

    // DEL takes the address out of used; a second DEL is fine.
    for _ in 0..2 {
        let done = request(
            socket.clone(),
            AgentRequest::Del {
                attachment: attachment("ca"),
            },
        )
        .await;
        assert_eq!(done, AgentResponse::Done);
    }
    let node = until_node(&server, "a unpublished", |n| {
        n["status"]["ipam"]["used"].get("10.0.1.10").is_none()
    })
    .await;
    assert_eq!(
        node["status"]["ipam"]["used"],
        json!({"10.0.1.12": {"owner": "default/b", "resource": "eni-1"}})
    );

    // Every write of the agent's to the CiliumNode: the registration (a
    // patch of the object) and status patches naming only used and
    // release-ips.
    for write in server.writes() {
        if !write.path.starts_with(CILIUMNODES) {
            continue;
        }
        let body = write.body.clone().unwrap_or_default();
        if write.path.ends_with("/status") {
            let ipam = body["status"]["ipam"].as_object().expect("status.ipam");
            assert!(
                ipam.keys().all(|k| k == "used" || k == "release-ips"),
                "{body}"
            );
            assert_eq!(
                body["status"].as_object().map(|o| o.len()),
                Some(1),
                "{body}"
            );
        } else {
            assert!(
                body.get("status").is_none(),
                "the registration names no status: {body}"
            );
        }
    }
    // A CHECK of an attachment the agent never saw fails, and is counted
    // by its result, as every CNI error is.
    match request(
        socket.clone(),
        AgentRequest::Check {
            attachment: attachment("never-added"),
        },
    )
    .await
    {
        AgentResponse::Failed(error) => assert_eq!(error.code, 3, "{error:?}"),
        other => panic!("an unknown attachment checked: {other:?}"),
    }
    // Counted once the answer is written: polled for.
    let metrics = until("the failed CHECK counted", || {
        let metrics = setup.metrics(None);
        match metrics.contains(
            "ipam_agent_cni_requests_total{command=\"CHECK\",result=\"unknown-container\"} 1",
        ) {
            true => Ok(metrics),
            false => Err(metrics),
        }
    })
    .await;
    assert!(
        metrics.contains("ipam_agent_cni_requests_total{command=\"ADD\",result=\"ok\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ipam_agent_handshake_answers_total{answer=\"ready-for-release\"} 1"),
        "{metrics}"
    );
    kill(&mut agent);
}
