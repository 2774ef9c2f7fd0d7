//! The loop's own duties, each staged on the paused clock: a failing node
//! backs off, doubling up to the cap, whatever watch events it gets meanwhile,
//! and a panicking one is retried while
//! the others carry on; at most `max_concurrent_nodes` passes run at once,
//! the largest deficit first; a blocked node waits for its retry and a node
//! whose steps ran out goes again at once; resync and GC never overlap
//! themselves, and a failed resync is retried after the backoff cap; an
//! engine whose node store fails ends with the store's error.

use std::sync::Arc;
use std::time::Duration;

use ipam_ciliumnode::{CiliumNode, NodeUpdate};
use ipam_cloud::{CloudApi, Operation, ProviderError};
use ipam_engine::{
    Announcement, Engine, EngineError, InstanceCache, LoopSettings, Maintainer, MemoryNodeStore,
    Metrics, NodeEvent, NodeStore, StoreError,
};
use ipam_fake_cloud::FakeCloud;
use tokio::time::Instant;

use crate::steered::SteeredCloud;
use crate::support::{get, node, one_instance_cloud, settings, start, until, Running, TINY};

fn store_with(nodes: &[(&str, &str, u32)]) -> Arc<MemoryNodeStore> {
    let store = Arc::new(MemoryNodeStore::new());
    for (name, instance, pre) in nodes {
        store.upsert(node(name, instance, *pre)).unwrap();
    }
    store
}

fn run(cloud: Arc<dyn CloudApi>, store: &Arc<MemoryNodeStore>, config: LoopSettings) -> Running {
    start(
        cloud,
        store.clone(),
        settings(),
        config,
        Arc::new(Metrics::new()),
    )
}

fn transient() -> ProviderError {
    ProviderError::Transient("the cloud hiccupped".into())
}

