use std::str::FromStr;
use std::sync::atomic::Ordering;

use ipam_duty::{run_while_leading, DutyMetrics};
use ipam_kvstore::memory::{MemoryStore, MEMORY_SESSION_LEASE};
use serde_json::{json, Value};

use super::*;
use crate::convert::GLOBAL;
use crate::service::ClusterService;
use crate::testing::Flaky;

const KEY: &str = "cilium/state/services/v1/c1/shop/web";
const MARKER: &str = "cilium/synced/c1/cilium/state/services/v1";

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: value.as_bytes().to_vec(),
        create_revision: 1,
        mod_revision: 1,
        lease: 0,
    }
}

fn bytes(entries: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect()
}

#[test]
fn full_sync_plans() {
    struct Case {
        name: &'static str,
        desired: &'static [(&'static str, &'static str)],
        listed: &'static [(&'static str, &'static str)],
        written: &'static [(&'static str, &'static str)],
        puts: &'static [&'static str],
        deletes: &'static [&'static str],
    }
    let cases = [
        Case {
            name: "new key",
            desired: &[("a", "1")],
            listed: &[],
            written: &[],
            puts: &["a"],
            deletes: &[],
        },
        Case {
            name: "ours and current",
            desired: &[("a", "1")],
            listed: &[("a", "1")],
            written: &[("a", "1")],
            puts: &[],
            deletes: &[],
        },
        Case {
            name: "current but a previous leader's (its lease)",
            desired: &[("a", "1")],
            listed: &[("a", "1")],
            written: &[],
            puts: &["a"],
            deletes: &[],
        },
        Case {
            name: "changed",
            desired: &[("a", "2")],
            listed: &[("a", "1")],
            written: &[("a", "1")],
            puts: &["a"],
            deletes: &[],
        },
        Case {
            name: "ours but gone from the store (lease lost, etcd wiped)",
            desired: &[("a", "1")],
            listed: &[],
            written: &[("a", "1")],
            puts: &["a"],
            deletes: &[],
        },
        Case {
            name: "nothing accounts for it",
            desired: &[("a", "1")],
            listed: &[("a", "1"), ("b", "1")],
            written: &[("a", "1")],
            puts: &[],
            deletes: &["b"],
        },
    ];
    for case in cases {
        let listed: Vec<KeyValue> = case.listed.iter().map(|(k, v)| kv(k, v)).collect();
        let plan = sync_plan(&bytes(case.desired), &listed, &bytes(case.written));
        let puts: Vec<&str> = plan.puts.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(puts, case.puts, "{}", case.name);
        assert_eq!(plan.deletes, case.deletes, "{}", case.name);
    }
}

#[test]
fn one_key_writes() {
    let old = b"1".to_vec();
    assert_eq!(
        key_write(Some(b"1".to_vec()), Some(&old)),
        KeyWrite::Nothing
    );
    assert_eq!(
        key_write(Some(b"2".to_vec()), Some(&old)),
        KeyWrite::Put(b"2".to_vec())
    );
    assert_eq!(
        key_write(Some(b"2".to_vec()), None),
        KeyWrite::Put(b"2".to_vec())
    );
    assert_eq!(key_write(None, Some(&old)), KeyWrite::Delete);
    assert_eq!(key_write(None, None), KeyWrite::Nothing);
}

fn service(name: &str, annotations: Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"namespace": "shop", "name": name, "annotations": annotations},
        "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    }))
    .unwrap()
}

fn global(name: &str) -> Service {
    service(name, json!({GLOBAL: "true"}))
}

fn slice(name: &str, owner: &str, addresses: &[&str]) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"namespace": "shop", "name": name,
                     "labels": {SERVICE_NAME_LABEL: owner}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": addresses.iter().map(|a| json!({"addresses": [a]})).collect::<Vec<_>>(),
    }))
    .unwrap()
}

fn listed(view: &ServicesView, services: Vec<Service>, slices: Vec<EndpointSlice>) {
    view.service_event(Event::Init);
    for s in services {
        view.service_event(Event::InitApply(s));
    }
    view.service_event(Event::InitDone);
    view.slice_event(Event::Init);
    for s in slices {
        view.slice_event(Event::InitApply(s));
    }
    view.slice_event(Event::InitDone);
}

fn cluster() -> ClusterInfo {
    ClusterInfo::new("c1", 7).unwrap()
}

fn backends(view: &ServicesView, id: &str) -> Vec<String> {
    let (_, value) = view.desired_one(&cluster(), &ObjectId::new("shop", id));
    let Some(value) = value else {
        return Vec::new();
    };
    let value: ClusterService = serde_json::from_slice(&value).unwrap();
    value.backends.into_keys().collect()
}

