//! A node's reboot as the agent sees it with its state under /run (a tmpfs
//! on a node, the deployed default): the state directory comes back empty
//! while the CiliumNode still lists the last boot's addresses in
//! status.ipam.used and the pods still exist (the kubelet starts new
//! sandboxes for them). The old entries are withdrawn, the runtime's DELs
//! of the old sandboxes succeed, and the new sandboxes get the addresses
//! again, so nothing leaks across the reboot.

use ipam_cni::protocol::{AgentRequest, AgentResponse};
use ipam_fake_apiserver::{FakeApiServer, CILIUMNODES};
use serde_json::{json, Value};

use crate::handshake::{add, address, attachment, pod, request};
use crate::support::{cilium_node, kill, node_object, pool, until_node, AgentSetup, NODES};

fn used(node: &Value) -> Value {
    node["status"]["ipam"]["used"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_reboot_the_last_boots_addresses_are_withdrawn_and_handed_out_again() {
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
    for (container, name) in [("a-boot1", "a"), ("b-boot1", "b")] {
        request(setup.socket(), add(container, name)).await;
    }
    let both = json!({
        "10.0.1.10": {"owner": "default/a", "resource": "eni-1"},
        "10.0.1.11": {"owner": "default/b", "resource": "eni-1"},
    });
    until_node(&server, "the first boot's addresses published", |n| {
        used(n) == both
    })
    .await;

    // The reboot: the agent goes, and /run comes back empty (the hostPath
    // is created again, with nothing in it).
    kill(&mut agent);
    let state_dir = setup
        .state_file()
        .parent()
        .expect("the state file's directory")
        .to_path_buf();
    std::fs::remove_dir_all(&state_dir).expect("the state directory emptied");
    std::fs::create_dir_all(&state_dir).expect("the state directory made again");

    let mut agent = setup.start(None);
    setup.wait_ready(None, &mut agent);
    until_node(&server, "the last boot's entries withdrawn", |n| {
        used(n).as_object().is_none_or(|entries| entries.is_empty())
    })
    .await;
    // The runtime tears the old sandboxes down: nothing to free, and fine.
    for container in ["a-boot1", "b-boot1"] {
        let done = request(
            setup.socket(),
            AgentRequest::Del {
                attachment: attachment(container),
            },
        )
        .await;
        assert_eq!(done, AgentResponse::Done, "DEL of {container}");
    }
    // The kubelet's new sandboxes for the same pods get the same addresses
    // back: none was kept for a sandbox that no longer exists.
    let a = request(setup.socket(), add("a-boot2", "a")).await;
    let b = request(setup.socket(), add("b-boot2", "b")).await;
    assert_eq!(
        (address(&a).as_str(), address(&b).as_str()),
        ("10.0.1.10", "10.0.1.11")
    );
    until_node(&server, "the new boot's addresses published", |n| {
        used(n) == both
    })
    .await;
    kill(&mut agent);
}