/// The milliseconds between the engine's first `failures` failed passes,
/// one at a time, each within 30 s of the last.
async fn waits_between_failures(running: &Running, failures: usize) -> Vec<u64> {
    let mut state = running.watch();
    let mut failed_at = Vec::new();
    while failed_at.len() < failures {
        let seen = state.borrow_and_update().failed_passes;
        if seen > failed_at.len() as u64 {
            assert_eq!(seen, failed_at.len() as u64 + 1, "one failure at a time");
            failed_at.push(Instant::now());
        }
        tokio::time::timeout(Duration::from_secs(30), state.changed())
            .await
            .expect("the next failure comes within 30 s")
            .unwrap();
    }
    failed_at
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis() as u64)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_failing_node_backs_off_doubling_up_to_the_cap() {
    let fake = Arc::new(FakeCloud::standard(1));
    let store = store_with(&[("n0", "i-0000", 2)]);
    fake.fail_next(Operation::AssignIps, 5, transient());
    let config = LoopSettings {
        failure_backoff: Duration::from_secs(1),
        failure_backoff_cap: Duration::from_secs(4),
        ..LoopSettings::default()
    };
    let running = run(fake.clone(), &store, config);
    let waits = waits_between_failures(&running, 5).await;
    for (wait, expected) in waits.iter().zip([1_000, 2_000, 4_000, 4_000]) {
        assert!(
            (expected..expected + 50).contains(wait),
            "waits {waits:?} ms: 1 s doubling, capped at 4 s"
        );
    }
    until(&store, Duration::from_secs(30), |nodes| {
        nodes[0].spec.ipam.pool.len() >= 2
    })
    .await;
    assert_eq!(fake.calls(Operation::AssignIps), 6);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_nodes_backoff_holds_against_its_watch_events() {
    let fake = Arc::new(FakeCloud::standard(1));
    let store = store_with(&[("n0", "i-0000", 2)]);
    fake.fail_next(Operation::AssignIps, 4, transient());
    let config = LoopSettings {
        failure_backoff: Duration::from_secs(1),
        failure_backoff_cap: Duration::from_secs(60),
        ..LoopSettings::default()
    };
    let running = run(fake.clone(), &store, config);
    // Its agent writes the node every 100 ms, each write a watch event.
    let agent = tokio::spawn({
        let store = store.clone();
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = store.agent_update("n0", |n| n.spec.ipam.max_above_watermark = Some(0));
            }
        }
    });
    let waits = waits_between_failures(&running, 4).await;
    for (wait, expected) in waits.iter().zip([1_000, 2_000, 4_000]) {
        assert!(
            (expected..expected + 150).contains(wait),
            "waits {waits:?} ms: 1 s doubling, whatever the watch events"
        );
    }
    until(&store, Duration::from_secs(30), |nodes| {
        nodes[0].spec.ipam.pool.len() >= 2
    })
    .await;
    assert_eq!(
        fake.calls(Operation::AssignIps),
        5,
        "four failures, one success"
    );
    agent.abort();
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_pass_is_retried_and_the_other_nodes_carry_on() {
    let cloud = Arc::new(SteeredCloud::new(
        Arc::new(FakeCloud::standard(3)),
        Duration::ZERO,
    ));
    cloud.panic_next(Operation::AssignIps, 1);
    let store = store_with(&[
        ("n0", "i-0000", 2),
        ("n1", "i-0001", 2),
        ("n2", "i-0002", 2),
    ]);
    let running = run(cloud.clone(), &store, LoopSettings::default());
    running.ready().await;
    until(&store, Duration::from_secs(30), |nodes| {
        nodes.iter().all(|n| n.spec.ipam.pool.len() >= 2)
    })
    .await;
    let state = running.state();
    assert_eq!(state.failed_passes, 1, "{state:?}");
    assert_eq!(
        state.running, 0,
        "the panicked pass is not counted as running"
    );
    assert_eq!(
        cloud.fake.calls(Operation::AssignIps),
        3,
        "the panic reached no cloud"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn at_most_max_concurrent_nodes_passes_run_at_once() {
    // Every call takes a second, so passes overlap as much as the loop lets
    // them.
    let cloud = Arc::new(SteeredCloud::new(
        Arc::new(FakeCloud::standard(6)),
        Duration::from_secs(1),
    ));
    let nodes: Vec<(String, String)> = (0..6)
        .map(|n| (format!("n{n}"), format!("i-{n:04}")))
        .collect();
    let store = Arc::new(MemoryNodeStore::new());
    for (name, instance) in &nodes {
        store.upsert(node(name, instance, 2)).unwrap();
    }
    let config = LoopSettings {
        max_concurrent_nodes: 2,
        ..LoopSettings::default()
    };
    let running = run(cloud.clone(), &store, config);
    running.ready().await;
    // Done before the next resync (at 60 s) could overlap the passes.
    until(&store, Duration::from_secs(50), |nodes| {
        nodes.iter().all(|n| n.spec.ipam.pool.len() >= 2)
    })
    .await;
    assert_eq!(cloud.max_in_flight(), 2);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_largest_deficit_goes_first() {
    let fake = Arc::new(FakeCloud::standard(3));
    let store = store_with(&[("a", "i-0000", 2), ("b", "i-0001", 12), ("c", "i-0002", 6)]);
    let mut events = store.subscribe();
    let config = LoopSettings {
        max_concurrent_nodes: 1,
        ..LoopSettings::default()
    };
    let running = run(fake, &store, config);
    running.ready().await;
    let mut order: Vec<String> = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let NodeEvent::Upserted(node) = event {
            if !node.spec.ipam.pool.is_empty() && !order.contains(&node.name) {
                order.push(node.name.clone());
            }
        }
    }
    assert_eq!(order, ["b", "c", "a"]);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_blocked_node_waits_for_its_retry() {
    let store = store_with(&[("n1", "i-tiny", 8)]);
    let config = LoopSettings {
        blocked_retry: Duration::from_secs(30),
        resync_interval: Duration::from_secs(600),
        ..LoopSettings::default()
    };
    let running = run(
        Arc::new(one_instance_cloud("i-tiny", "t3.nano", TINY)),
        &store,
        config,
    );
    running.ready().await;
    let after_first = running.state().passes;
    tokio::time::sleep(Duration::from_secs(95)).await;
    assert_eq!(
        running.state().passes - after_first,
        3,
        "one pass every 30 s: {:?}",
        running.state()
    );
    assert!(!get(&store, "n1")
        .await
        .status
        .ipam
        .operator_status
        .error
        .is_empty());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_node_whose_steps_ran_out_goes_again_at_once() {
    let store = store_with(&[("n0", "i-0000", 25)]);
    let mut settings = settings();
    settings.max_steps = 1;
    let config = LoopSettings {
        resync_interval: Duration::from_secs(600),
        ..LoopSettings::default()
    };
    let running = start(
        Arc::new(FakeCloud::standard(1)),
        store.clone(),
        settings,
        config,
        Arc::new(Metrics::new()),
    );
    running.ready().await;
    // 25 addresses take three interfaces, a step each: three passes.
    until(&store, Duration::from_secs(5), |nodes| {
        nodes[0].spec.ipam.pool.len() >= 25
    })
    .await;
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn resync_and_gc_never_overlap_themselves() {
    // A resync takes 4 calls of 1 s, a GC a call of 1 s; each interval is
    // shorter than its work.
    let fake = Arc::new(FakeCloud::standard(1));
    let cloud = Arc::new(SteeredCloud::new(fake.clone(), Duration::from_secs(1)));
    let store = Arc::new(MemoryNodeStore::new());
    let config = LoopSettings {
        resync_interval: Duration::from_secs(2),
        gc_interval: Duration::from_millis(500),
        ..LoopSettings::default()
    };
    let running = run(cloud.clone(), &store, config);
    running.ready().await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    // One resync and one GC may run side by side, never two of one kind.
    assert!(cloud.max_in_flight() <= 2, "{}", cloud.max_in_flight());
    let resyncs = fake.calls(Operation::GetVpcs);
    assert!((7..=9).contains(&resyncs), "a resync every 4 s: {resyncs}");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_first_resync_is_the_only_one_until_its_interval_and_a_failed_one_is_retried() {
    let fake = Arc::new(FakeCloud::standard(1));
    fake.fail_next(Operation::GetVpcs, 1, transient());
    let store = store_with(&[("n0", "i-0000", 2)]);
    let config = LoopSettings {
        resync_interval: Duration::from_secs(60),
        failure_backoff_cap: Duration::from_secs(10),
        gc_interval: Duration::from_secs(300),
        ..LoopSettings::default()
    };
    let running = run(fake.clone(), &store, config);
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(fake.calls(Operation::GetVpcs), 1, "the failed one, waiting");
    assert!(!running.state().ready);
    running.ready().await;
    let state = running.state();
    assert_eq!(state.resyncs, 1, "{state:?}");
    assert!(state.passes >= 1);
    assert_eq!(
        fake.calls(Operation::GetVpcs),
        2,
        "retried after the cap, not at once"
    );
    assert_eq!(fake.calls(Operation::GetDetachedInterfaces), 0, "no GC yet");
    tokio::time::sleep(Duration::from_secs(55)).await;
    assert_eq!(fake.calls(Operation::GetVpcs), 2, "the next is due at 70 s");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(fake.calls(Operation::GetVpcs), 3);
    assert_eq!(running.state().resyncs, 2);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn ready_means_every_listed_node_had_a_pass() {
    let cloud = Arc::new(SteeredCloud::new(
        Arc::new(FakeCloud::standard(4)),
        Duration::from_secs(1),
    ));
    let store = store_with(&[
        ("n0", "i-0000", 2),
        ("n1", "i-0001", 2),
        ("n2", "i-0002", 2),
        ("n3", "i-0003", 2),
    ]);
    let running = run(cloud, &store, LoopSettings::default());
    let mut state = running.watch();
    state.wait_for(|s| s.ready).await.unwrap();
    let at_ready = running.state();
    assert!(at_ready.resyncs >= 1, "{at_ready:?}");
    assert!(at_ready.passes >= 4, "{at_ready:?}");
    for name in ["n0", "n1", "n2", "n3"] {
        assert!(!get(&store, name).await.spec.ipam.pool.is_empty());
    }
    running.stop().await;
}

/// The in-memory store, except that listing its nodes fails.
struct UnlistableStore(MemoryNodeStore);

#[async_trait::async_trait]
impl NodeStore for UnlistableStore {
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<NodeEvent> {
        self.0.subscribe()
    }
    async fn list(&self) -> Result<Vec<CiliumNode>, StoreError> {
        Err(StoreError::Backend("the API server is gone".into()))
    }
    async fn get(&self, name: &str) -> Result<Option<CiliumNode>, StoreError> {
        self.0.get(name).await
    }
    async fn update(&self, name: &str, update: &NodeUpdate) -> Result<CiliumNode, StoreError> {
        self.0.update(name, update).await
    }
    fn pending_pods(&self, name: &str) -> u32 {
        self.0.pending_pods(name)
    }
    async fn announce(&self, name: &str, announcement: Announcement) {
        self.0.announce(name, announcement).await
    }
}

#[tokio::test(start_paused = true)]
async fn an_engine_whose_node_store_fails_ends_and_says_why() {
    let fake = Arc::new(FakeCloud::standard(1));
    let maintainer = Maintainer::new(
        fake,
        Arc::new(InstanceCache::new()),
        Arc::new(UnlistableStore(MemoryNodeStore::new())),
        settings(),
        Arc::new(Metrics::new()),
    );
    let running = Arc::new(Engine::new(Arc::new(maintainer), LoopSettings::default())).spawn();
    assert!(!running.is_finished(), "it runs until the first listing");
    let start = Instant::now();
    while !running.is_finished() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the engine ends once its store fails"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let error = running.stop().await.unwrap_err();
    assert!(matches!(error, EngineError::Store(_)), "{error}");
}
