//! Cilium's trigger metrics as the loop records them: requests for a node
//! pass or a resync fold into the next run, which records how many it
//! answers and how long the first waited; every CiliumNode write is a
//! `k8s_sync` run.

use std::sync::Arc;
use std::time::Duration;

use ipam_engine::{LoopSettings, MemoryNodeStore, Metrics};
use ipam_fake_cloud::FakeCloud;

use crate::steered::SteeredCloud;
use crate::support::{config, node, settings, start};

/// A figure of the OpenMetrics text, by its sample's name.
fn figure(metrics: &Metrics, sample: &str) -> f64 {
    let text = metrics.encode();
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {sample} in\n{text}"))
}

#[tokio::test(start_paused = true)]
async fn a_resync_due_while_one_runs_is_answered_by_the_next_and_its_wait_recorded() {
    let fake = Arc::new(FakeCloud::standard(1));
    let cloud = Arc::new(SteeredCloud::new(fake, Duration::ZERO));
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(node("n1", "i-0000", 4)).unwrap();
    let metrics = Arc::new(Metrics::new());
    let config = LoopSettings {
        resync_interval: Duration::from_secs(60),
        ..config()
    };
    let running = start(cloud.clone(), store, settings(), config, metrics.clone());
    running.ready().await;
    // The resync at 60 s is held past the one due at 120 s.
    let (taken, hand_back) = cloud.hold_next_listing();
    taken.await.unwrap();
    tokio::time::sleep(Duration::from_secs(65)).await;
    assert_eq!(running.state().resyncs, 1, "the second is still running");
    hand_back.send(()).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(running.state().resyncs, 2);
    assert_eq!(metrics.resync.folds.as_ref().unwrap().get(), 1);
    // At 180 s the next resync answers the requests of 120 s and 180 s.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(running.state().resyncs, 3);
    assert_eq!(metrics.resync.folds.as_ref().unwrap().get(), 2);
    assert_eq!(metrics.resync.queued.get(), 4, "at 0, 60, 120 and 180 s");
    assert_eq!(
        figure(&metrics, "cilium_operator_ipam_resync_latency_seconds_sum"),
        60.0,
        "the request of 120 s waited a minute; the others none"
    );
    assert_eq!(
        figure(
            &metrics,
            "cilium_operator_ipam_resync_duration_seconds_count"
        ),
        3.0
    );
    assert!(
        figure(&metrics, "cilium_operator_ipam_resync_duration_seconds_sum") >= 65.0,
        "the held one ran over a minute"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn node_passes_and_node_writes_are_counted_as_cilium_triggers() {
    let fake = Arc::new(FakeCloud::standard(2));
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(node("n1", "i-0000", 4)).unwrap();
    store.upsert(node("n2", "i-0001", 4)).unwrap();
    let metrics = Arc::new(Metrics::new());
    let running = start(fake, store.clone(), settings(), config(), metrics.clone());
    running.ready().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let passes = running.state().passes as f64;
    assert_eq!(
        figure(
            &metrics,
            "cilium_operator_ipam_deficit_resolver_duration_seconds_count"
        ),
        passes,
        "a run per pass"
    );
    assert_eq!(
        figure(
            &metrics,
            "cilium_operator_ipam_deficit_resolver_latency_seconds_count"
        ),
        passes
    );
    let queued = metrics.deficit_resolver.queued.get() as f64;
    assert!(
        queued >= passes,
        "each pass answers one request or more: {queued} for {passes}"
    );
    let writes = metrics.k8s_sync.queued.get() as f64;
    assert!(writes >= 2.0, "each node's pool written: {writes}");
    assert_eq!(
        figure(
            &metrics,
            "cilium_operator_ipam_k8s_sync_duration_seconds_count"
        ),
        writes
    );
    assert_eq!(
        figure(
            &metrics,
            "cilium_operator_ipam_k8s_sync_latency_seconds_count"
        ),
        writes
    );
    assert!(metrics.k8s_sync.folds.is_none(), "nothing folds a write");
    running.stop().await;
}
