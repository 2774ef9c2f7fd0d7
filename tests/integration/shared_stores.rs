//! The services and nodes stores fed by watches of the fake API server
//! (Services, EndpointSlices and CiliumNodes created, updated and deleted
//! as another client would) and writing to the in-memory kvstore: what the
//! kvstore holds converges on what the cluster says. The views watch the
//! cluster-wide collections, as the operator does.

use std::sync::Arc;
use std::time::Duration;

use ipam_clustermesh::convert::{GLOBAL, SERVICE_NAME_LABEL};
use ipam_clustermesh::{
    keys, AgentPodsView, CiliumNodesView, ClusterInfo, NodesSettings, NodesStore, PodLabels,
    ServicesSettings, ServicesStore, ServicesView,
};
use ipam_duty::{run_while_leading, Duty, DutyMetrics};
use ipam_kvstore::memory::MemoryStore;
use ipam_kvstore::SharedStore;
use ipam_tests::fake_apiserver::{in_namespace, FakeApiServer, CILIUMNODES, PODS};
use serde_json::{json, Value};
use tokio::sync::watch;

const SERVICES: &str = "/api/v1/services";
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";

fn cluster() -> ClusterInfo {
    ClusterInfo::new("c1", 7).expect("a valid cluster")
}

fn service(name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": "shop", "name": name, "annotations": annotations},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    })
}

fn slice(name: &str, owner: &str, addresses: &[&str]) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"namespace": "shop", "name": name,
                     "labels": {SERVICE_NAME_LABEL: owner}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": addresses.iter().map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
            .collect::<Vec<_>>(),
    })
}

fn cilium_node(name: &str) -> Value {
    json!({"apiVersion": "cilium.io/v2", "kind": "CiliumNode",
           "metadata": {"name": name}, "spec": {}})
}

/// The duty `make` builds, leading until the returned sender is dropped.
fn lead<D: Duty + 'static>(make: impl FnMut() -> D + Send + 'static) -> watch::Sender<bool> {
    let (leader, leading) = watch::channel(true);
    tokio::spawn(run_while_leading(
        make,
        leading,
        Arc::new(DutyMetrics::new()),
        std::future::pending(),
    ));
    leader
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..400 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("not within 10 s: {what}");
}

