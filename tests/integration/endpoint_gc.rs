//! The CiliumEndpoint GC against the fake API server: rounds driven by
//! hand (`ready`, then `round`), caches fed by real watches.

use std::time::Duration;

use http::Method;
use ipam_duty::{Duty, RoundReport};
use ipam_k8s::endpoint_gc::{Cached, EndpointGc, EndpointGcSettings};
use ipam_tests::fake_apiserver::{
    in_namespace, FakeApiServer, Logged, CILIUMENDPOINTS, CILIUMNODES, PODS,
};
use serde_json::{json, Value};

const NS: &str = "default";

fn pod(name: &str, phase: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": NS},
           "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
           "status": {"phase": phase}})
}

fn node(name: &str) -> Value {
    json!({"apiVersion": "cilium.io/v2", "kind": "CiliumNode", "metadata": {"name": name}})
}

/// A CiliumEndpoint with its uid and owners (kind, name).
fn cep(name: &str, uid: &str, owners: &[(&str, &str)]) -> Value {
    let owners: Vec<Value> = owners
        .iter()
        .map(|(kind, owner)| json!({"apiVersion": "v1", "kind": kind, "name": owner, "uid": format!("owner-{owner}")}))
        .collect();
    json!({"apiVersion": "cilium.io/v2", "kind": "CiliumEndpoint",
           "metadata": {"name": name, "namespace": NS, "uid": uid, "ownerReferences": owners},
           "status": {"id": 1234, "state": "ready"}})
}

fn endpoints() -> String {
    in_namespace(CILIUMENDPOINTS, NS)
}

fn exists(server: &FakeApiServer, name: &str) -> bool {
    server.get(&endpoints(), name).is_some()
}

/// A GC whose caches hold what the server holds now.
async fn ready_gc(client: kube::Client) -> EndpointGc {
    let mut gc = EndpointGc::new(client, EndpointGcSettings::default());
    tokio::time::timeout(Duration::from_secs(10), gc.ready())
        .await
        .expect("caches synced in time");
    gc
}

