use std::sync::atomic::Ordering;

use ipam_duty::{run_while_leading, DutyMetrics};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;
use crate::testing::Flaky;

fn cilium_node(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "cilium.io/v2", "kind": "CiliumNode",
        "metadata": {"name": name},
        "spec": {},
    }))
    .unwrap()
}

fn listed(view: &CiliumNodesView, names: &[&str]) {
    view.event(Event::Init);
    for name in names {
        view.event(Event::InitApply(cilium_node(name)));
    }
    view.event(Event::InitDone);
}

fn agent_value(name: &str, cluster: &str) -> Vec<u8> {
    json!({"Name": name, "Cluster": cluster,
           "IPAddresses": [{"Type": "InternalIP", "IP": "10.0.0.1"}],
           "IPv4AllocCIDR": {"IP": "10.0.1.0", "Mask": "////AA=="},
           "IPv6AllocCIDR": null, "IPv4HealthIP": "10.0.1.9", "IPv6HealthIP": "",
           "ClusterID": 7, "Source": "local", "EncryptionKey": 0,
           "Labels": null, "Annotations": null, "NodeIdentity": 0, "WireguardPubKey": ""})
    .to_string()
    .into_bytes()
}

fn key(name: &str) -> String {
    keys::node("c1", name)
}

fn kv(key: &str, value: Vec<u8>, revision: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value,
        create_revision: revision,
        mod_revision: revision,
        lease: 0,
    }
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn sweeps_judge_keys_by_their_name() {
    let listed = [
        kv(&key("n1"), agent_value("n1", "c1"), 3),
        kv(&key("gone"), agent_value("gone", "c1"), 4),
        kv(&key("garbled"), b"{not json".to_vec(), 5),
        kv(&key("kept-garbled"), b"[1]".to_vec(), 6),
        kv(&key("renamed"), agent_value("other", "c1"), 7),
        kv(
            &format!("{}deeper/x", keys::nodes_of("c1")),
            b"{}".to_vec(),
            8,
        ),
    ];
    let found = sweep("c1", &listed, &names(&["n1", "kept-garbled", "renamed"]));
    assert_eq!(
        found.stale,
        [(key("gone"), 4), (key("garbled"), 5)],
        "stale by name, malformed or not, with the revision read"
    );
    let malformed: Vec<String> = found.malformed.iter().map(|e| e.to_string()).collect();
    assert_eq!(malformed.len(), 3, "{malformed:?}");
    assert!(malformed[0].contains(&key("garbled")), "{malformed:?}");
    assert!(malformed[1].contains(&key("kept-garbled")), "{malformed:?}");
    assert!(
        malformed[2].contains(&key("renamed")) && malformed[2].contains("field Name"),
        "{malformed:?}"
    );
    assert_eq!(found.foreign, [format!("{}deeper/x", keys::nodes_of("c1"))]);

    let none = sweep("c1", &listed, &BTreeSet::new());
    assert!(
        none.stale.is_empty(),
        "no CiliumNodes at all: nothing is stale"
    );
    assert_eq!(
        none.malformed.len(),
        3,
        "but the malformed are still reported"
    );
}

#[test]
fn the_view_reports_deletions_and_relists() {
    let view = CiliumNodesView::new();
    let synced = view.synced();
    let mut deleted = view.subscribe();
    listed(&view, &["a", "b", "c"]);
    assert!(*synced.borrow());
    view.event(Event::Delete(cilium_node("a")));
    assert_eq!(deleted.try_recv().unwrap(), "a");
    view.event(Event::Apply(cilium_node("d")));
    // A relist that misses "b" (deleted while the watch was down).
    listed(&view, &["c", "d"]);
    assert_eq!(deleted.try_recv().unwrap(), "b");
    assert!(deleted.try_recv().is_err());
    assert_eq!(view.snapshot(), names(&["c", "d"]));
}

struct Running {
    view: Arc<CiliumNodesView>,
    agents: Arc<AgentPodsView>,
    metrics: Arc<DutyMetrics>,
}

const INTERVAL: Duration = Duration::from_secs(60);

/// The duty with no grace and no agent pods (listed, none running).
fn run(view: Arc<CiliumNodesView>, store: Arc<Flaky>) -> Running {
    let agents = Arc::new(AgentPodsView::new());
    pods_listed(&agents, &[]);
    run_with(view, agents, store, Duration::ZERO)
}

