//! The Kubernetes layer against a fake API server behind kube's mock
//! service: the CiliumNode store (with what it keeps for the other-writer
//! watch: other managers' contested managedFields, the nodes Cilium's IPAM
//! skips), merge patches, the release handshake through status, leader
//! election and handover.

use ipam_tests as common;
use ipam_tests::fake_apiserver;

use std::sync::Arc;
use std::time::Duration;

use common::{engine_settings, mock, MOCK_SETTINGS};
use fake_apiserver::{FakeApiServer, CILIUMNODES};
use http::Method;
use ipam_ciliumnode::ReleaseState;
use ipam_ciliumnode::{go_agent, NodeUpdate};
use ipam_engine::Maintainer;
use ipam_engine::Metrics;
use ipam_engine::NodeStore;
use ipam_engine::{IpamMode, LoopSettings, MaintenanceSettings};
use ipam_k8s::leader_metrics::LeaderMetrics;
use ipam_k8s::lease::{LeaderElection, LeaseConfig};
use ipam_k8s::operator::Operator;
use ipam_k8s::store::KubeNodeStore;
use serde_json::{json, Value};
use tokio::sync::watch;

/// A CiliumNode as cilium-agent in ENI mode registers it (Cilium 1.16's Go
/// shape: `"azure": {}`, `"alibaba-cloud": {}` and all), with its health
/// address, an encryption key and a status field this operator does not
/// model.
fn agent_node(name: &str, instance: &str, pre: u32) -> Value {
    with_agent_fields(
        go_agent::object(go_agent::ENI_AGENT_REGISTERED, name, instance),
        pre,
    )
}

/// [`agent_node`] as cilium-agent in Azure mode registers it (`"eni": {}`).
fn azure_agent_node(name: &str, instance: &str, pre: u32) -> Value {
    with_agent_fields(
        go_agent::object(go_agent::AZURE_AGENT_REGISTERED, name, instance),
        pre,
    )
}

fn with_agent_fields(mut node: Value, pre: u32) -> Value {
    node["spec"]["ipam"]["pre-allocate"] = json!(pre);
    node["spec"]["health"] = json!({"ipv4": "10.200.0.7"});
    node["spec"]["encryption"] = json!({"key": 3});
    node["status"]["agent-specific"] = json!({"x": 1});
    node
}