/// Wait until the GC's caches hold what `expected` says: the watches have
/// delivered what the test wrote.
async fn cached(gc: &EndpointGc, expected: Cached) {
    for _ in 0..400 {
        if gc.cached() == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("caches hold {:?}, not {expected:?}", gc.cached());
}

fn deletes(server: &FakeApiServer) -> Vec<Logged> {
    server
        .log()
        .into_iter()
        .filter(|l| l.method == Method::DELETE)
        .collect()
}

/// (path, uid precondition, status answered) of each DELETE.
fn deleted(server: &FakeApiServer) -> Vec<(String, Value, u16)> {
    deletes(server)
        .into_iter()
        .map(|l| {
            let uid = l.body.unwrap_or_default()["preconditions"]["uid"].clone();
            (l.path, uid, l.code)
        })
        .collect()
}

fn path(name: &str) -> String {
    format!("{}/{name}", endpoints())
}

const DELETED_ONE: Result<RoundReport, String> = Ok(RoundReport { deletions: 1 });
const DELETED_NONE: Result<RoundReport, String> = Ok(RoundReport { deletions: 0 });

#[tokio::test]
async fn an_orphan_is_deleted_on_the_second_round_not_the_first() {
    let (client, server) = FakeApiServer::start();
    server.put(
        CILIUMENDPOINTS,
        cep("pod-gone", "u-1", &[("Pod", "pod-gone")]),
    );
    server.put(CILIUMENDPOINTS, cep("no-owner", "u-2", &[]));
    let mut gc = ready_gc(client).await;

    assert_eq!(gc.round().await, DELETED_NONE);
    assert!(
        deletes(&server).is_empty(),
        "nothing deleted on the first round"
    );

    assert_eq!(gc.round().await, Ok(RoundReport { deletions: 2 }));
    assert!(!exists(&server, "pod-gone") && !exists(&server, "no-owner"));
    // Each delete names the uid judged, as a precondition.
    assert_eq!(
        deleted(&server),
        [
            (path("no-owner"), json!("u-2"), 200),
            (path("pod-gone"), json!("u-1"), 200),
        ]
    );
}

#[tokio::test]
async fn endpoints_of_live_owners_are_kept_and_of_a_finished_pod_deleted() {
    let (client, server) = FakeApiServer::start();
    server.put(PODS, pod("web", "Running"));
    server.put(PODS, pod("starting", "Pending"));
    server.put(PODS, pod("job", "Succeeded"));
    server.put(CILIUMNODES, node("n1"));
    server.put(CILIUMENDPOINTS, cep("web", "u-web", &[("Pod", "web")]));
    server.put(
        CILIUMENDPOINTS,
        cep("starting", "u-starting", &[("Pod", "starting")]),
    );
    server.put(CILIUMENDPOINTS, cep("job", "u-job", &[("Pod", "job")]));
    server.put(
        CILIUMENDPOINTS,
        cep("health", "u-health", &[("CiliumNode", "n1")]),
    );
    server.put(
        CILIUMENDPOINTS,
        cep("vm", "u-vm", &[("VirtualMachine", "vm")]),
    );
    let mut gc = ready_gc(client).await;

    assert_eq!(gc.round().await, DELETED_NONE);
    assert_eq!(gc.round().await, DELETED_ONE);
    assert_eq!(deleted(&server), [(path("job"), json!("u-job"), 200)]);
    // Wait for the watch to report the deletion, so the next round is
    // judged on the server's state.
    cached(
        &gc,
        Cached {
            endpoints: 4,
            pods: 3,
            nodes: 1,
        },
    )
    .await;
    assert_eq!(gc.round().await, DELETED_NONE);
    for kept in ["web", "starting", "health", "vm"] {
        assert!(exists(&server, kept), "{kept} kept");
    }
}

#[tokio::test]
async fn an_endpoint_whose_pod_comes_after_the_first_round_is_kept() {
    let (client, server) = FakeApiServer::start();
    server.put(CILIUMENDPOINTS, cep("late", "u-late", &[("Pod", "late")]));
    let mut gc = ready_gc(client).await;
    // The endpoint is in the cache, its pod not yet: suspected only.
    assert_eq!(gc.round().await, DELETED_NONE);

    server.put(PODS, pod("late", "Pending"));
    cached(
        &gc,
        Cached {
            endpoints: 1,
            pods: 1,
            nodes: 0,
        },
    )
    .await;
    assert_eq!(gc.round().await, DELETED_NONE);
    assert_eq!(gc.round().await, DELETED_NONE);
    assert!(exists(&server, "late"));
    assert!(deletes(&server).is_empty());
}

#[tokio::test]
async fn an_endpoint_re_created_between_rounds_is_not_deleted_by_the_stale_uid() {
    let (client, server) = FakeApiServer::start();
    server.put(CILIUMNODES, node("n1"));
    server.put(CILIUMENDPOINTS, cep("web", "u-old", &[("Pod", "web")]));
    let mut gc = ready_gc(client).await;
    assert_eq!(gc.round().await, DELETED_NONE);

    // Re-created under the same name, its pod not (yet) there either, and
    // the GC's cache still showing the old one.
    server.pause_watches(CILIUMENDPOINTS);
    server.delete(CILIUMENDPOINTS, "web");
    server.put(CILIUMENDPOINTS, cep("web", "u-new", &[("Pod", "web")]));
    assert_eq!(
        gc.round().await,
        DELETED_NONE,
        "refused by the precondition"
    );
    assert_eq!(deleted(&server), [(path("web"), json!("u-old"), 409)]);
    assert_eq!(
        server.get(&endpoints(), "web").unwrap()["metadata"]["uid"],
        "u-new"
    );

    // The cache catches up (a kept endpoint written last marks that it
    // has): the new endpoint's count starts from its own first round.
    server.resume_watches(CILIUMENDPOINTS);
    server.put(
        CILIUMENDPOINTS,
        cep("marker", "u-marker", &[("CiliumNode", "n1")]),
    );
    cached(
        &gc,
        Cached {
            endpoints: 2,
            pods: 0,
            nodes: 1,
        },
    )
    .await;
    assert_eq!(gc.round().await, DELETED_NONE, "first round of u-new");
    assert_eq!(deletes(&server).len(), 1);
    assert_eq!(gc.round().await, DELETED_ONE, "second round of u-new");
    assert_eq!(
        deleted(&server),
        [
            (path("web"), json!("u-old"), 409),
            (path("web"), json!("u-new"), 200),
        ]
    );
    assert!(!exists(&server, "web"));
    assert!(exists(&server, "marker"));
}

#[tokio::test]
async fn a_round_before_the_caches_are_synced_is_refused() {
    let (client, server) = FakeApiServer::start();
    server.put(CILIUMENDPOINTS, cep("orphan", "u-1", &[]));
    let mut gc = EndpointGc::new(client, EndpointGcSettings::default());
    assert!(gc.round().await.is_err());
    assert!(gc.round().await.is_err());
    assert!(exists(&server, "orphan"));
    assert!(deletes(&server).is_empty());
}

#[tokio::test]
async fn a_failed_delete_fails_the_round_and_is_retried_on_the_next() {
    let (client, server) = FakeApiServer::start();
    server.put(CILIUMENDPOINTS, cep("orphan", "u-1", &[]));
    let mut gc = ready_gc(client).await;
    assert_eq!(gc.round().await, DELETED_NONE);

    server.fail_writes(CILIUMENDPOINTS, true);
    let failed = gc.round().await.expect_err("the delete failed");
    assert!(failed.contains("default/orphan"), "{failed}");
    assert!(exists(&server, "orphan"));
    // Still a suspect: the next round deletes it, without a round to wait.
    server.fail_writes(CILIUMENDPOINTS, false);
    assert_eq!(gc.round().await, DELETED_ONE);
    assert_eq!(
        deleted(&server),
        [
            (path("orphan"), json!("u-1"), 500),
            (path("orphan"), json!("u-1"), 200),
        ]
    );
}
