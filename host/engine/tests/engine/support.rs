//! What every test starts from: nodes, engine settings, an engine running
//! in the background over a cloud and the in-memory store, and rate limits
//! loose enough never to be felt.

use std::sync::Arc;
use std::time::Duration;

use ipam_ciliumnode::{go_agent, CiliumNode};
use ipam_cloud::rate::{BucketConfig, RateLimits};
use ipam_cloud::CloudApi;
use ipam_cloud::InstanceLimits;
use ipam_engine::{
    Engine, EngineState, InstanceCache, IpamMode, LimitedCloud, LoopSettings, Maintainer,
    MaintenanceSettings, MemoryNodeStore, Metrics, NodeStore, RunningEngine,
};
use ipam_fake_cloud::{FakeCloud, InstanceSpec, SubnetSpec};

/// A cloud of one instance, `instance` of type `instance_type` with
/// `limits`, in a /24 subnet (`subnet-b`) of `vpc-1`.
pub fn one_instance_cloud(
    instance: &str,
    instance_type: &str,
    limits: InstanceLimits,
) -> FakeCloud {
    FakeCloud::builder()
        .vpc("vpc-1", &["10.0.0.0/16"])
        .subnet(SubnetSpec::new(
            "subnet-b",
            "vpc-1",
            "zone-b",
            "10.0.2.0/24",
        ))
        .instance_type(instance_type, limits)
        .instance(InstanceSpec::new(instance, instance_type, "subnet-b"))
        .build()
        .unwrap()
}

/// t3.nano-like: 2 interfaces of 2 slots: at most 2 pod addresses with the
/// primary interface's own.
pub const TINY: InstanceLimits = InstanceLimits {
    max_interfaces: 2,
    ipv4_per_interface: 2,
    ipv6_per_interface: 2,
    prefix_delegation: false,
};

/// The cluster name the engine tags its interfaces with.
pub const CLUSTER: &str = "test";

/// A node on `instance` keeping `pre` addresses free, as cilium-agent in
/// ENI mode registers it (`"azure": {}` and all).
pub fn node(name: &str, instance: &str, pre: u32) -> CiliumNode {
    let mut node = go_agent::eni_node(name, instance);
    node.spec.ipam.pre_allocate = Some(pre);
    node
}

/// [`node`] as cilium-agent in Azure mode registers it (`"eni": {}` and all).
pub fn azure_node(name: &str, instance: &str, pre: u32) -> CiliumNode {
    let mut node = go_agent::azure_node(name, instance);
    node.spec.ipam.pre_allocate = Some(pre);
    node
}

/// [`settings`] in Azure mode.
pub fn azure_settings() -> MaintenanceSettings {
    MaintenanceSettings {
        ipam_mode: IpamMode::Azure,
        ..settings()
    }
}

/// [`node`], leaving the primary interface to the node itself (as on EKS
/// with custom networking): pod addresses come from interfaces 1 and up.
pub fn pod_interfaces_node(name: &str, instance: &str, pre: u32) -> CiliumNode {
    let mut node = node(name, instance, pre);
    node.spec.eni.first_interface_index = Some(1);
    node
}

/// Cluster `test`, /32 addresses, a 30 s release delay, no interface
/// freeing unless a test turns it on.
pub fn settings() -> MaintenanceSettings {
    MaintenanceSettings {
        cluster_name: CLUSTER.into(),
        adoption_tags: Vec::new(),
        prefix_delegation: false,
        release_delay: Duration::from_secs(30),
        free_interfaces: false,
        max_steps: 20,
        ipam_mode: IpamMode::Eni,
    }
}

/// The default loop, with release rechecks every 5 s.
pub fn config() -> LoopSettings {
    LoopSettings {
        release_recheck: Duration::from_secs(5),
        ..LoopSettings::default()
    }
}

/// One shared bucket so large no test waits on it.
pub fn unfelt_limits() -> RateLimits {
    RateLimits::shared_bucket(BucketConfig {
        burst: 10_000.0,
        per_second: 10_000.0,
    })
}

/// The fake behind a `LimitedCloud` that records API metrics.
pub fn limited(
    fake: &Arc<FakeCloud>,
    limits: RateLimits,
    metrics: &Arc<Metrics>,
) -> Arc<dyn CloudApi> {
    Arc::new(LimitedCloud::new(fake.clone(), limits).with_metrics(metrics.clone()))
}

/// A maintainer over `cloud` and `store` with a fresh cache and `metrics`.
pub fn maintainer(
    cloud: Arc<dyn CloudApi>,
    store: Arc<MemoryNodeStore>,
    settings: MaintenanceSettings,
    metrics: Arc<Metrics>,
) -> Maintainer {
    Maintainer::new(
        cloud,
        Arc::new(InstanceCache::new()),
        store,
        settings,
        metrics,
    )
}

/// An engine running in the background.
pub struct Running {
    engine: Arc<Engine>,
    running: RunningEngine,
}

pub fn start(
    cloud: Arc<dyn CloudApi>,
    store: Arc<MemoryNodeStore>,
    settings: MaintenanceSettings,
    config: LoopSettings,
    metrics: Arc<Metrics>,
) -> Running {
    // The engine's unix clock starts at its first reading and follows
    // tokio's clock from there, once per test binary: read it at the very
    // start of every test, so no test's interface ages are measured from
    // another test's later simulated time.
    let _ = ipam_engine::clock::unix_now();
    let maintainer = maintainer(cloud, store, settings, metrics);
    let engine = Arc::new(Engine::new(Arc::new(maintainer), config));
    Running {
        running: engine.clone().spawn(),
        engine,
    }
}

impl Running {
    /// Wait until the first resync is in and every node had a pass.
    pub async fn ready(&self) {
        let mut state = self.engine.state();
        tokio::time::timeout(Duration::from_secs(600), state.wait_for(|s| s.ready))
            .await
            .expect("ready within 10 simulated minutes")
            .expect("engine alive");
    }

    pub fn state(&self) -> EngineState {
        self.engine.state().borrow().clone()
    }

    /// Follow the state as it changes.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<EngineState> {
        self.engine.state()
    }

    pub async fn stop(self) {
        self.running
            .stop()
            .await
            .expect("the engine runs until stopped");
    }
}

/// Poll every simulated second until `done` holds for the store's nodes
/// (failing after `limit`); how long it took.
pub async fn until(
    store: &MemoryNodeStore,
    limit: Duration,
    done: impl Fn(&[CiliumNode]) -> bool,
) -> Duration {
    let start = tokio::time::Instant::now();
    loop {
        let nodes = store.list().await.unwrap();
        if done(&nodes) {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "not done in {limit:?}: {nodes:#?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A node as the store has it now.
pub async fn get(store: &MemoryNodeStore, name: &str) -> CiliumNode {
    store.get(name).await.unwrap().expect("the node exists")
}