fn agent_pod(name: &str, node: &str, phase: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "kube-system", "labels": {"k8s-app": "cilium"}},
        "spec": {"nodeName": node, "containers": []},
        "status": {"phase": phase},
    }))
    .unwrap()
}

/// Agent pods listed: (pod, node) pairs, all running.
fn pods_listed(agents: &AgentPodsView, running: &[(&str, &str)]) {
    agents.event(Event::Init);
    for (pod, node) in running {
        agents.event(Event::InitApply(agent_pod(pod, node, "Running")));
    }
    agents.event(Event::InitDone);
}

fn run_with(
    view: Arc<CiliumNodesView>,
    agents: Arc<AgentPodsView>,
    store: Arc<Flaky>,
    grace: Duration,
) -> Running {
    let (leader, leading) = watch::channel(true);
    let metrics = Arc::new(DutyMetrics::new());
    let mut settings = NodesSettings::new(ClusterInfo::new("c1", 7).unwrap());
    settings.interval = INTERVAL;
    settings.retry_interval = Duration::from_secs(2);
    settings.grace = grace;
    tokio::spawn({
        let (view, agents, metrics) = (view.clone(), agents.clone(), metrics.clone());
        let store: Arc<dyn SharedStore> = store;
        async move {
            // Leading for the life of the task.
            let _leader = leader;
            run_while_leading(
                move || {
                    NodesStore::new(
                        settings.clone(),
                        view.clone(),
                        agents.clone(),
                        store.clone(),
                    )
                },
                leading,
                metrics,
                std::future::pending(),
            )
            .await;
        }
    });
    Running {
        view,
        agents,
        metrics,
    }
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

async fn seeded(names: &[&str]) -> Arc<Flaky> {
    let store = Arc::new(Flaky::default());
    for name in names {
        store
            .inner
            .put_leased(&key(name), agent_value(name, "c1"))
            .await
            .unwrap();
    }
    store
        .inner
        .put_leased(&keys::node("c2", "gone"), agent_value("gone", "c2"))
        .await
        .unwrap();
    store
}

#[tokio::test(start_paused = true)]
async fn stale_nodes_go_at_start_and_as_their_ciliumnode_goes() {
    let store = seeded(&["n1", "n2", "gone", "bad"]).await;
    store
        .inner
        .put(&key("bad"), b"not json".to_vec())
        .await
        .unwrap();
    let view = Arc::new(CiliumNodesView::new());
    listed(&view, &["n1", "n2", "bad"]);
    let running = run(view, store.clone());
    settle().await;
    assert_eq!(
        store.inner.keys(),
        [key("bad"), key("n1"), key("n2"), keys::node("c2", "gone")],
        "the node with no CiliumNode is gone; a malformed value is kept; another cluster's untouched"
    );

    running.view.event(Event::Delete(cilium_node("n2")));
    settle().await;
    assert_eq!(store.inner.text(&key("n2")), None);

    // Deleted, and back (a node re-joining under its name) before the
    // duty heard: its agent's key is current, so kept.
    running.view.event(Event::Apply(cilium_node("n3")));
    store
        .inner
        .put_leased(&key("n3"), agent_value("n3", "c1"))
        .await
        .unwrap();
    running.view.event(Event::Delete(cilium_node("n3")));
    running.view.event(Event::Apply(cilium_node("n3")));
    settle().await;
    assert!(store.inner.text(&key("n3")).is_some());

    tokio::time::sleep(INTERVAL).await;
    assert_eq!(running.metrics.deletions("nodes-store"), 2);
    assert_eq!(running.metrics.failures("nodes-store"), 0);
}

#[tokio::test(start_paused = true)]
async fn no_ciliumnodes_at_all_wipes_nothing() {
    let store = seeded(&["n1", "n2"]).await;
    let view = Arc::new(CiliumNodesView::new());
    let running = run(view, store.clone());
    settle().await;
    assert_eq!(store.inner.keys().len(), 3, "unsynced: the duty waits");
    listed(&running.view, &[]);
    tokio::time::sleep(INTERVAL * 2 + Duration::from_secs(1)).await;
    assert_eq!(
        store.inner.keys().len(),
        3,
        "synced but empty: nothing deleted"
    );
    assert!(running.metrics.runs("nodes-store") >= 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_delete_is_swept_soon_after() {
    let store = seeded(&["n1", "n2"]).await;
    let view = Arc::new(CiliumNodesView::new());
    listed(&view, &["n1", "n2"]);
    let running = run(view, store.clone());
    settle().await;
    store.failing.store(true, Ordering::SeqCst);
    running.view.event(Event::Delete(cilium_node("n2")));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(store.inner.text(&key("n2")).is_some());
    store.failing.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(store.inner.text(&key("n2")), None);
}

const GRACE: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn a_node_registering_across_a_sweep_keeps_its_key() {
    // Its agent wrote the key 4 s before the first sweep; its CiliumNode
    // appears 2 s after it.
    let store = seeded(&["n1", "new"]).await;
    let view = Arc::new(CiliumNodesView::new());
    listed(&view, &["n1"]);
    let agents = Arc::new(AgentPodsView::new());
    pods_listed(&agents, &[]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let running = run_with(view, agents, store.clone(), GRACE);
    settle().await;
    assert!(
        store.inner.text(&key("new")).is_some(),
        "kept at the first sweep"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    running.view.event(Event::Apply(cilium_node("new")));
    tokio::time::sleep(INTERVAL * 3).await;
    assert!(
        store.inner.text(&key("new")).is_some(),
        "its CiliumNode came within the grace: the key stays"
    );
    assert_eq!(running.metrics.deletions("nodes-store"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_stale_key_goes_when_its_grace_ends_not_at_the_next_round() {
    let store = seeded(&["n1", "gone"]).await;
    let view = Arc::new(CiliumNodesView::new());
    listed(&view, &["n1"]);
    let agents = Arc::new(AgentPodsView::new());
    pods_listed(&agents, &[]);
    // A round far longer than the grace: the sweep that deletes is the one
    // due when the grace ends.
    let running = run_with(view, agents, store.clone(), Duration::from_secs(20));
    settle().await;
    assert!(
        store.inner.text(&key("gone")).is_some(),
        "found, not yet deleted"
    );
    tokio::time::sleep(Duration::from_secs(19)).await;
    assert!(store.inner.text(&key("gone")).is_some(), "within its grace");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        store.inner.text(&key("gone")),
        None,
        "deleted as its grace ended"
    );
    tokio::time::sleep(INTERVAL).await;
    assert_eq!(
        running.metrics.deletions("nodes-store"),
        1,
        "counted with its round"
    );
}

#[tokio::test(start_paused = true)]
async fn a_node_whose_agent_runs_keeps_its_key_until_the_agent_stops() {
    let store = seeded(&["n1", "n2", "n3"]).await;
    let view = Arc::new(CiliumNodesView::new());
    listed(&view, &["n1", "n2"]);
    let agents = Arc::new(AgentPodsView::new());
    // n3 has no CiliumNode but its agent runs; n2's agent runs too.
    pods_listed(&agents, &[("cilium-a", "n3"), ("cilium-b", "n2")]);
    let running = run_with(view, agents, store.clone(), GRACE);
    tokio::time::sleep(GRACE * 3).await;
    assert!(store.inner.text(&key("n3")).is_some(), "its agent runs");

    // n2's CiliumNode is deleted while its agent still runs: kept too.
    running.view.event(Event::Delete(cilium_node("n2")));
    tokio::time::sleep(GRACE * 2).await;
    assert!(
        store.inner.text(&key("n2")).is_some(),
        "its agent still runs"
    );

    // The agents stop: a grace later both keys go.
    running
        .agents
        .event(Event::Apply(agent_pod("cilium-a", "n3", "Succeeded")));
    running
        .agents
        .event(Event::Delete(agent_pod("cilium-b", "n2", "Running")));
    tokio::time::sleep(GRACE * 2 + Duration::from_secs(1)).await;
    assert_eq!(store.inner.text(&key("n3")), None);
    assert_eq!(store.inner.text(&key("n2")), None);
    assert!(store.inner.text(&key("n1")).is_some());
}

#[tokio::test(start_paused = true)]
async fn the_duty_waits_for_the_agent_pods_to_be_listed() {
    let store = seeded(&["n1", "gone"]).await;
    let view = Arc::new(CiliumNodesView::new());
    listed(&view, &["n1"]);
    let agents = Arc::new(AgentPodsView::new());
    let running = run_with(view, agents, store.clone(), Duration::ZERO);
    tokio::time::sleep(INTERVAL * 2).await;
    assert!(
        store.inner.text(&key("gone")).is_some(),
        "no sweep before the pods are listed"
    );
    pods_listed(&running.agents, &[]);
    settle().await;
    assert_eq!(store.inner.text(&key("gone")), None);
}