async fn synced_store(client: kube::Client, manager: &str) -> Arc<KubeNodeStore> {
    let store = Arc::new(KubeNodeStore::new(client, manager));
    tokio::spawn(store.clone().run());
    let mut synced = store.synced();
    tokio::time::timeout(Duration::from_secs(10), synced.wait_for(|s| *s))
        .await
        .expect("synced in time")
        .expect("store alive");
    store
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..400 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn pool_len(server: &FakeApiServer, name: &str) -> usize {
    server
        .get(CILIUMNODES, name)
        .and_then(|n| n["spec"]["ipam"]["pool"].as_object().map(|p| p.len()))
        .unwrap_or(0)
}

#[tokio::test]
async fn a_new_ciliumnode_gets_its_pool_and_interfaces_and_unknown_fields_survive() {
    let (client, server) = FakeApiServer::start();
    let store = synced_store(client, "ipam-operator").await;
    server.put(CILIUMNODES, agent_node("n1", "i-0001", 8));
    eventually("the store sees n1", || {
        futures::executor::block_on(store.get("n1"))
            .ok()
            .flatten()
            .is_some()
    })
    .await;
    let maintainer = maintainer(store.clone(), engine_settings(false)).await;
    maintainer.maintain("n1", 0).await.unwrap();

    let n1 = server.get(CILIUMNODES, "n1").unwrap();
    assert_eq!(
        n1["spec"]["ipam"]["pool"].as_object().map(|p| p.len()),
        Some(8)
    );
    assert!(
        n1["status"]["eni"]["enis"]
            .as_object()
            .is_some_and(|e| !e.is_empty()),
        "{n1}"
    );
    // Everything the agent wrote is still there.
    assert_eq!(n1["spec"]["health"]["ipv4"], "10.200.0.7");
    assert_eq!(n1["spec"]["encryption"]["key"], 3);
    assert_eq!(n1["spec"]["addresses"][0]["ip"], "10.0.1.17");
    assert_eq!(n1["spec"]["bootid"], "3f9c2b1a-7d4e-4c6b-8a2f-5e1d0c9b8a7f");
    for empty in ["azure", "alibaba-cloud", "ingress"] {
        assert_eq!(n1["spec"][empty], json!({}), "spec.{empty} as Go wrote it");
    }
    assert_eq!(n1["spec"]["ipam"]["pools"], json!({}));
    assert_eq!(n1["status"]["agent-specific"]["x"], 1);
    assert_eq!(n1["metadata"]["labels"]["kubernetes.io/hostname"], "n1");
    // Written as merge patches by the operator's field manager.
    let patches: Vec<_> = server.writes();
    assert!(!patches.is_empty());
    assert!(
        patches
            .iter()
            .all(|w| w.method == Method::PATCH && w.query.contains("fieldManager=ipam-operator")),
        "{patches:?}"
    );
}

/// A maintainer over the mock cloud and `store`, its cache filled.
async fn maintainer(
    store: Arc<KubeNodeStore>,
    settings: ipam_engine::MaintenanceSettings,
) -> Maintainer {
    let cloud = Arc::new(mock(MOCK_SETTINGS).await);
    let cache = Arc::new(ipam_engine::InstanceCache::new());
    cache.resync_all(cloud.as_ref()).await.unwrap();
    Maintainer::new(cloud, cache, store, settings, Arc::new(Metrics::new()))
}

#[tokio::test]
async fn a_conflict_is_retried_and_the_agents_concurrent_change_survives() {
    let (client, server) = FakeApiServer::start();
    server.put(CILIUMNODES, agent_node("n1", "i-0001", 8));
    let store = synced_store(client, "ipam-operator").await;
    // The agent writes status.ipam.used; the operator has not seen it yet
    // when it writes its own fields, and the server answers 409 twice.
    server.patch(
        CILIUMNODES,
        "n1",
        &json!({"status": {"ipam": {"used": {"10.0.0.9": {"owner": "default/web"}}}}}),
    );
    server.conflict_next_patches(2);
    let update = NodeUpdate {
        release_ips: [(
            "10.0.0.10".to_string(),
            Some(ReleaseState::MarkedForRelease),
        )]
        .into(),
        operator_error: Some("subnet full".into()),
        ..Default::default()
    };
    let node = store
        .update("n1", &update)
        .await
        .expect("retried past the conflicts");
    assert_eq!(
        node.status.ipam.release_ips["10.0.0.10"],
        ReleaseState::MarkedForRelease
    );
    let n1 = server.get(CILIUMNODES, "n1").unwrap();
    assert_eq!(
        n1["status"]["ipam"]["used"]["10.0.0.9"]["owner"], "default/web",
        "the agent's write survived"
    );
    assert_eq!(
        n1["status"]["ipam"]["operator-status"]["error"],
        "subnet full"
    );
    let status_patches = server
        .writes()
        .into_iter()
        .filter(|w| w.path.ends_with("/n1/status"))
        .count();
    assert_eq!(status_patches, 3, "two conflicts, then success");
    // An unknown node is NotFound, not a retry loop.
    assert!(matches!(
        store.update("nope", &update).await,
        Err(ipam_engine::StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn the_release_handshake_round_trips_through_status_release_ips() {
    let (client, server) = FakeApiServer::start();
    server.put(CILIUMNODES, agent_node("n1", "i-0001", 8));
    let store = synced_store(client, "ipam-operator").await;
    let mut settings = engine_settings(false);
    settings.release_delay = Duration::ZERO;
    let maintainer = maintainer(store.clone(), settings).await;
    maintainer.maintain("n1", 0).await.unwrap();
    assert_eq!(pool_len(&server, "n1"), 8);

    // The node's owner lowers pre-allocate: 6 addresses are excess and marked.
    server.patch(
        CILIUMNODES,
        "n1",
        &json!({"spec": {"ipam": {"pre-allocate": 2}}}),
    );
    let seen = |store: &Arc<KubeNodeStore>, f: fn(&ipam_ciliumnode::CiliumNode) -> bool| {
        futures::executor::block_on(store.get("n1"))
            .ok()
            .flatten()
            .is_some_and(|n| f(&n))
    };
    eventually("the store sees pre-allocate 2", || {
        seen(&store, |n| n.spec.ipam.pre_allocate == Some(2))
    })
    .await;
    maintainer
        .release("n1", tokio::time::Instant::now())
        .await
        .unwrap();
    let marked: Vec<String> = server.get(CILIUMNODES, "n1").unwrap()["status"]["ipam"]
        ["release-ips"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, v)| *v == "marked-for-release")
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(marked.len(), 6);

    // The agent answers through status; the operator releases and says so.
    let answers: serde_json::Map<String, Value> = marked
        .iter()
        .map(|ip| (ip.clone(), json!("ready-for-release")))
        .collect();
    server.patch(
        CILIUMNODES,
        "n1",
        &json!({"status": {"ipam": {"release-ips": answers}}}),
    );
    eventually("the store sees the answers", || {
        seen(&store, |n| {
            n.status
                .ipam
                .release_ips
                .values()
                .all(|s| *s == ReleaseState::ReadyForRelease)
        })
    })
    .await;
    let round = maintainer
        .release("n1", tokio::time::Instant::now())
        .await
        .unwrap();
    assert_eq!(round.released.len(), 6);
    let n1 = server.get(CILIUMNODES, "n1").unwrap();
    for ip in &marked {
        assert_eq!(n1["status"]["ipam"]["release-ips"][ip], "released");
        assert!(
            n1["spec"]["ipam"]["pool"].get(ip).is_none(),
            "{ip} left the pool"
        );
    }
    assert_eq!(pool_len(&server, "n1"), 2);
    // ... and said so in an Event about the CiliumNode.
    let event = server
        .writes()
        .into_iter()
        .find(|w| w.path.contains("/events") && w.method == Method::POST)
        .expect("an event was posted");
    let body = event.body.unwrap_or_default();
    assert_eq!(body["reason"], "AddressesReleased");
    assert_eq!(body["regarding"]["kind"], "CiliumNode");
    assert_eq!(body["regarding"]["name"], "n1");
}

#[tokio::test]
async fn a_relist_after_410_gone_catches_a_deletion_missed_meanwhile() {
    let (client, server) = FakeApiServer::start();
    server.put(CILIUMNODES, agent_node("n1", "i-0001", 8));
    server.put(CILIUMNODES, agent_node("n2", "i-0002", 8));
    let store = synced_store(client, "ipam-operator").await;
    let mut events = store.subscribe();
    // The watch ends; while it is down n2 goes; the next watch is refused
    // as too old, so the store lists again.
    server.lose_watches_and_delete(CILIUMNODES, "n2");
    let deleted = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(ipam_engine::NodeEvent::Deleted(name)) = events.recv().await {
                return name;
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the deletion is noticed after the relist: {:#?}",
            server
                .log()
                .iter()
                .map(|l| (l.method.clone(), l.path.clone(), l.query.clone()))
                .collect::<Vec<_>>()
        )
    });
    assert_eq!(deleted, "n2");
    let lists = server
        .log()
        .iter()
        .filter(|l| l.path == CILIUMNODES && !l.query.contains("watch=true"))
        .count();
    assert_eq!(lists, 2, "listed at start and again after 410 Gone");
    assert!(store.get("n2").await.unwrap().is_none());
    assert!(store.get("n1").await.unwrap().is_some());
}

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
const LEASE: &str = "ipam-operator";

/// client-go's timings (lease 15 s, renew deadline 10 s, retry 2 s). The
/// election tests run on tokio's paused clock: renewals, deadlines and
/// engine timers cost no real time and are exact, and a lease's wall-clock
/// age (what a follower judges expiry by) grows only by the real time the
/// test takes, far below 15 s, so a slow machine cannot expire one.
fn lease_config(identity: &str) -> LeaseConfig {
    LeaseConfig::new("kube-system", LEASE, identity)
}

/// Wait until `leader` is `value`; on the paused clock the bound is virtual.
async fn until_leader(leader: &mut watch::Receiver<bool>, value: bool, what: &str) {
    tokio::time::timeout(Duration::from_secs(120), leader.wait_for(|l| *l == value))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for: {what}"))
        .expect("the election is running");
}

/// One operator replica: store, election and engine, writing as `identity`.
struct Replica {
    leader: watch::Receiver<bool>,
    /// What its `cilium_operator_leader*` metrics say.
    leader_metrics: Arc<LeaderMetrics>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

async fn replica(client: kube::Client, identity: &str) -> Replica {
    let store = synced_store(client.clone(), identity).await;
    let operator = Operator {
        store,
        cloud: Arc::new(mock(MOCK_SETTINGS).await),
        settings: engine_settings(false),
        config: LoopSettings::default(),
        reuse_cooldown: Duration::ZERO,
        metrics: Arc::new(Metrics::new()),
    };
    let leader_metrics = Arc::new(LeaderMetrics::new());
    let election =
        LeaderElection::new(client, lease_config(identity)).with_metrics(leader_metrics.clone());
    let (leader_tx, leader) = watch::channel(false);
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        let (ready, _) = watch::channel(false);
        let stopped_a = stopped.clone();
        let until = |mut s: watch::Receiver<bool>| async move {
            let _ = s.wait_for(|v| *v).await;
        };
        tokio::join!(
            election.run(&leader_tx, until(stopped)),
            operator.lead(leader_tx.subscribe(), &ready, until(stopped_a)),
        );
    });
    Replica {
        leader,
        leader_metrics,
        stop,
        task,
    }
}

fn written_by(server: &FakeApiServer, identity: &str) -> usize {
    server
        .writes()
        .iter()
        .filter(|w| {
            w.path.starts_with(CILIUMNODES) && w.query.contains(&format!("fieldManager={identity}"))
        })
        .count()
}

/// Writes to the Lease (creates and replaces), in order.
fn lease_writes(server: &FakeApiServer) -> Vec<fake_apiserver::Logged> {
    server
        .writes()
        .into_iter()
        .filter(|w| w.path.starts_with(LEASES))
        .collect()
}

/// Long enough for every timer of a standing-by replica to fire: two
/// engine resyncs, many retry periods. Virtual time on the paused clock.
fn quiet_period() -> Duration {
    LoopSettings::default().resync_interval * 2
}

#[tokio::test(start_paused = true)]
async fn only_the_leader_writes_and_a_clean_shutdown_hands_over() {
    let config = lease_config("op-a");
    let (client, server) = FakeApiServer::start();
    server.put(CILIUMNODES, agent_node("n1", "i-0001", 8));
    let mut a = replica(client.clone(), "op-a").await;
    until_leader(&mut a.leader, true, "op-a leads").await;
    let mut b = replica(client.clone(), "op-b").await;
    eventually("op-a fills n1", || pool_len(&server, "n1") == 8).await;
    // Both campaign for many retry periods (all run on the paused clock).
    let renewals = lease_writes(&server).len();
    tokio::time::sleep(config.retry_period * 10).await;
    assert!(
        lease_writes(&server).len() >= renewals + 9,
        "op-a kept renewing meanwhile"
    );
    assert!(
        !b.leader.has_changed().expect("op-b runs"),
        "op-b never led, not even briefly: one leader at a time"
    );
    assert_eq!(
        (
            b.leader_metrics.is_leading(),
            b.leader_metrics.transitions()
        ),
        (false, 0)
    );
    assert_eq!(a.leader_metrics.transitions(), 1);
    assert!(
        lease_writes(&server).iter().all(|w| w
            .body
            .as_ref()
            .is_some_and(|b| b["spec"]["holderIdentity"] == "op-a")),
        "op-b never tried to take a held lease"
    );
    assert!(written_by(&server, "op-a") > 0);
    assert_eq!(written_by(&server, "op-b"), 0, "the standby does not write");

    // op-a stops cleanly: it hands the lease back and op-b takes it at its
    // next attempt, not after the lease's 15 s.
    let _ = a.stop.send(true);
    a.task.await.unwrap();
    let handed_back = tokio::time::Instant::now();
    let lease = server.get(LEASES, LEASE).unwrap();
    assert!(lease["spec"]["holderIdentity"].is_null(), "{lease}");
    until_leader(&mut b.leader, true, "op-b leads").await;
    assert!(
        handed_back.elapsed() <= config.retry_period,
        "op-b took over {:?} after the hand-back",
        handed_back.elapsed()
    );
    server.put(CILIUMNODES, agent_node("n3", "i-0003", 3));
    eventually("op-b fills n3", || pool_len(&server, "n3") == 3).await;
    assert!(written_by(&server, "op-b") > 0);
    let _ = b.stop.send(true);
    b.task.await.unwrap();
}

fn pod(name: &str, node: &str, phase: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
           "status": {"phase": phase}})
}

