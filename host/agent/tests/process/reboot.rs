//! A node's reboot as the agent sees it with its state under /run (a tmpfs
//! on a node, the deployed default): the state directory comes back empty
//! while the CiliumNode still lists the last boot's addresses in
//! status.ipam.used and the pods still exist (the kubelet starts new
//! sandboxes for them). The old entries are not handed out while they are
//! listed, then withdrawn; the runtime's DELs of the old sandboxes succeed,
//! and their addresses are handed out again, so nothing leaks across the
//! reboot.

use ipam_cni::protocol::{AgentRequest, AgentResponse};
use ipam_fake_apiserver::CILIUMNODES;
use serde_json::{json, Value};

use crate::handshake::{add, address, agent_with_pods_a_and_b, attachment, request};
use crate::support::{kill, metric, until, until_node};

fn used(node: &Value) -> Value {
    node["status"]["ipam"]["used"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_reboot_the_last_boots_addresses_are_withdrawn_and_handed_out_again() {
    let (server, setup, mut agent) = agent_with_pods_a_and_b().await;
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

    // The reboot: the agent goes, and /run comes back empty (the agent
    // makes its state directory again itself).
    kill(&mut agent);
    let state_dir = setup
        .state_file()
        .parent()
        .expect("the state file's directory")
        .to_path_buf();
    std::fs::remove_dir_all(&state_dir).expect("the state directory emptied");

    // Until the agent has withdrawn the last boot's entries, it hands none
    // of them out: its status patches are refused for now.
    server.fail_status_writes(CILIUMNODES, true);
    let mut agent = setup.start(None);
    setup.wait_ready(None, &mut agent);
    let a = request(setup.socket(), add("a-boot2", "a")).await;
    assert_eq!(address(&a), "10.0.1.12", "an address the last boot listed");
    server.fail_status_writes(CILIUMNODES, false);
    until_node(&server, "the last boot's entries withdrawn", |n| {
        used(n) == json!({"10.0.1.12": {"owner": "default/a", "resource": "eni-1"}})
    })
    .await;
    // Counted once the agent's own view holds the change.
    until("a status patch counted", || {
        let page = setup.metrics(None);
        match metric(&page, "ipam_agent_status_patches_total{result=\"ok\"}") {
            Some(count) if count >= 1.0 => Ok(()),
            _ => Err(page),
        }
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
    // The kubelet's new sandbox for b gets the first address back: none was
    // kept for a sandbox that no longer exists.
    let b = request(setup.socket(), add("b-boot2", "b")).await;
    assert_eq!(address(&b), "10.0.1.10");
    until_node(&server, "the new boot's addresses published", |n| {
        used(n)
            == json!({
                "10.0.1.10": {"owner": "default/b", "resource": "eni-1"},
                "10.0.1.12": {"owner": "default/a", "resource": "eni-1"},
            })
    })
    .await;
    kill(&mut agent);
}
