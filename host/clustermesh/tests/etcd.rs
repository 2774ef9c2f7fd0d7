//! The services and nodes stores against a real etcd (Debian's etcd-server,
//! started by each test on 127.0.0.1 with a temporary data dir), killed
//! with SIGKILL in the middle of a full sync and restarted on the same data
//! dir: the stores converge without waiting for their next round.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use serde_json::json;
use tokio::sync::{watch, Notify};

use ipam_clustermesh::convert::{cluster_service, GLOBAL, SERVICE_NAME_LABEL};
use ipam_clustermesh::{
    keys, AgentPodsView, CiliumNodesView, ClusterInfo, NodesSettings, NodesStore, ServicesSettings,
    ServicesStore, ServicesView,
};
use ipam_duty::{run_while_leading, Duty, DutyMetrics};
use ipam_kvstore::etcd_store::EtcdStore;
use ipam_kvstore::testing::EtcdServer;
use ipam_kvstore::{HeldLock, KeyValue, KvError, SharedStore};

/// The etcd store, with the duty's `at`-th write (put or delete) held until
/// the test says go: the test kills etcd at a known point of a sync.
struct Gate {
    inner: Arc<EtcdStore>,
    writes: AtomicUsize,
    at: usize,
    reached: Notify,
    resume: Notify,
}

impl Gate {
    fn new(inner: Arc<EtcdStore>, at: usize) -> Self {
        Self {
            inner,
            writes: AtomicUsize::new(0),
            at,
            reached: Notify::new(),
            resume: Notify::new(),
        }
    }

    async fn write(&self) {
        if self.writes.fetch_add(1, Ordering::SeqCst) + 1 == self.at {
            self.reached.notify_one();
            self.resume.notified().await;
        }
    }
}

#[async_trait]
impl SharedStore for Gate {
    async fn put_leased(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        self.write().await;
        self.inner.put_leased(key, value).await
    }
    async fn put(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        self.write().await;
        self.inner.put(key, value).await
    }
    async fn delete(&self, key: &str) -> Result<bool, KvError> {
        self.write().await;
        self.inner.delete(key).await
    }
    async fn delete_if_unchanged(&self, key: &str, revision: i64) -> Result<bool, KvError> {
        self.write().await;
        self.inner.delete_if_unchanged(key, revision).await
    }
    async fn list_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>, KvError> {
        self.inner.list_prefix(prefix).await
    }
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, KvError> {
        self.inner.get(key).await
    }
    async fn lock(&self, path: &str) -> Result<HeldLock, KvError> {
        self.inner.lock(path).await
    }
    async fn unlock(&self, lock: HeldLock) -> Result<(), KvError> {
        self.inner.unlock(lock).await
    }
    async fn delete_if_locked(
        &self,
        key: &str,
        revision: i64,
        lock: &HeldLock,
    ) -> Result<bool, KvError> {
        self.inner.delete_if_locked(key, revision, lock).await
    }
}

fn cluster() -> ClusterInfo {
    ClusterInfo::new("c1", 7).unwrap()
}

fn service(name: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"namespace": "shop", "name": name, "annotations": {GLOBAL: "true"}},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80}]},
    }))
    .unwrap()
}

fn slice(service: &str, address: &str) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"namespace": "shop", "name": format!("{service}-1"),
                     "labels": {SERVICE_NAME_LABEL: service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": [{"addresses": [address]}],
    }))
    .unwrap()
}

/// The duty `make` builds, run as the operator runs it, leading; stopped
/// when the returned sender is dropped.
fn lead<D: Duty + 'static>(make: impl FnMut() -> D + Send + 'static) -> watch::Sender<bool> {
    let (leader, leading) = watch::channel(true);
    let metrics = Arc::new(DutyMetrics::new());
    tokio::spawn(run_while_leading(
        make,
        leading,
        metrics,
        std::future::pending(),
    ));
    leader
}