#[tokio::test]
async fn pending_pods_on_a_node_are_counted_for_the_surge() {
    let (client, server) = FakeApiServer::start();
    server.put(CILIUMNODES, agent_node("n1", "i-0001", 8));
    let store = synced_store(client, "ipam-operator").await;
    // A host-network pod takes no address from the pool: never counted.
    let mut host_network = pod("agent-1", "n1", "Pending");
    host_network["spec"]["hostNetwork"] = json!(true);
    server.put(fake_apiserver::PODS, host_network);
    server.put(fake_apiserver::PODS, pod("web-1", "n1", "Pending"));
    server.put(fake_apiserver::PODS, pod("web-2", "n1", "Pending"));
    server.put(fake_apiserver::PODS, pod("db-1", "n2", "Pending"));
    // db-1 came last: once it is counted, every pod before it was seen.
    eventually("one pending on n2", || store.pending_pods("n2") == 1).await;
    assert_eq!(
        store.pending_pods("n1"),
        2,
        "web-1 and web-2, not the host-network pod"
    );
    // A pod that starts is no longer pending; one that goes neither.
    server.put(fake_apiserver::PODS, pod("web-1", "n1", "Running"));
    server.delete(fake_apiserver::PODS, "web-2");
    eventually("none pending on n1", || store.pending_pods("n1") == 0).await;
}

