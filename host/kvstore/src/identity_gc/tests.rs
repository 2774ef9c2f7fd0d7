//! The identity GC's rounds against the in-memory store.

use super::*;
use crate::layout::{IDENTITY_LOCKS_PREFIX, IDENTITY_VALUE_PREFIX};
use crate::memory::MemoryStore;
use crate::test_store::Meddling;

fn settings(cluster_id: u32) -> IdentityGcSettings {
    IdentityGcSettings {
        mesh: crate::mesh::ClusterMesh::new(cluster_id, Default::default()).unwrap(),
        ..IdentityGcSettings::default()
    }
}

fn id_key(id: &str) -> String {
    format!("{IDENTITY_ID_PREFIX}{id}")
}

async fn master(store: &dyn SharedStore, id: &str, labels: &str) {
    store
        .put(&id_key(id), labels.as_bytes().to_vec())
        .await
        .unwrap();
}

fn value_key(labels: &str, node: &str) -> String {
    format!("{IDENTITY_VALUE_PREFIX}{labels}/{node}")
}

async fn user(store: &dyn SharedStore, labels: &str, node: &str, id: &str) {
    store
        .put_leased(&value_key(labels, node), id.as_bytes().to_vec())
        .await
        .unwrap();
}

async fn exists(store: &dyn SharedStore, key: &str) -> bool {
    store.get(key).await.unwrap().is_some()
}

async fn no_locks_left(store: &dyn SharedStore) -> bool {
    store
        .list_prefix(IDENTITY_LOCKS_PREFIX)
        .await
        .unwrap()
        .is_empty()
}

#[tokio::test]
async fn an_orphan_goes_on_its_second_round_a_used_identity_stays() {
    let store = Arc::new(MemoryStore::new());
    master(&*store, "256", "k8s:app=orphan;").await;
    master(&*store, "257", "k8s:app=used;").await;
    user(&*store, "k8s:app=used;", "10.0.0.1", "257").await;
    let mut gc = IdentityGc::new(store.clone(), settings(0));

    let first = gc.collect().await.unwrap();
    assert_eq!(
        first,
        IdentityGcReport {
            scanned: 2,
            in_range: 2,
            kept_used: 1,
            marked: 1,
            ..IdentityGcReport::default()
        }
    );
    assert!(
        exists(&*store, &id_key("256")).await,
        "one unused sighting is not enough"
    );

    let second = gc.collect().await.unwrap();
    assert_eq!((second.deleted, second.kept_used, second.marked), (1, 1, 0));
    assert!(!exists(&*store, &id_key("256")).await);
    assert!(exists(&*store, &id_key("257")).await);
    assert!(
        no_locks_left(&*store).await,
        "every lock taken is given back"
    );
    let locked = |id: &str| {
        store
            .writes()
            .iter()
            .any(|(_, key)| key.starts_with(&identity_lock_path(id)))
    };
    assert!(
        locked("256"),
        "the deletion is judged under the allocator's lock of the key"
    );
    assert!(
        !locked("257"),
        "a used identity costs no lock: the listing of value keys tells"
    );
}

#[tokio::test]
async fn an_identity_re_used_between_rounds_is_kept() {
    let store = Arc::new(MemoryStore::new());
    // Re-allocated: the master key written anew, and no user yet.
    master(&*store, "256", "k8s:app=a;").await;
    // Taken by a node between rounds, then released again.
    master(&*store, "257", "k8s:app=b;").await;
    let mut gc = IdentityGc::new(store.clone(), settings(0));
    assert_eq!(gc.collect().await.unwrap().marked, 2);

    master(&*store, "256", "k8s:app=a;").await;
    user(&*store, "k8s:app=b;", "10.0.0.2", "257").await;
    let second = gc.collect().await.unwrap();
    assert_eq!((second.deleted, second.marked, second.kept_used), (0, 1, 1));

    store
        .delete(&value_key("k8s:app=b;", "10.0.0.2"))
        .await
        .unwrap();
    let third = gc.collect().await.unwrap();
    assert_eq!(
        (third.deleted, third.marked),
        (1, 1),
        "256 unchanged since its new mark goes; 257's mark was dropped when it was used"
    );
    assert!(!exists(&*store, &id_key("256")).await);
    assert_eq!(gc.collect().await.unwrap().deleted, 1);
    assert!(!exists(&*store, &id_key("257")).await);
}