/// Wait until `check` holds for the keys under `prefix` (listed through a
/// client of our own), or fail after 60 s showing the last listing.
async fn converge(
    etcd: &EtcdServer,
    prefix: &str,
    check: impl Fn(&BTreeMap<String, Vec<u8>>) -> bool,
) {
    let client = etcd.client().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let listed: BTreeMap<String, Vec<u8>> = match client.list(prefix).await {
            Ok(listing) => listing
                .keys
                .into_iter()
                .map(|kv| (kv.key, kv.value))
                .collect(),
            Err(_) => BTreeMap::new(),
        };
        if check(&listed) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no convergence within 60 s; last listing: {:?}",
            listed.keys().collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_store_converges_after_etcd_is_killed_mid_sync() {
    let mut etcd = EtcdServer::start().await;
    let store = Arc::new(EtcdStore::connect(&etcd.config()).await.unwrap());
    let stale = keys::service("c1", "shop", "gone");
    store.put_leased(&stale, b"{}".to_vec()).await.unwrap();

    // 60 global Services with a backend each: the Services and slices
    // the view holds, kept here too to compute what etcd must end with.
    let mut services: BTreeMap<String, (Service, EndpointSlice)> = (0..60)
        .map(|i| {
            let name = format!("svc-{i:02}");
            let pair = (service(&name), slice(&name, &format!("10.0.1.{i}")));
            (name, pair)
        })
        .collect();
    let view = Arc::new(ServicesView::new());
    view.service_event(Event::Init);
    view.slice_event(Event::Init);
    for (service, slice) in services.values() {
        view.service_event(Event::InitApply(service.clone()));
        view.slice_event(Event::InitApply(slice.clone()));
    }
    view.service_event(Event::InitDone);
    view.slice_event(Event::InitDone);

    let gate = Arc::new(Gate::new(store.clone(), 25));
    let mut settings = ServicesSettings::new(cluster());
    // The round lasts the default 5 minutes: convergence must come from
    // the retries, not from the next round.
    settings.retry_interval = Duration::from_millis(500);
    let _leader = lead({
        let (view, gate) = (view.clone(), gate.clone());
        move || {
            let store: Arc<dyn SharedStore> = gate.clone();
            ServicesStore::new(settings.clone(), view.clone(), store)
        }
    });

    tokio::time::timeout(Duration::from_secs(30), gate.reached.notified())
        .await
        .expect("the full sync reaches its 25th write");
    etcd.kill();
    gate.resume.notify_one();

    // While etcd is down: a Service goes, a backend moves, one is added.
    let (gone, _) = services.remove("svc-00").unwrap();
    view.service_event(Event::Delete(gone));
    let moved = slice("svc-01", "10.0.2.1");
    view.slice_event(Event::Apply(moved.clone()));
    services.get_mut("svc-01").unwrap().1 = moved;
    let added = (service("svc-new"), slice("svc-new", "10.0.3.1"));
    view.service_event(Event::Apply(added.0.clone()));
    view.slice_event(Event::Apply(added.1.clone()));
    services.insert("svc-new".into(), added);
    tokio::time::sleep(Duration::from_secs(2)).await;
    etcd.restart().await;

    let expected: BTreeMap<String, Vec<u8>> = services
        .values()
        .map(|(service, slice)| {
            let value = cluster_service(&cluster(), service, [slice]).unwrap();
            (value.key(), value.to_json())
        })
        .collect();
    converge(&etcd, &keys::services_of("c1"), |listed| {
        *listed == expected
    })
    .await;
    let marker = etcd
        .client()
        .await
        .get(&keys::services_synced("c1"))
        .await
        .unwrap()
        .expect("the synced marker");
    assert_eq!(marker.lease, store.session_lease(), "on the session lease");
}

fn cilium_node(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "cilium.io/v2", "kind": "CiliumNode", "metadata": {"name": name},
    }))
    .unwrap()
}

fn agent_value(name: &str) -> Vec<u8> {
    json!({"Name": name, "Cluster": "c1",
           "IPAddresses": [{"Type": "InternalIP", "IP": "10.0.0.1"}],
           "IPv4AllocCIDR": {"IP": "10.0.1.0", "Mask": "////AA=="}})
    .to_string()
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_store_converges_after_etcd_is_killed_mid_sweep() {
    let mut etcd = EtcdServer::start().await;
    let store = Arc::new(EtcdStore::connect(&etcd.config()).await.unwrap());
    // Agents' keys for 60 nodes, of which 20 still have a CiliumNode; and
    // another cluster's, never touched.
    let agents = etcd.client().await;
    for i in 0..60 {
        let name = format!("node-{i:02}");
        agents
            .put(&keys::node("c1", &name), agent_value(&name), 0)
            .await
            .unwrap();
    }
    agents
        .put(&keys::node("c2", "node-59"), agent_value("node-59"), 0)
        .await
        .unwrap();
    let view = Arc::new(CiliumNodesView::new());
    view.event(Event::Init);
    for i in 0..20 {
        view.event(Event::InitApply(cilium_node(&format!("node-{i:02}"))));
    }
    view.event(Event::InitDone);

    let gate = Arc::new(Gate::new(store.clone(), 15));
    let mut settings = NodesSettings::new(cluster());
    settings.retry_interval = Duration::from_millis(500);
    settings.grace = Duration::ZERO;
    // No cilium-agent pod runs anywhere.
    let agents = Arc::new(AgentPodsView::new());
    agents.event(Event::Init);
    agents.event(Event::InitDone);
    let _leader = lead({
        let (view, gate) = (view.clone(), gate.clone());
        move || {
            let store: Arc<dyn SharedStore> = gate.clone();
            NodesStore::new(settings.clone(), view.clone(), agents.clone(), store)
        }
    });

    tokio::time::timeout(Duration::from_secs(30), gate.reached.notified())
        .await
        .expect("the sweep reaches its 15th delete");
    etcd.kill();
    gate.resume.notify_one();
    // While etcd is down, a CiliumNode goes.
    view.event(Event::Delete(cilium_node("node-05")));
    tokio::time::sleep(Duration::from_secs(2)).await;
    etcd.restart().await;

    let expected: Vec<String> = (0..20)
        .filter(|i| *i != 5)
        .map(|i| keys::node("c1", &format!("node-{i:02}")))
        .collect();
    converge(&etcd, &keys::nodes_of("c1"), |listed| {
        listed.keys().cloned().collect::<Vec<_>>() == expected
    })
    .await;
    let other = etcd
        .client()
        .await
        .get(&keys::node("c2", "node-59"))
        .await
        .unwrap();
    assert!(
        other.is_some(),
        "another cluster's node is not ours to judge"
    );
}