#[tokio::test]
async fn the_crd_is_registered_only_when_absent() {
    let (client, server) = FakeApiServer::start();
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    assert!(
        ipam_k8s::crd::ensure(client.clone()).await.unwrap(),
        "created"
    );
    let crd = server
        .get(crds, "ciliumnodes.cilium.io")
        .expect("registered");
    assert_eq!(crd["spec"]["group"], "cilium.io");
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(crd["spec"]["versions"][0]["name"], "v2");
    assert!(
        !ipam_k8s::crd::ensure(client).await.unwrap(),
        "left alone when present"
    );
    let creates = server.writes().iter().filter(|w| w.path == crds).count();
    assert_eq!(creates, 1);
}

#[tokio::test]
async fn an_azure_mode_node_gets_status_azure_interfaces() {
    let (client, server) = FakeApiServer::start();
    server.put(CILIUMNODES, azure_agent_node("aks-1", "i-0001", 4));
    let store = synced_store(client, "ipam-operator").await;
    let settings = MaintenanceSettings {
        ipam_mode: IpamMode::Azure,
        ..engine_settings(false)
    };
    let maintainer = maintainer(store, settings).await;
    maintainer.maintain("aks-1", 0).await.unwrap();
    let written = server.get(CILIUMNODES, "aks-1").unwrap();
    let nic = &written["status"]["azure"]["interfaces"][0];
    // The current CRD's names, and the obsolete GatewayIP for older agents.
    assert_eq!(nic["cidr"], "10.0.0.0/24", "{written}");
    assert_eq!(nic["gateway"], "10.0.0.1");
    assert_eq!(nic["GatewayIP"], "10.0.0.1");
    assert!(nic.get("CIDR").is_none(), "{written}");
    assert_eq!(
        nic["addresses"].as_array().map(Vec::len),
        Some(4),
        "the four secondaries, not the primary"
    );
    assert!(
        written["status"]["eni"].get("enis").is_none(),
        "no ENI status for an Azure node, though it carries spec.eni"
    );
    assert_eq!(
        written["spec"]["eni"],
        json!({}),
        "kept as the agent wrote it"
    );
}