#[tokio::test]
async fn the_users_of_a_longer_labels_key_do_not_count_for_a_shorter_one() {
    let store = Arc::new(MemoryStore::new());
    master(&*store, "256", "k8s:a=b;").await;
    master(&*store, "257", "k8s:a=b;/c=d;").await;
    // Listed under `value/k8s:a=b;/` too.
    user(&*store, "k8s:a=b;/c=d;", "10.0.0.1", "257").await;
    let mut gc = IdentityGc::new(store.clone(), settings(0));
    gc.collect().await.unwrap();
    let second = gc.collect().await.unwrap();
    assert_eq!((second.deleted, second.kept_used), (1, 1));
    assert!(!exists(&*store, &id_key("256")).await);
    assert!(exists(&*store, &id_key("257")).await);
}

#[tokio::test]
async fn keys_out_of_range_or_malformed_are_untouched() {
    let store = Arc::new(MemoryStore::new());
    master(&*store, "300", "k8s:app=cluster-0;").await;
    master(&*store, "65536", "k8s:app=ours;").await;
    master(&*store, "131072", "k8s:app=cluster-2;").await;
    master(&*store, "abc", "k8s:app=odd;").await;
    master(&*store, "65537", "").await;
    let mut gc = IdentityGc::new(store.clone(), settings(1));
    gc.collect().await.unwrap();
    let second = gc.collect().await.unwrap();
    assert_eq!(
        second,
        IdentityGcReport {
            scanned: 5,
            in_range: 1,
            out_of_range: 2,
            skipped_malformed: 2,
            deleted: 1,
            ..IdentityGcReport::default()
        }
    );
    for id in ["300", "131072", "abc", "65537"] {
        assert!(exists(&*store, &id_key(id)).await, "{id}");
    }
    let locked: Vec<String> = store
        .writes()
        .into_iter()
        .filter(|(_, key)| key.starts_with(IDENTITY_LOCKS_PREFIX))
        .map(|(_, key)| key)
        .collect();
    assert!(
        locked
            .iter()
            .all(|key| key.starts_with(&identity_lock_path("65536"))),
        "only keys in range are locked: {locked:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn deletions_are_paced_by_the_rate_limit() {
    let store = Arc::new(MemoryStore::new());
    for id in 256..261 {
        master(&*store, &id.to_string(), &format!("k8s:app={id};")).await;
    }
    let mut gc = IdentityGc::new(
        store.clone(),
        IdentityGcSettings {
            deletions_per_minute: NonZeroU32::new(2).unwrap(),
            ..settings(0)
        },
    );
    assert_eq!(
        gc.collect().await.unwrap().marked,
        5,
        "marking costs no token"
    );
    let masters = || {
        let store = store.clone();
        async move { store.list_prefix(IDENTITY_ID_PREFIX).await.unwrap().len() }
    };
    let round = tokio::spawn(async move { gc.collect().await.unwrap() });
    // A burst of two, then one every 30 s.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(masters().await, 3);
    assert!(
        no_locks_left(&*store).await,
        "the token is waited for before the lock, not under it"
    );
    tokio::time::sleep(Duration::from_secs(28)).await;
    assert_eq!(masters().await, 3, "at 29 s");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(masters().await, 2, "at 31 s");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(masters().await, 1, "at 61 s");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(masters().await, 0, "at 91 s");
    assert_eq!(round.await.unwrap().deleted, 5);
}

#[tokio::test]
async fn the_gc_waits_for_an_agent_holding_the_lock_and_sees_what_it_wrote() {
    let store = Arc::new(MemoryStore::new());
    master(&*store, "256", "k8s:app=a;").await;
    let mut gc = IdentityGc::new(store.clone(), settings(0));
    gc.collect().await.unwrap();

    let agent = store.lock(&identity_lock_path("256")).await.unwrap();
    let round = tokio::spawn(async move { gc.collect().await.unwrap() });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!round.is_finished(), "the GC waits behind the agent's lock");
    assert!(exists(&*store, &id_key("256")).await);
    // The agent takes the identity for one of its endpoints, and unlocks.
    user(&*store, "k8s:app=a;", "10.0.0.1", "256").await;
    store.unlock(agent).await.unwrap();
    let report = round.await.unwrap();
    assert_eq!((report.kept_used, report.deleted), (1, 0));
    assert!(exists(&*store, &id_key("256")).await);
}

