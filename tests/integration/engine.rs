//! The engine loop end to end, on tokio's paused clock: the real mock
//! component, the in-memory node store, simulated agents.

use ipam_tests as common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{engine_settings, mock, runtime, MOCK_SETTINGS};
use ipam_ciliumnode::{CiliumNode, ReleaseState};
use ipam_cloud::CloudApi;
use ipam_cloud::Operation;
use ipam_engine::InstanceCache;
use ipam_engine::LimitedCloud;
use ipam_engine::Metrics;
use ipam_engine::{Engine, LoopSettings, RunningEngine};
use ipam_engine::{Maintainer, MaintenanceSettings};
use ipam_engine::{MemoryNodeStore, NodeEvent, NodeStore};
use ipam_pool::agent;
use ipam_provider_runtime::{ProviderConfig, WasmProvider};
use ipam_simulate::{agents, Scenario, DEFAULT_SCENARIO};

/// An engine running in the background over `cloud` and `store`, with its
/// own cache and metrics.
struct Running {
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    running: RunningEngine,
}

fn start(
    cloud: Arc<dyn CloudApi>,
    store: Arc<MemoryNodeStore>,
    settings: MaintenanceSettings,
    metrics: Arc<Metrics>,
) -> Running {
    let maintainer = Maintainer::new(
        cloud,
        Arc::new(InstanceCache::new()),
        store,
        settings,
        metrics.clone(),
    );
    let config = LoopSettings {
        release_recheck: Duration::from_secs(5),
        ..LoopSettings::default()
    };
    let engine = Arc::new(Engine::new(Arc::new(maintainer), config));
    Running {
        running: engine.clone().spawn(),
        engine,
        metrics,
    }
}

impl Running {
    async fn ready(&self) {
        let mut state = self.engine.state();
        tokio::time::timeout(Duration::from_secs(600), state.wait_for(|s| s.ready))
            .await
            .expect("ready within 10 simulated minutes")
            .expect("engine alive");
    }

    async fn stop(self) {
        self.running
            .stop()
            .await
            .expect("the engine runs until stopped");
    }

    fn mutating_calls(&self) -> u64 {
        Operation::ALL
            .into_iter()
            .filter(|op| op.is_mutating())
            .map(|op| self.metrics.api_calls(op))
            .sum()
    }
}

fn limited(cloud: WasmProvider, metrics: &Arc<Metrics>) -> Arc<dyn CloudApi> {
    let limits = common::declared_limits(&cloud);
    Arc::new(LimitedCloud::new(cloud, limits).with_metrics(metrics.clone()))
}