/// A fake API server with node n1 (pre-allocate 8), and op-a leading and
/// done filling it; op-a's lease config.
async fn leading_op_a() -> (LeaseConfig, FakeApiServer, Replica) {
    let (client, server) = FakeApiServer::start();
    server.put(CILIUMNODES, agent_node("n1", "i-0001", 8));
    let mut a = replica(client, "op-a").await;
    until_leader(&mut a.leader, true, "op-a leads").await;
    eventually("op-a fills n1", || pool_len(&server, "n1") == 8).await;
    (lease_config("op-a"), server, a)
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_loses_its_lease_stops_writing_at_once() {
    let (config, server, mut a) = leading_op_a().await;
    // Another holder takes the lease (as after a partition).
    let mut lease = server.get(LEASES, LEASE).unwrap();
    lease["spec"]["holderIdentity"] = json!("intruder");
    lease["spec"]["leaseDurationSeconds"] = json!(600);
    lease["spec"]["renewTime"] = json!(k8s_openapi::jiff::Timestamp::now().to_string());
    server.put(LEASES, lease);
    let taken = tokio::time::Instant::now();
    until_leader(&mut a.leader, false, "op-a steps down").await;
    assert!(
        taken.elapsed() <= config.retry_period,
        "stepped down at its next renewal, not {:?} later",
        taken.elapsed()
    );
    // op-a still runs: a node that appears now is left alone by it.
    let before = written_by(&server, "op-a");
    server.put(CILIUMNODES, agent_node("n3", "i-0003", 3));
    tokio::time::sleep(quiet_period()).await;
    assert!(!a.task.is_finished(), "checked while op-a still runs");
    assert_eq!(
        written_by(&server, "op-a"),
        before,
        "no write after losing the lease"
    );
    assert_eq!(pool_len(&server, "n3"), 0);
    let _ = a.stop.send(true);
    a.task.await.unwrap();
    let lease = server.get(LEASES, LEASE).unwrap();
    assert_eq!(
        lease["spec"]["holderIdentity"], "intruder",
        "not ours to hand back"
    );
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_steps_down_by_the_renew_deadline() {
    let (config, server, mut a) = leading_op_a().await;
    // The API server stops persisting Lease writes: every renewal fails.
    server.fail_writes(LEASES, true);
    let failing = tokio::time::Instant::now();
    until_leader(&mut a.leader, false, "op-a steps down").await;
    // The last renewal that worked was at most one retry period before the
    // failures began; the deadline (a whole number of retry periods) counts
    // from it.
    let after = failing.elapsed();
    assert!(
        after >= config.renew_deadline - config.retry_period && after <= config.renew_deadline,
        "stepped down {after:?} after renewals began to fail"
    );
    assert!(!a.leader_metrics.is_leading(), "the gauge follows");
    assert_eq!(a.leader_metrics.transitions(), 2, "became, then stopped");
    assert!(
        after < config.lease_duration,
        "before another candidate could take the lease"
    );
    // op-a still runs and still cannot renew: a new node is left alone.
    let refused = lease_writes(&server)
        .iter()
        .filter(|w| w.code == 500)
        .count();
    let before = written_by(&server, "op-a");
    server.put(CILIUMNODES, agent_node("n3", "i-0003", 3));
    tokio::time::sleep(quiet_period()).await;
    assert!(
        lease_writes(&server)
            .iter()
            .filter(|w| w.code == 500)
            .count()
            > refused,
        "op-a kept trying to renew"
    );
    assert_eq!(
        written_by(&server, "op-a"),
        before,
        "no write after stepping down"
    );
    assert_eq!(pool_len(&server, "n3"), 0);
    // Renewals work again: op-a, still the holder on record, leads again and
    // fills n3, so the quiet above was op-a standing down, not unable to write.
    server.fail_writes(LEASES, false);
    until_leader(&mut a.leader, true, "op-a leads again").await;
    assert!(a.leader_metrics.is_leading());
    assert_eq!(a.leader_metrics.transitions(), 3);
    eventually("op-a fills n3", || pool_len(&server, "n3") == 3).await;
    let _ = a.stop.send(true);
    a.task.await.unwrap();
    assert_eq!(
        (
            a.leader_metrics.is_leading(),
            a.leader_metrics.transitions()
        ),
        (false, 4),
        "the hand-back at shutdown is a transition too"
    );
}

/// A bare candidate (no store, no engine): its leader flag and its stop.
fn candidate(
    client: kube::Client,
    identity: &str,
) -> (
    watch::Receiver<bool>,
    watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let election = LeaderElection::new(client, lease_config(identity));
    let (leader_tx, leader) = watch::channel(false);
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        election
            .run(&leader_tx, async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await;
    });
    (leader, stop, task)
}

/// Two candidates read the Lease (`initial`, or none) before either
/// writes: exactly one write succeeds, the other is answered 409 Conflict,
/// and its candidate does not lead, then or in the rounds after.
async fn race_for_the_lease(initial: Option<Value>, transitions: i64) {
    let config = lease_config("op-a");
    let (client, server) = FakeApiServer::start();
    if let Some(lease) = initial {
        server.put(LEASES, lease);
    }
    server.hold_reads(LEASES, LEASE, 2);
    let (a, a_stop, a_task) = candidate(client.clone(), "op-a");
    let (b, b_stop, b_task) = candidate(client, "op-b");
    tokio::time::sleep(config.retry_period * 10).await;

    let writes = lease_writes(&server);
    assert!(writes.len() >= 2, "both candidates wrote: {writes:?}");
    let (first, second) = (&writes[0], &writes[1]);
    let holder =
        |w: &fake_apiserver::Logged| w.body.as_ref().map(|b| b["spec"]["holderIdentity"].clone());
    assert_ne!(
        holder(first),
        holder(second),
        "both candidates wrote: {writes:?}"
    );
    let codes = [first.code, second.code];
    assert!(
        codes.contains(&409) && codes.iter().any(|c| (200..300).contains(c)),
        "one write won, one was refused: {codes:?}"
    );
    let refused = if first.code == 409 { first } else { second };
    let loser = holder(refused).expect("a body");
    let (winner, loser_flag) = if loser == "op-a" {
        ("op-b", &a)
    } else {
        ("op-a", &b)
    };
    let winner_flag = if winner == "op-a" { &a } else { &b };
    let lease = server.get(LEASES, LEASE).unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], winner);
    assert_eq!(
        lease["spec"]["leaseTransitions"], transitions,
        "taken once: {lease}"
    );
    assert!(*winner_flag.borrow(), "{winner} leads");
    assert!(
        !loser_flag.has_changed().expect("the loser runs"),
        "{loser} never led, not even briefly"
    );
    assert!(
        writes
            .iter()
            .skip(2)
            .all(|w| holder(w) == Some(json!(winner)) && w.code == 200),
        "afterwards only {winner} writes (renewals): {writes:?}"
    );
    let _ = a_stop.send(true);
    let _ = b_stop.send(true);
    a_task.await.unwrap();
    b_task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn two_candidates_racing_to_create_the_lease_one_leads_the_other_gets_409() {
    race_for_the_lease(None, 0).await;
}