#[tokio::test]
async fn a_master_key_written_after_the_listing_is_not_deleted() {
    let store = Arc::new(Meddling::default());
    master(&*store, "256", "k8s:app=a;").await;
    let mut gc = IdentityGc::new(store.clone(), settings(0));
    gc.collect().await.unwrap();
    store.rewrite_after_next_listing(&id_key("256"));
    let second = gc.collect().await.unwrap();
    assert_eq!((second.raced, second.deleted), (1, 0));
    assert!(exists(&*store, &id_key("256")).await);
    assert_eq!(gc.collect().await.unwrap().marked, 1, "judged afresh");
    assert_eq!(gc.collect().await.unwrap().deleted, 1);
}

#[tokio::test]
async fn a_failed_round_keeps_the_marks_it_did_not_reach() {
    let store = Arc::new(Meddling::default());
    for id in ["256", "257", "258"] {
        master(&*store, id, &format!("k8s:app={id};")).await;
    }
    let mut gc = IdentityGc::new(store.clone(), settings(0));
    assert_eq!(gc.collect().await.unwrap().marked, 3);
    store.fail_next("lock", &identity_lock_path("257"));
    assert!(gc.collect().await.is_err());
    assert!(
        !exists(&*store, &id_key("256")).await,
        "deleted before the failure"
    );
    assert!(no_locks_left(&*store).await);
    let third = gc.collect().await.unwrap();
    assert_eq!(
        (third.deleted, third.marked),
        (2, 0),
        "257 and 258 still marked from the first round"
    );
}

#[tokio::test]
async fn a_lock_is_given_back_when_judging_fails() {
    let store = Arc::new(Meddling::default());
    master(&*store, "256", "k8s:app=a;").await;
    let mut gc = IdentityGc::new(store.clone(), settings(0));
    assert_eq!(gc.collect().await.unwrap().marked, 1);
    // The second round judges the deletion again under the lock, and the
    // listing of its value keys fails.
    store.fail_next("list", &value_prefix("k8s:app=a;"));
    assert!(gc.collect().await.is_err());
    assert!(no_locks_left(&*store).await);
    assert!(exists(&*store, &id_key("256")).await);
}

#[tokio::test]
async fn the_duty_reports_its_deletions() {
    let store = Arc::new(MemoryStore::new());
    master(&*store, "256", "k8s:app=a;").await;
    let mut duty = IdentityGc::new(
        store.clone(),
        IdentityGcSettings {
            interval: Duration::from_secs(60),
            ..settings(0)
        },
    );
    assert_eq!(duty.name(), "identity-gc");
    assert_eq!(duty.interval(), Duration::from_secs(60));
    assert_eq!(duty.round().await, Ok(RoundReport { deletions: 0 }));
    assert_eq!(duty.round().await, Ok(RoundReport { deletions: 1 }));
}

#[test]
fn defaults_are_cilium_s() {
    let defaults = IdentityGcSettings::default();
    assert_eq!(defaults.mesh.cluster_id(), 0);
    assert_eq!(defaults.interval, Duration::from_secs(900));
    assert_eq!(defaults.deletions_per_minute.get(), 2500);
}

#[tokio::test(start_paused = true)]
async fn run_while_leading_over_a_dyn_store_deletes_an_orphan_on_the_second_round() {
    use ipam_duty::{run_while_leading, DutyMetrics};
    let memory = Arc::new(MemoryStore::new());
    master(&*memory, "256", "k8s:app=a;").await;
    let store: Arc<dyn SharedStore> = memory.clone();
    let (leader_tx, leader) = tokio::sync::watch::channel(true);
    let (stop_tx, stop) = tokio::sync::oneshot::channel::<()>();
    let metrics = Arc::new(DutyMetrics::new());
    let task = tokio::spawn(run_while_leading(
        move || IdentityGc::new(store.clone(), IdentityGcSettings::default()),
        leader,
        metrics.clone(),
        async {
            let _ = stop.await;
        },
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(exists(&*memory, &id_key("256")).await, "marked at 0 min");
    // A new leader forgets the marks: its own first round only marks.
    leader_tx.send_replace(false);
    tokio::time::sleep(Duration::from_secs(1)).await;
    leader_tx.send_replace(true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(exists(&*memory, &id_key("256")).await, "marked afresh");
    tokio::time::sleep(Duration::from_secs(15 * 60)).await;
    assert!(
        !exists(&*memory, &id_key("256")).await,
        "deleted 15 min later"
    );
    assert_eq!(metrics.runs("identity-gc"), 3);
    assert_eq!(metrics.deletions("identity-gc"), 1);
    stop_tx.send(()).unwrap();
    task.await.unwrap();
}