#[test]
fn the_view_follows_slices_to_their_service() {
    let view = ServicesView::new();
    let synced = view.synced();
    view.service_event(Event::Init);
    view.service_event(Event::InitApply(global("web")));
    view.service_event(Event::InitApply(global("api")));
    view.service_event(Event::InitDone);
    assert!(!*synced.borrow(), "slices not listed yet");
    view.slice_event(Event::Init);
    view.slice_event(Event::InitApply(slice("web-1", "web", &["10.0.0.1"])));
    view.slice_event(Event::InitDone);
    assert!(*synced.borrow());
    assert_eq!(backends(&view, "web"), ["10.0.0.1"]);

    let mut changes = view.subscribe();
    // The slice's label moves it to another Service: both change.
    view.slice_event(Event::Apply(slice("web-1", "api", &["10.0.0.1"])));
    assert_eq!(backends(&view, "web"), Vec::<String>::new());
    assert_eq!(backends(&view, "api"), ["10.0.0.1"]);
    let mut seen = vec![changes.try_recv().unwrap(), changes.try_recv().unwrap()];
    seen.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(
        seen,
        [
            ServiceChange::One(ObjectId::new("shop", "api")),
            ServiceChange::One(ObjectId::new("shop", "web")),
        ]
    );

    // A slice with no owner label is not kept.
    let mut orphan = slice("stray", "web", &["10.0.0.9"]);
    orphan.metadata.labels = None;
    view.slice_event(Event::Apply(orphan));
    assert_eq!(backends(&view, "web"), Vec::<String>::new());

    view.slice_event(Event::Delete(slice("web-1", "api", &[])));
    assert_eq!(backends(&view, "api"), Vec::<String>::new());

    // A relist replaces everything, and says so.
    view.slice_event(Event::Init);
    view.slice_event(Event::InitApply(slice("web-2", "web", &["10.0.0.2"])));
    view.slice_event(Event::InitDone);
    assert_eq!(backends(&view, "web"), ["10.0.0.2"]);
    while let Ok(change) = changes.try_recv() {
        if change == ServiceChange::All {
            return;
        }
    }
    panic!("a relist is announced");
}

struct Running {
    leader: watch::Sender<bool>,
    metrics: Arc<DutyMetrics>,
}

const RESYNC: Duration = Duration::from_secs(60);

