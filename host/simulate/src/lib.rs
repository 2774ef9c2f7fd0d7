//! `ipam-operator simulate`: the real engine, a provider (the mock component,
//! loaded by the caller) behind a [`CloudModel`] (latency and the cloud's own
//! throttling table, [`CloudTable`]; the engine keeps to limits of its own),
//! and in-memory nodes whose simulated agents start and stop pods. Runs on
//! tokio's paused clock, so simulated minutes cost milliseconds; the caller
//! provides that runtime (see [`run`]). Nothing here knows how the provider
//! runs: the engine's tests use the agents with a fake cloud, the binary with
//! the wasm mock.

pub mod agents;
pub mod cloud_model;
pub mod cloud_table;
pub mod scenario;
mod summary;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

pub use agents::AgentTick;
pub use cloud_model::{CloudModel, Latency, ModelCounts};
pub use cloud_table::{admission_bound, AdmissionBound, CloudTable, TableError};
use ipam_ciliumnode::CiliumNode;
use ipam_cloud::CloudApi;
use ipam_engine::{
    Engine, EngineState, InstanceCache, LimitedCloud, Maintainer, MemoryNodeStore, Metrics,
    NodeStore,
};
use ipam_pool::tags::cluster_tag;
pub use scenario::{EngineLimits, Scenario, ScenarioError, SimulatedCloud, DEFAULT_SCENARIO};
pub use summary::{PhaseResult, Summary};

const CLUSTER: &str = "sim";

#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error(transparent)]
    Table(#[from] TableError),
    #[error(transparent)]
    Store(#[from] ipam_engine::StoreError),
    #[error("reading the final cloud state: {0}")]
    Cloud(#[from] ipam_cloud::CloudError),
    #[error("the engine stopped: {0}")]
    Engine(#[from] ipam_engine::EngineError),
    #[error("the provider's rate model: {0}")]
    RateModel(ipam_cloud::rate::RateModelError),
}

/// A progress report, every `progress-seconds` of simulated time.
#[derive(Debug, Clone)]
pub struct Progress {
    pub at: Duration,
    pub agents: AgentTick,
    pub engine: EngineState,
    pub cloud_calls: u64,
    pub throttled: u64,
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{:>6}s] nodes satisfied {}/{}, settled {} | pods {} running, {} pending | pool {} IPs | cloud calls {} ({} throttled) | engine: {} queued, {} running, {} passes",
            self.at.as_secs(),
            self.agents.satisfied,
            self.agents.nodes,
            self.agents.settled,
            self.agents.pods_running,
            self.agents.pods_pending,
            self.agents.pool,
            self.cloud_calls,
            self.throttled,
            self.engine.queued,
            self.engine.running,
            self.engine.passes,
        )
    }
}

/// Run `scenario` against `provider`, a mock provider configured with the
/// scenario's cloud ([`Scenario::mock_settings`]). Must run on a
/// current-thread runtime whose clock is paused (`start_paused(true)`), which
/// is what makes simulated time free.
pub async fn run<C: CloudApi + 'static>(
    provider: C,
    scenario: &Scenario,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Summary, SimulateError> {
    let wall = std::time::Instant::now();
    // The cloud model enforces the cloud's own table; the engine keeps to
    // the limits the scenario says it believes in.
    let table = scenario.cloud_table.table()?;
    let limits = scenario
        .engine_limits
        .limits(&table, provider.info())
        .map_err(SimulateError::RateModel)?;
    let metrics = Arc::new(Metrics::new());
    let cloud: Arc<LimitedCloud<CloudModel<C>>> = Arc::new(
        LimitedCloud::new(
            CloudModel::new(provider, scenario.latency.clone(), table.clone()),
            limits,
        )
        .with_metrics(metrics.clone()),
    );
    let store = Arc::new(MemoryNodeStore::new());
    for index in 0..scenario.nodes.count {
        let mut spec = scenario.nodes.spec.clone();
        spec.instance_id = Scenario::instance_id(index);
        store.upsert(CiliumNode {
            name: Scenario::node_name(index),
            spec,
            ..Default::default()
        })?;
    }
    let cache = Arc::new(InstanceCache::with_reuse_cooldown(Duration::from_secs(
        scenario.engine.reuse_cooldown_seconds,
    )));
    let maintainer = Arc::new(Maintainer::new(
        cloud.clone(),
        cache,
        store.clone(),
        scenario.engine_settings(CLUSTER),
        metrics.clone(),
    ));
    let engine = Arc::new(Engine::new(maintainer, scenario.engine_config()));
    let engine_state = engine.state();
    let running = engine.spawn();

    let start = Instant::now();
    let step = Duration::from_secs(scenario.agent_interval_seconds);
    let end = Duration::from_secs(scenario.duration_seconds);
    let mut phases: Vec<PhaseResult> = scenario
        .workload
        .iter()
        .map(|p| PhaseResult {
            at: p.at,
            pods_per_node: p.pods_per_node,
            satisfied_after: None,
            settled_after: None,
        })
        .collect();
    let mut next_progress = Duration::ZERO;
    let last = loop {
        let at = start.elapsed();
        let last = agents::tick(&store, scenario.pods_at(at.as_secs())).await?;
        if let Some(phase) = phases.iter_mut().rev().find(|p| p.at <= at.as_secs()) {
            let since = at.saturating_sub(Duration::from_secs(phase.at));
            if phase.satisfied_after.is_none() && last.satisfied == last.nodes {
                phase.satisfied_after = Some(since);
            }
            if phase.settled_after.is_none() && last.settled == last.nodes {
                phase.settled_after = Some(since);
            }
        }
        if at >= next_progress || at >= end {
            let counts = cloud.inner().counts();
            progress(&Progress {
                at,
                agents: last,
                engine: engine_state.borrow().clone(),
                cloud_calls: counts.calls.values().sum(),
                throttled: counts.throttled.values().sum(),
            });
            next_progress += Duration::from_secs(scenario.progress_seconds);
        }
        if at >= end || running.is_finished() {
            break last;
        }
        tokio::time::sleep(step).await;
    };
    running.stop().await?;

    let provider = cloud.inner().inner();
    let instances = provider.get_instances(&[]).await?;
    let ours = [cluster_tag(CLUSTER)];
    let leaked_left = provider.get_detached_interfaces(&ours).await?.len();
    let nodes = NodeStore::list(store.as_ref()).await?;
    let engine_final = engine_state.borrow().clone();
    Ok(summary::summarize(summary::Inputs {
        scenario,
        simulated: start.elapsed(),
        wall: wall.elapsed(),
        last,
        phases,
        instances: &instances,
        nodes: &nodes,
        leaked_left,
        model: cloud.inner().counts(),
        table: &table,
        metrics: &metrics,
        engine: engine_final,
    }))
}
