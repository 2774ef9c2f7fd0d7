//! The engine loop: a full resync at start and periodically, node events
//! from the [`NodeStore`], and the [`Schedule`] deciding which node a free
//! worker takes next (largest deficit first). At most
//! `max_concurrent_nodes` nodes are worked on at once, and each works
//! sequentially, so that is also the bound on concurrent cloud calls from
//! maintenance; the cloud's per-operation buckets sit below in
//! [`crate::limits::LimitedCloud`]. Leaked-interface GC runs on its own
//! interval. Nothing here holds a lock across an await.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::allocate::{unix_now, Step};
use super::gc::{GcRound, LeakCollector};
use super::maintain::{MaintainError, Maintainer, NodePass};
use super::node::CiliumNode;
use super::schedule::Schedule;
use super::store::{NodeEvent, StoreError};
use super::watermarks;
use crate::cloud::CloudError;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Full resync of the cloud's state (Cilium: 1 minute).
    pub resync_interval: Duration,
    /// Nodes worked on at once.
    pub max_concurrent_nodes: usize,
    /// Leaked-interface GC: how often, and how old a detached interface of
    /// ours must be to count as leaked.
    pub gc_interval: Duration,
    pub gc_grace: Duration,
    /// A node that could not get addresses (subnet or instance full) is
    /// looked at again after this, or at the next resync.
    pub blocked_retry: Duration,
    /// A node with a release in progress is looked at again after this.
    pub release_recheck: Duration,
    /// First backoff after a failed pass; doubled per failure up to the cap.
    pub failure_backoff: Duration,
    pub failure_backoff_cap: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            resync_interval: Duration::from_secs(60),
            max_concurrent_nodes: 16,
            gc_interval: Duration::from_secs(300),
            gc_grace: Duration::from_secs(600),
            blocked_retry: Duration::from_secs(30),
            release_recheck: Duration::from_secs(15),
            failure_backoff: Duration::from_secs(1),
            failure_backoff_cap: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the node store failed: {0}")]
    Store(#[from] StoreError),
}

/// What the engine shows the outside (health checks, progress).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineState {
    /// The first resync is done and every node known at start had a pass.
    pub ready: bool,
    pub resyncs: u64,
    pub passes: u64,
    pub failed_passes: u64,
    pub queued: usize,
    pub running: usize,
    pub last_error: Option<String>,
}

enum Job {
    Node(String, Box<Result<NodePass, MaintainError>>),
    Resync(Result<(), CloudError>),
    Gc(Result<GcRound, CloudError>),
}

pub struct Engine {
    maintainer: Arc<Maintainer>,
    config: EngineConfig,
    gc: Arc<LeakCollector>,
    state: watch::Sender<EngineState>,
}

/// A node's deficit as its own fields show it: the scheduling priority.
fn deficit(node: &CiliumNode) -> u32 {
    let available = u32::try_from(node.spec.ipam.pool.len()).unwrap_or(u32::MAX);
    let used = u32::try_from(node.status.ipam.used.len()).unwrap_or(u32::MAX);
    watermarks::needed(node.watermarks(), available, used)
}

impl Engine {
    pub fn new(maintainer: Arc<Maintainer>, config: EngineConfig) -> Self {
        let gc = LeakCollector::new(
            maintainer.settings().cluster_name.clone(),
            config.gc_grace.as_secs(),
        );
        Self {
            maintainer,
            config,
            gc: Arc::new(gc),
            state: watch::Sender::new(EngineState::default()),
        }
    }

    pub fn maintainer(&self) -> &Arc<Maintainer> {
        &self.maintainer
    }

    /// Follow the engine's state (readiness, progress).
    pub fn state(&self) -> watch::Receiver<EngineState> {
        self.state.subscribe()
    }

    fn spawn_resync(&self, jobs: &mut JoinSet<Job>) {
        let maintainer = self.maintainer.clone();
        jobs.spawn(async move {
            let result = maintainer
                .cache()
                .resync_all(maintainer.cloud.as_ref())
                .await;
            Job::Resync(result)
        });
    }

    fn spawn_gc(&self, jobs: &mut JoinSet<Job>) {
        let maintainer = self.maintainer.clone();
        let gc = self.gc.clone();
        jobs.spawn(async move {
            let result = gc.round(maintainer.cloud.as_ref(), unix_now()).await;
            Job::Gc(result)
        });
    }

    fn spawn_node(&self, jobs: &mut JoinSet<Job>, name: String) {
        let maintainer = self.maintainer.clone();
        jobs.spawn(async move {
            let pending = maintainer.store.pending_pods(&name);
            let result = maintainer.maintain(&name, pending).await;
            Job::Node(name, Box::new(result))
        });
    }