#[tokio::test(start_paused = true)]
async fn two_candidates_racing_for_an_expired_lease_one_leads_the_other_gets_409() {
    let expired = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": "kube-system"},
        "spec": {"holderIdentity": "gone", "leaseDurationSeconds": 15,
                 "acquireTime": "2020-01-01T00:00:00.000000Z",
                 "renewTime": "2020-01-01T00:00:00.000000Z", "leaseTransitions": 4}
    });
    race_for_the_lease(Some(expired), 5).await;
}

#[tokio::test]
async fn the_store_keeps_other_managers_contested_fields_and_the_nodes_cilium_skips() {
    let (client, server) = FakeApiServer::start();
    let mut skipped = agent_node("skipped", "i-0001", 2);
    skipped["metadata"]["annotations"] = json!({"ipam.cilium.io/ignore": "true"});
    server.put(CILIUMNODES, skipped);
    server.put(CILIUMNODES, agent_node("n2", "i-0002", 2));
    let api = kube::Api::<kube::api::DynamicObject>::all_with(
        client.clone(),
        &ipam_ciliumnode::kube::api_resource(),
    );
    let patch = |manager: &str| kube::api::PatchParams {
        field_manager: Some(manager.into()),
        ..kube::api::PatchParams::default()
    };
    let pool = json!({"spec": {"ipam": {"pool": {"10.0.0.9": {"resource": "eni-9"}}}}});
    let status = json!({"status": {"eni": {"enis": {"eni-9": {"id": "eni-9"}}}}});
    for node in ["skipped", "n2"] {
        api.patch(
            node,
            &patch("ipam-operator"),
            &kube::api::Patch::Merge(&pool),
        )
        .await
        .unwrap();
    }
    api.patch_status(
        "n2",
        &patch("cilium-operator-aws"),
        &kube::api::Patch::Merge(&status),
    )
    .await
    .unwrap();
    let store = synced_store(client, "ipam-operator").await;
    assert!(
        store.contested_entries("skipped").is_empty(),
        "its own entries are none of the watch's business"
    );
    let entries = store.contested_entries("n2");
    let managers: Vec<(&str, Option<&str>)> = entries
        .iter()
        .map(|e| (e.manager.as_str(), e.subresource.as_deref()))
        .collect();
    assert_eq!(managers, [("cilium-operator-aws", Some("status"))]);
    assert_eq!(store.all_contested_entries().len(), 1);
    assert_eq!(
        store.nodes_cilium_allocates_for(),
        (1, Some("n2".to_string()))
    );
    server.delete(CILIUMNODES, "n2");
    eventually("n2 forgotten", || store.contested_entries("n2").is_empty()).await;
    assert_eq!(store.nodes_cilium_allocates_for(), (0, None));
}