/// Let the agents act every 5 simulated seconds until `done` holds for every
/// node (at most `limit`); the ticks it took.
async fn agents_until(
    store: &MemoryNodeStore,
    pods: u32,
    limit: Duration,
    done: fn(&CiliumNode, u32) -> bool,
) -> u32 {
    let deadline = tokio::time::Instant::now() + limit;
    let mut ticks = 0;
    loop {
        agents::tick(store, pods).await.unwrap();
        ticks += 1;
        let nodes = store.list().await.unwrap();
        if nodes.iter().all(|n| done(n, store.pending_pods(&n.name))) {
            return ticks;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not done in {limit:?}: {:?}",
            nodes
                .iter()
                .map(|n| (&n.name, n.spec.ipam.pool.len(), n.status.ipam.used.len()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn nodes_converge_publish_their_interfaces_and_show_in_metrics() {
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(common::node("n1", "i-0001", 8)).unwrap();
    store.upsert(common::node("n2", "i-0002", 12)).unwrap();
    let metrics = Arc::new(Metrics::new());
    let first = start(
        limited(mock(MOCK_SETTINGS).await, &metrics),
        store.clone(),
        engine_settings(false),
        metrics,
    );
    first.ready().await;
    agents_until(&store, 3, Duration::from_secs(300), agent::settled).await;
    for (name, pre) in [("n1", 8), ("n2", 12)] {
        let n = store.get(name).await.unwrap().unwrap();
        assert_eq!(
            n.spec.ipam.pool.len() - n.status.ipam.used.len(),
            pre,
            "{name}"
        );
        assert!(
            !n.status.eni.enis.is_empty(),
            "{name}: interfaces published"
        );
    }
    assert!(first.mutating_calls() > 0);
    let text = first.metrics.encode();
    assert!(
        text.contains("cilium_operator_ipam_nodes{category=\"total\"} 2"),
        "{text}"
    );
    // Its capacity, as Cilium counts it: m5.large, 3 interfaces of 9.
    assert!(
        text.contains("cilium_operator_ipam_available_ips{target_node=\"n2\"} 27"),
        "{text}"
    );
    assert!(text.contains("cilium_operator_ipam_api_duration_seconds_count{operation=\"assign-ips\",response_code=\"ok\"}"));
    first.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_restart_over_satisfied_nodes_makes_zero_mutating_calls() {
    let cloud: Arc<WasmProvider> = Arc::new(mock(MOCK_SETTINGS).await);
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(common::node("n1", "i-0001", 8)).unwrap();
    store.upsert(common::node("n3", "i-0003", 4)).unwrap();
    let first_metrics = Arc::new(Metrics::new());
    let first = start(
        Arc::new(
            LimitedCloud::new(cloud.clone(), common::declared_limits(cloud.as_ref()))
                .with_metrics(first_metrics.clone()),
        ),
        store.clone(),
        engine_settings(false),
        first_metrics,
    );
    first.ready().await;
    agents_until(&store, 2, Duration::from_secs(300), agent::settled).await;
    assert!(first.mutating_calls() > 0);
    first.stop().await;

    let second_metrics = Arc::new(Metrics::new());
    let second = start(
        Arc::new(
            LimitedCloud::new(cloud.clone(), common::declared_limits(cloud.as_ref()))
                .with_metrics(second_metrics.clone()),
        ),
        store.clone(),
        engine_settings(false),
        second_metrics,
    );
    second.ready().await;
    // A few resyncs and agent rounds later, still nothing changed.
    agents_until(&store, 2, Duration::from_secs(5), agent::settled).await;
    tokio::time::sleep(Duration::from_secs(180)).await;
    assert_eq!(second.mutating_calls(), 0, "{}", second.metrics.encode());
    assert!(
        second.metrics.api_calls(Operation::GetInstances) >= 3,
        "resyncs ran"
    );
    second.stop().await;
}

#[tokio::test(start_paused = true)]
async fn excess_goes_through_the_handshake_and_unneeded_interfaces_are_freed() {
    // t3.small: 3 addresses per interface for pods, interfaces 1 and 2.
    let cloud = Arc::new(mock(MOCK_SETTINGS).await);
    let store = Arc::new(MemoryNodeStore::new());
    let mut n3 = common::node("n3", "i-0003", 2);
    n3.spec.eni.first_interface_index = Some(1);
    store.upsert(n3).unwrap();
    let mut settings = engine_settings(false);
    settings.free_interfaces = true;
    settings.release_delay = Duration::from_secs(30);
    let metrics = Arc::new(Metrics::new());
    let running = start(cloud.clone(), store.clone(), settings, metrics);
    running.ready().await;
    // Four pods: 4 used + 2 free needs both pod interfaces.
    agents_until(&store, 4, Duration::from_secs(300), agent::settled).await;
    let interfaces = || async {
        cloud.get_instances(&["i-0003".into()]).await.unwrap()[0]
            .interfaces
            .len()
    };
    assert_eq!(interfaces().await, 3);
    // Pods go; the agent answers the handshake; the emptier interface goes.
    let mut events = store.subscribe();
    agents_until(&store, 0, Duration::from_secs(600), agent::settled).await;
    assert_eq!(interfaces().await, 2, "one interface freed whole");
    let n3 = store.get("n3").await.unwrap().unwrap();
    assert_eq!(n3.spec.ipam.pool.len(), 2, "pre-allocate kept");
    // Every address that left went through the whole handshake, in order.
    let mut seen: BTreeMap<String, Vec<ReleaseState>> = BTreeMap::new();
    while let Ok(event) = events.try_recv() {
        if let NodeEvent::Upserted(node) = event {
            for (ip, state) in &node.status.ipam.release_ips {
                let states = seen.entry(ip.clone()).or_default();
                if states.last() != Some(state) {
                    states.push(state.clone());
                }
            }
        }
    }
    let handshake = [
        ReleaseState::MarkedForRelease,
        ReleaseState::ReadyForRelease,
        ReleaseState::Released,
    ];
    let released: Vec<&String> = seen
        .iter()
        .filter(|(_, states)| states.as_slice() == handshake)
        .map(|(ip, _)| ip)
        .collect();
    assert!(
        released.len() >= 3,
        "an interface's addresses went through the handshake: {seen:?}"
    );
    assert!(
        seen.values().all(|states| states.as_slice() == handshake),
        "no address skipped a step: {seen:?}"
    );
    assert!(released
        .iter()
        .all(|ip| !n3.spec.ipam.pool.contains_key(*ip)));
    assert!(running.metrics.interface_deletion_ops.get() >= 1);
    assert!(store
        .announcements()
        .iter()
        .any(|(node, a)| node == "n3" && a.reason == "InterfaceDeleted"));
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn pending_pods_are_allocated_in_one_surge() {
    let cloud = Arc::new(mock(MOCK_SETTINGS).await);
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(common::node("n1", "i-0001", 8)).unwrap();
    store.set_pending_pods("n1", 15).unwrap();
    let metrics = Arc::new(Metrics::new());
    let maintainer = Maintainer::new(
        cloud,
        Arc::new(InstanceCache::new()),
        store.clone(),
        engine_settings(false),
        metrics,
    );
    let pass = maintainer.maintain("n1", 15).await.unwrap();
    let n1 = store.get("n1").await.unwrap().unwrap();
    // Without the surge the node would hold 8; with it, the 15 pods and the
    // pre-allocation on top, in one pass.
    assert_eq!(n1.spec.ipam.pool.len(), 23, "{pass:?}");
    assert_eq!(pass.needed, 0);
}

#[test]
fn the_default_simulation_runs_allocation_release_and_gc_and_ends_healthy() {
    let scenario = Scenario::parse(DEFAULT_SCENARIO).unwrap();
    let module = common::component("mock");
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let mut lines = 0;
    let mut config = ProviderConfig::new(scenario.mock_settings().unwrap());
    config.limits.timeout = Duration::from_secs(30);
    let summary = tokio
        .block_on(async {
            let provider = runtime().load(&module, config).await.unwrap();
            ipam_simulate::run(provider, &scenario, &mut |_| lines += 1).await
        })
        .unwrap();
    assert!(summary.healthy(), "{summary}");
    assert!(lines > 5, "progress was shown");
    assert!(summary.interfaces_created > 0, "{summary}");
    assert!(
        summary.interfaces_deleted >= 3,
        "freed when pods left, and the two leaks collected: {summary}"
    );
    assert_eq!(summary.leaked_left, 0);
    assert!(
        summary
            .calls
            .get(&Operation::UnassignIps)
            .is_some_and(|c| c.0 > 0),
        "{summary}"
    );
}