/// The duty, run as the operator runs it, over `store`, leading from the
/// start.
fn run(view: Arc<ServicesView>, store: Arc<Flaky>) -> Running {
    let (leader, leading) = watch::channel(true);
    let metrics = Arc::new(DutyMetrics::new());
    let mut settings = ServicesSettings::new(cluster());
    settings.resync_interval = RESYNC;
    settings.retry_interval = Duration::from_secs(2);
    tokio::spawn({
        let metrics = metrics.clone();
        let store: Arc<dyn SharedStore> = store;
        run_while_leading(
            move || ServicesStore::new(settings.clone(), view.clone(), store.clone()),
            leading,
            metrics,
            std::future::pending(),
        )
    });
    Running { leader, metrics }
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

fn value(store: &MemoryStore, key: &str) -> Value {
    serde_json::from_str(&store.text(key).unwrap_or_else(|| panic!("{key} missing"))).unwrap()
}

fn puts(store: &MemoryStore) -> usize {
    store.writes().iter().filter(|(op, _)| *op == "put").count()
}

#[tokio::test(start_paused = true)]
async fn a_full_sync_writes_exported_services_deletes_the_rest_and_marks_synced() {
    let store = Arc::new(Flaky::default());
    let stale = "cilium/state/services/v1/c1/shop/gone";
    let other = "cilium/state/services/v1/c2/shop/web";
    store.inner.put_leased(stale, b"{}".to_vec()).await.unwrap();
    store.inner.put_leased(other, b"{}".to_vec()).await.unwrap();
    let view = Arc::new(ServicesView::new());
    listed(
        &view,
        vec![global("web"), service("local", json!({}))],
        vec![
            slice("web-1", "web", &["10.0.1.5", "10.0.1.6"]),
            slice("local-1", "local", &["10.0.1.7"]),
        ],
    );
    let running = run(view, store.clone());
    settle().await;

    assert_eq!(
        store.inner.keys(),
        [KEY, other, MARKER],
        "the stale key is gone, the other cluster's kept, the local Service not exported"
    );
    let web = value(&store.inner, KEY);
    assert_eq!(web["cluster"], "c1");
    assert_eq!(web["clusterID"], 7);
    assert_eq!(web["namespace"], "shop");
    assert_eq!(web["name"], "web");
    assert_eq!(
        web["frontends"],
        json!({"10.96.0.10": {"http": {"Protocol": "TCP", "Port": 80}}})
    );
    assert_eq!(
        web["backends"],
        json!({"10.0.1.5": {"http": {"Protocol": "TCP", "Port": 8080}},
               "10.0.1.6": {"http": {"Protocol": "TCP", "Port": 8080}}})
    );
    assert_eq!(web["includeExternal"], true);
    assert_eq!(web["shared"], true);
    assert_eq!(
        store.inner.get(KEY).await.unwrap().unwrap().lease,
        MEMORY_SESSION_LEASE,
        "on the session lease"
    );
    let marker = store.inner.text(MARKER).unwrap();
    assert!(
        k8s_openapi::jiff::Timestamp::from_str(&marker).is_ok() && marker.ends_with('Z'),
        "RFC 3339: {marker}"
    );
    assert_eq!(
        store.inner.get(MARKER).await.unwrap().unwrap().lease,
        MEMORY_SESSION_LEASE
    );

    // The next round's full sync finds nothing to write.
    let before = puts(&store.inner);
    tokio::time::sleep(RESYNC).await;
    assert_eq!(running.metrics.runs("services-store"), 1);
    assert_eq!(running.metrics.deletions("services-store"), 1);
    assert_eq!(
        puts(&store.inner),
        before,
        "nothing changed, nothing written"
    );

    // Someone deleted a key and the marker (an etcd restored from an old
    // snapshot): the next full sync puts both back.
    store.inner.delete(KEY).await.unwrap();
    store.inner.delete(MARKER).await.unwrap();
    tokio::time::sleep(RESYNC).await;
    assert!(store.inner.text(KEY).is_some());
    assert!(store.inner.text(MARKER).is_some());
}

#[tokio::test(start_paused = true)]
async fn changes_between_full_syncs_are_applied_as_they_come() {
    let store = Arc::new(Flaky::default());
    let view = Arc::new(ServicesView::new());
    listed(&view, vec![global("web")], vec![]);
    let running = run(view.clone(), store.clone());
    settle().await;
    assert_eq!(value(&store.inner, KEY)["backends"], json!({}));

    view.slice_event(Event::Apply(slice("web-1", "web", &["10.0.1.5"])));
    settle().await;
    assert_eq!(
        value(&store.inner, KEY)["backends"],
        json!({"10.0.1.5": {"http": {"Protocol": "TCP", "Port": 8080}}})
    );

    // The same object again (a resync of the watch): no write.
    let before = puts(&store.inner);
    view.service_event(Event::Apply(global("web")));
    settle().await;
    assert_eq!(puts(&store.inner), before);

    // No longer shared: withdrawn.
    view.service_event(Event::Apply(service(
        "web",
        json!({GLOBAL: "true", "service.cilium.io/shared": "false"}),
    )));
    settle().await;
    assert_eq!(store.inner.text(KEY), None);

    // Shared again, then deleted.
    view.service_event(Event::Apply(global("web")));
    settle().await;
    assert!(store.inner.text(KEY).is_some());
    view.service_event(Event::Delete(global("web")));
    settle().await;
    assert_eq!(store.inner.text(KEY), None);

    // The round's report counts both deletions.
    tokio::time::sleep(RESYNC).await;
    assert_eq!(running.metrics.deletions("services-store"), 2);
    assert_eq!(running.metrics.failures("services-store"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_kvstore_outage_is_healed_by_a_full_sync_soon_after() {
    let store = Arc::new(Flaky::default());
    let view = Arc::new(ServicesView::new());
    listed(&view, vec![global("web")], vec![]);
    let running = run(view.clone(), store.clone());
    settle().await;

    store.failing.store(true, Ordering::SeqCst);
    view.slice_event(Event::Apply(slice("web-1", "web", &["10.0.1.5"])));
    view.service_event(Event::Apply(global("api")));
    tokio::time::sleep(Duration::from_secs(5)).await;
    store.failing.store(false, Ordering::SeqCst);
    // Within a retry interval, well before the next round.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        value(&store.inner, KEY)["backends"],
        json!({"10.0.1.5": {"http": {"Protocol": "TCP", "Port": 8080}}})
    );
    assert!(store
        .inner
        .text("cilium/state/services/v1/c1/shop/api")
        .is_some());
    tokio::time::sleep(RESYNC).await;
    assert_eq!(
        running.metrics.failures("services-store"),
        0,
        "the round ended healed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_new_leader_rewrites_every_key_on_its_own_lease() {
    let store = Arc::new(Flaky::default());
    let view = Arc::new(ServicesView::new());
    listed(&view, vec![global("web")], vec![]);
    let running = run(view.clone(), store.clone());
    settle().await;
    let first = store.inner.get(KEY).await.unwrap().unwrap().mod_revision;

    running.leader.send_replace(false);
    settle().await;
    running.leader.send_replace(true);
    settle().await;
    let again = store.inner.get(KEY).await.unwrap().unwrap().mod_revision;
    assert!(again > first, "written again by the new incarnation");
}