    /// Run until `shutdown` completes; work in flight is dropped then (a
    /// leader that lost its lease must stop writing at once).
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<(), EngineError> {
        tokio::pin!(shutdown);
        let store = self.maintainer.store.clone();
        let mut events = store.subscribe();
        let mut schedule = Schedule::new();
        let mut jobs: JoinSet<Job> = JoinSet::new();
        let mut failures: std::collections::HashMap<String, u32> = Default::default();
        // Nodes that must have a pass before the engine is ready.
        let mut initial: Option<HashSet<String>> = None;
        let mut cache_ready = false;
        let mut resyncing = true;
        let mut gc_running = false;
        let mut next_resync = Instant::now() + self.config.resync_interval;
        let mut next_gc = Instant::now() + self.config.gc_interval;
        self.spawn_resync(&mut jobs);
        let mut known: Vec<CiliumNode> = store.list().await?;

        loop {
            if cache_ready {
                if initial.is_none() {
                    initial = Some(known.iter().map(|n| n.name.clone()).collect());
                }
                for node in known.drain(..) {
                    schedule.mark(&node.name, deficit(&node));
                }
                schedule.due(Instant::now());
                while schedule.running() < self.config.max_concurrent_nodes {
                    let Some(name) = schedule.start_next() else {
                        break;
                    };
                    self.spawn_node(&mut jobs, name);
                }
            }
            self.state.send_modify(|s| {
                s.queued = schedule.queued();
                s.running = schedule.running();
                if !s.ready && cache_ready && initial.as_ref().is_some_and(HashSet::is_empty) {
                    s.ready = true;
                    tracing::info!("engine ready: first resync done and every node had a pass");
                }
            });
            let wake = [Some(next_resync), Some(next_gc), schedule.next_timer()]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(next_resync);

            tokio::select! {
                biased;
                () = &mut shutdown => {
                    jobs.abort_all();
                    tracing::info!("engine stopped");
                    return Ok(());
                }
                event = events.recv() => match event {
                    Ok(NodeEvent::Upserted(node)) => {
                        if cache_ready {
                            schedule.mark(&node.name, deficit(&node));
                        }
                    }
                    Ok(NodeEvent::Deleted(name)) => {
                        schedule.forget(&name);
                        failures.remove(&name);
                        self.maintainer.forget(&name);
                        if let Some(initial) = initial.as_mut() {
                            initial.remove(&name);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "node events lagged; listing every node again");
                        known = store.list().await?;
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        tracing::warn!("node store closed its event stream; stopping");
                        jobs.abort_all();
                        return Ok(());
                    }
                },
                Some(joined) = jobs.join_next() => {
                    let job = match joined {
                        Ok(job) => job,
                        Err(error) => {
                            // A panicking pass must not stop the others; the
                            // node is picked up again by the next resync.
                            tracing::error!(%error, "an engine task failed");
                            continue;
                        }
                    };
                    match job {
                        Job::Resync(result) => {
                            resyncing = false;
                            match result {
                                Ok(()) => {
                                    self.maintainer.metrics.resync_total.inc();
                                    self.maintainer.record_subnets();
                                    self.state.send_modify(|s| s.resyncs += 1);
                                    cache_ready = true;
                                    // Every node is checked against the fresh picture.
                                    known = store.list().await?;
                                }
                                Err(error) => {
                                    tracing::warn!(%error, "resync failed; retrying");
                                    self.state.send_modify(|s| s.last_error = Some(error.to_string()));
                                    next_resync = Instant::now() + self.config.failure_backoff_cap.min(self.config.resync_interval);
                                }
                            }
                        }
                        Job::Gc(result) => {
                            gc_running = false;
                            match result {
                                Ok(round) => {
                                    for _ in &round.deleted {
                                        self.maintainer.metrics.interface_deletion_ops.inc();
                                    }
                                }
                                Err(error) => tracing::warn!(%error, "leaked-interface GC failed"),
                            }
                        }
                        Job::Node(name, result) => {
                            if let Some(initial) = initial.as_mut() {
                                initial.remove(&name);
                            }
                            let now = Instant::now();
                            match *result {
                                Ok(pass) => {
                                    failures.remove(&name);
                                    schedule.done(&name, pass.needed);
                                    if matches!(pass.steps.last(), Some(Step::Blocked(_))) {
                                        schedule.revisit(&name, now + self.config.blocked_retry);
                                    } else if pass.needed > 0 {
                                        // Steps ran out before the node was satisfied.
                                        schedule.mark(&name, pass.needed);
                                    }
                                    if pass.release_pending {
                                        schedule.revisit(&name, now + self.config.release_recheck);
                                    }
                                    self.state.send_modify(|s| s.passes += 1);
                                }
                                Err(MaintainError::NoSuchNode(_)) => {
                                    schedule.done(&name, 0);
                                    schedule.forget(&name);
                                }
                                Err(error) => {
                                    let n = failures.entry(name.clone()).or_insert(0);
                                    *n += 1;
                                    let backoff = self
                                        .config
                                        .failure_backoff
                                        .saturating_mul(2u32.saturating_pow(*n - 1))
                                        .min(self.config.failure_backoff_cap);
                                    tracing::warn!(node = %name, %error, ?backoff, "node maintenance failed");
                                    schedule.done(&name, 0);
                                    schedule.revisit(&name, now + backoff);
                                    self.state.send_modify(|s| {
                                        s.failed_passes += 1;
                                        s.last_error = Some(error.to_string());
                                    });
                                }
                            }
                        }
                    }
                }
                () = tokio::time::sleep_until(wake) => {
                    let now = Instant::now();
                    if now >= next_resync {
                        next_resync = now + self.config.resync_interval;
                        if !resyncing {
                            resyncing = true;
                            self.spawn_resync(&mut jobs);
                        }
                    }
                    if now >= next_gc {
                        next_gc = now + self.config.gc_interval;
                        if !gc_running && cache_ready {
                            gc_running = true;
                            self.spawn_gc(&mut jobs);
                        }
                    }
                }
            }
        }
    }
}