fn backends(kvstore: &MemoryStore, key: &str) -> Option<Vec<String>> {
    let text = kvstore.text(key)?;
    let value: Value = serde_json::from_str(&text).ok()?;
    let backends = value["backends"].as_object()?;
    Some(backends.keys().cloned().collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_store_follows_services_and_their_slices() {
    let (client, server) = FakeApiServer::start();
    server.put(SERVICES, service("web", json!({GLOBAL: "true"})));
    server.put(SERVICES, service("local", json!({})));
    server.put(SLICES, slice("web-1", "web", &["10.0.1.5"]));
    server.put(SLICES, slice("local-1", "local", &["10.0.1.9"]));

    let view = Arc::new(ServicesView::new());
    tokio::spawn(view.clone().follow(client));
    let kvstore = Arc::new(MemoryStore::new());
    let _leader = lead({
        let (view, store) = (view.clone(), kvstore.clone());
        let settings = ServicesSettings::new(cluster());
        move || {
            let store: Arc<dyn SharedStore> = store.clone();
            ServicesStore::new(settings.clone(), view.clone(), store)
        }
    });

    let web = keys::service("c1", "shop", "web");
    eventually("the global Service is written", || {
        backends(&kvstore, &web) == Some(vec!["10.0.1.5".into()])
    })
    .await;
    assert!(kvstore.text(&keys::services_synced("c1")).is_some());
    assert_eq!(
        kvstore.text(&keys::service("c1", "shop", "local")),
        None,
        "a Service that is not global is not written"
    );

    // A backend added to the slice, and a second slice.
    server.put(SLICES, slice("web-1", "web", &["10.0.1.5", "10.0.1.6"]));
    server.put(SLICES, slice("web-2", "web", &["10.0.1.7"]));
    eventually("the slices' backends are written", || {
        backends(&kvstore, &web)
            == Some(vec![
                "10.0.1.5".into(),
                "10.0.1.6".into(),
                "10.0.1.7".into(),
            ])
    })
    .await;

    // A slice deleted.
    server.delete(&in_namespace(SLICES, "shop"), "web-2");
    eventually("the deleted slice's backend is gone", || {
        backends(&kvstore, &web) == Some(vec!["10.0.1.5".into(), "10.0.1.6".into()])
    })
    .await;

    // The local Service made global, the web one no longer shared.
    server.put(SERVICES, service("local", json!({GLOBAL: "true"})));
    server.put(
        SERVICES,
        service(
            "web",
            json!({GLOBAL: "true", "service.cilium.io/shared": "false"}),
        ),
    );
    let local = keys::service("c1", "shop", "local");
    eventually(
        "the newly global Service written, the unshared one deleted",
        || {
            backends(&kvstore, &local) == Some(vec!["10.0.1.9".into()])
                && kvstore.text(&web).is_none()
        },
    )
    .await;

    // A global Service deleted.
    server.delete(&in_namespace(SERVICES, "shop"), "local");
    eventually("the deleted Service's key is deleted", || {
        kvstore.text(&local).is_none()
    })
    .await;
}

/// A pod on `node` in kube-system, running, with `labels`.
fn running_pod(name: &str, node: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "kube-system", "labels": labels},
           "spec": {"nodeName": node, "containers": []},
           "status": {"phase": "Running"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_store_deletes_the_keys_of_nodes_that_are_gone_once_their_agent_stops() {
    let (client, server) = FakeApiServer::start();
    server.put(CILIUMNODES, cilium_node("n1"));
    server.put(CILIUMNODES, cilium_node("n2"));
    let pods = in_namespace(PODS, "kube-system");
    // n4 has no CiliumNode but cilium-agent runs there; n3 only runs
    // another pod, which the selector leaves out.
    server.put(
        &pods,
        running_pod("cilium-x", "n4", json!({"k8s-app": "cilium"})),
    );
    server.put(
        &pods,
        running_pod("other", "n3", json!({"k8s-app": "other"})),
    );
    let kvstore = Arc::new(MemoryStore::new());
    for name in ["n1", "n2", "n3", "n4"] {
        let value = json!({"Name": name, "Cluster": "c1"}).to_string();
        kvstore
            .put_leased(&keys::node("c1", name), value.into_bytes())
            .await
            .expect("in memory");
    }

    let view = Arc::new(CiliumNodesView::new());
    tokio::spawn(view.clone().follow(client.clone()));
    let agents = Arc::new(AgentPodsView::new());
    let labels: PodLabels = "k8s-app=cilium".parse().expect("labels");
    tokio::spawn(agents.clone().follow(client, "kube-system".into(), labels));
    let _leader = lead({
        let (view, agents, store) = (view.clone(), agents.clone(), kvstore.clone());
        let mut settings = NodesSettings::new(cluster());
        settings.grace = Duration::from_secs(1);
        move || {
            let store: Arc<dyn SharedStore> = store.clone();
            NodesStore::new(settings.clone(), view.clone(), agents.clone(), store)
        }
    });

    eventually(
        "the node with no CiliumNode and no agent is deleted after its grace",
        || {
            kvstore.keys()
                == [
                    keys::node("c1", "n1"),
                    keys::node("c1", "n2"),
                    keys::node("c1", "n4"),
                ]
        },
    )
    .await;
    server.delete(CILIUMNODES, "n2");
    eventually("the deleted CiliumNode's key is deleted", || {
        !kvstore.keys().contains(&keys::node("c1", "n2"))
    })
    .await;
    assert!(
        kvstore.keys().contains(&keys::node("c1", "n4")),
        "cilium-agent runs on n4"
    );
    server.delete(&pods, "cilium-x");
    eventually("n4's key goes a grace after its agent stopped", || {
        kvstore.keys() == [keys::node("c1", "n1")]
    })
    .await;
}
