//! The engine loop: a full resync at start and periodically, node events
//! from the [`NodeStore`], and the [`Schedule`] deciding which node a free
//! worker takes next (largest deficit first). At most
//! `max_concurrent_nodes` nodes are worked on at once, and each works
//! sequentially, so that is also the bound on concurrent cloud calls from
//! maintenance; the cloud's per-operation buckets sit below in
//! [`crate::limited_cloud::LimitedCloud`]. Leaked-interface GC runs on its own
//! interval. Nothing here holds a lock across an await. Node passes and full
//! resyncs are timed as Cilium's `deficit_resolver` and `resync` triggers:
//! the requests for a pass (a node listed, changed, still short, due again)
//! or a resync (its interval, a retry) fold into the next run, which
//! records how many it answers and how long the first waited.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use ipam_ciliumnode::CiliumNode;
use ipam_cloud::CloudError;
use ipam_pool::backoff::failure_backoff;
use ipam_pool::pool::count;
use ipam_pool::schedule::{Requests, Schedule};
use ipam_pool::{watermarks, NodeView};

use crate::allocate::Step;
use crate::clock::unix_now;
use crate::error::MaintainError;
use crate::gc::{GcRound, LeakCollector};
use crate::maintain::{Maintainer, NodePass};
use crate::node_store::{NodeEvent, StoreError};

#[derive(Debug, Clone)]
pub struct LoopSettings {
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

impl Default for LoopSettings {
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
    #[error("the engine's task panicked: {0}")]
    Panicked(String),
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
}

/// What a task of the loop is doing; kept by task id so that a task that
/// panics still releases its node (or its resync, or its GC round).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Work {
    Node(String),
    Resync,
    Gc,
}

enum Outcome {
    Node(Box<Result<NodePass, MaintainError>>),
    Resync(Result<(), CloudError>),
    Gc(Result<GcRound, CloudError>),
}

pub struct Engine {
    maintainer: Arc<Maintainer>,
    config: LoopSettings,
    gc: Arc<LeakCollector>,
    state: watch::Sender<EngineState>,
}

/// A node's deficit as its own fields show it: the scheduling priority
/// (`plan` takes the nodes in the same order).
pub(crate) fn deficit(node: &CiliumNode) -> u32 {
    let available = count(node.spec.ipam.pool.len());
    let used = count(node.status.ipam.used.len());
    watermarks::needed(node.watermarks(), available, used)
}

/// An engine running on its own task until [`RunningEngine::stop`].
pub struct RunningEngine {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), EngineError>>,
}

impl RunningEngine {
    /// Stop it (work in flight is dropped) and wait for it.
    pub async fn stop(self) -> Result<(), EngineError> {
        let _ = self.stop.send(true);
        self.join().await
    }

    /// Wait for it to end by itself (the node store closed or failed).
    pub async fn join(self) -> Result<(), EngineError> {
        match self.task.await {
            Ok(result) => result,
            Err(error) => Err(EngineError::Panicked(error.to_string())),
        }
    }

    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

/// The loop's own state; one method per kind of thing that wakes it.
struct Loop<'a> {
    engine: &'a Engine,
    schedule: Schedule,
    tasks: JoinSet<Outcome>,
    work: HashMap<tokio::task::Id, Work>,
    failures: HashMap<String, u32>,
    /// Nodes that must have a pass before the engine is ready.
    initial: Option<HashSet<String>>,
    /// Nodes listed and waiting for the cache to be ready.
    listed: Vec<CiliumNode>,
    cache_ready: bool,
    next_resync: Instant,
    next_gc: Instant,
    /// Resyncs asked for and not yet started.
    resync_requests: Option<Requests>,
    /// The schedule's requests already counted in the metrics.
    requests_counted: u64,
}

impl Engine {
    pub fn new(maintainer: Arc<Maintainer>, config: LoopSettings) -> Self {
        let gc = LeakCollector::new(maintainer.settings().ownership(), config.gc_grace.as_secs());
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

    /// Run on a task of its own until stopped.
    pub fn spawn(self: Arc<Self>) -> RunningEngine {
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            self.run(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
        });
        RunningEngine { stop, task }
    }

    /// Run until `shutdown` completes; work in flight is dropped then (a
    /// leader that lost its lease must stop writing at once).
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<(), EngineError> {
        tokio::pin!(shutdown);
        let store = self.maintainer.parts().store.clone();
        let mut events = store.subscribe();
        let now = Instant::now();
        let mut state = Loop {
            engine: self,
            schedule: Schedule::new(),
            tasks: JoinSet::new(),
            work: HashMap::new(),
            failures: HashMap::new(),
            initial: None,
            listed: Vec::new(),
            cache_ready: false,
            next_resync: now + self.config.resync_interval,
            next_gc: now + self.config.gc_interval,
            resync_requests: None,
            requests_counted: 0,
        };
        // The nodes are listed once the first resync is in (Loop::resynced).
        state.request_resync(now);
        state.start(Work::Resync);
        loop {
            state.dispatch();
            let wake = [
                Some(state.next_resync),
                Some(state.next_gc),
                state.schedule.next_timer().map(Instant::from_std),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(state.next_resync);
            tokio::select! {
                biased;
                () = &mut shutdown => {
                    state.tasks.abort_all();
                    tracing::info!("engine stopped");
                    return Ok(());
                }
                event = events.recv() => match event {
                    Ok(event) => state.node_event(event),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "node events lagged; listing every node again");
                        state.listed = store.list().await?;
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        tracing::warn!("node store closed its event stream; stopping");
                        state.tasks.abort_all();
                        return Ok(());
                    }
                },
                Some(joined) = state.tasks.join_next_with_id() => {
                    let (id, outcome) = match joined {
                        Ok((id, outcome)) => (id, Ok(outcome)),
                        Err(error) => (error.id(), Err(error)),
                    };
                    let Some(work) = state.work.remove(&id) else { continue };
                    match outcome {
                        Ok(Outcome::Resync(result)) => {
                            if state.resynced(result) {
                                state.listed = store.list().await?;
                            }
                        }
                        Ok(Outcome::Gc(result)) => state.collected(result),
                        Ok(Outcome::Node(result)) => {
                            if let Work::Node(name) = work {
                                state.node_done(&name, *result);
                            }
                        }
                        // A panic must not stop the others, nor leave its
                        // node counted as running for ever.
                        Err(error) => {
                            tracing::error!(%error, ?work, "an engine task failed");
                            if let Work::Node(name) = work {
                                state.node_failed(&name, &error.to_string());
                            }
                        }
                    }
                }
                () = tokio::time::sleep_until(wake) => state.timers(),
            }
        }
    }
}

impl Loop<'_> {
    fn in_flight(&self, work: &Work) -> bool {
        self.work.values().any(|w| w == work)
    }

    /// A resync is due: a request the next one answers.
    fn request_resync(&mut self, now: Instant) {
        self.engine.maintainer.parts().metrics.resync.queued.inc();
        let now = now.into_std();
        let requests = self.resync_requests.get_or_insert(Requests {
            count: 0,
            first: now,
        });
        requests.count += 1;
        requests.first = requests.first.min(now);
    }

    /// How many requests a run starting now answers, and how long the first
    /// waited.
    fn folded(requests: Option<Requests>) -> (u32, Duration) {
        let now = Instant::now().into_std();
        requests.map_or((0, Duration::ZERO), |r| {
            (r.count, now.saturating_duration_since(r.first))
        })
    }

    fn start(&mut self, work: Work) {
        let maintainer = self.engine.maintainer.clone();
        let handle = match &work {
            Work::Resync => {
                let (folds, latency) = Self::folded(self.resync_requests.take());
                self.tasks.spawn(async move {
                    let started = Instant::now();
                    let result = maintainer
                        .cache()
                        .resync_all(maintainer.parts().cloud.as_ref())
                        .await;
                    let metrics = &maintainer.parts().metrics;
                    metrics.resync.ran(started.elapsed(), latency, folds);
                    Outcome::Resync(result)
                })
            }
            Work::Gc => {
                let gc = self.engine.gc.clone();
                self.tasks.spawn(async move {
                    let attached = maintainer.cache().attached_interfaces();
                    Outcome::Gc(
                        gc.round(maintainer.parts().cloud.as_ref(), unix_now(), &attached)
                            .await,
                    )
                })
            }
            Work::Node(name) => {
                let name = name.clone();
                let (folds, latency) = Self::folded(self.schedule.take_requests(&name));
                self.tasks.spawn(async move {
                    let started = Instant::now();
                    let pending = maintainer.parts().store.pending_pods(&name);
                    let result = maintainer.maintain(&name, pending).await;
                    let metrics = &maintainer.parts().metrics;
                    metrics
                        .deficit_resolver
                        .ran(started.elapsed(), latency, folds);
                    Outcome::Node(Box::new(result))
                })
            }
        };
        self.work.insert(handle.id(), work);
    }

    /// Queue what was listed, start what is due, publish the state.
    fn dispatch(&mut self) {
        if self.cache_ready {
            if self.initial.is_none() {
                self.initial = Some(self.listed.iter().map(|n| n.name.clone()).collect());
            }
            let now = Instant::now().into_std();
            for node in std::mem::take(&mut self.listed) {
                self.schedule.request(&node.name, deficit(&node), now);
            }
            self.schedule.due(now);
            while self.schedule.running() < self.engine.config.max_concurrent_nodes {
                let Some(name) = self.schedule.start_next() else {
                    break;
                };
                self.start(Work::Node(name));
            }
        }
        let made = self.schedule.requests_made();
        self.engine
            .maintainer
            .parts()
            .metrics
            .deficit_resolver
            .queued
            .inc_by(made - self.requests_counted);
        self.requests_counted = made;
        let ready_now = self.cache_ready && self.initial.as_ref().is_some_and(HashSet::is_empty);
        self.engine.state.send_modify(|s| {
            s.queued = self.schedule.queued();
            s.running = self.schedule.running();
            if !s.ready && ready_now {
                s.ready = true;
                tracing::info!("engine ready: first resync done and every node had a pass");
            }
        });
    }

    fn node_event(&mut self, event: NodeEvent) {
        match event {
            NodeEvent::Upserted(node) => {
                if self.cache_ready {
                    let now = Instant::now().into_std();
                    self.schedule.request(&node.name, deficit(&node), now);
                }
            }
            NodeEvent::Deleted(name) => {
                self.schedule.forget(&name);
                self.failures.remove(&name);
                self.engine.maintainer.forget(&name);
                if let Some(initial) = self.initial.as_mut() {
                    initial.remove(&name);
                }
            }
        }
    }

    /// A resync ended; whether every node should be listed and looked at.
    fn resynced(&mut self, result: Result<(), CloudError>) -> bool {
        match result {
            Ok(()) => {
                let maintainer = &self.engine.maintainer;
                maintainer.parts().metrics.resync_total.inc();
                maintainer.record_subnets();
                self.engine.state.send_modify(|s| s.resyncs += 1);
                self.cache_ready = true;
                true
            }
            Err(error) => {
                tracing::warn!(%error, "resync failed; retrying");
                let config = &self.engine.config;
                self.next_resync =
                    Instant::now() + config.failure_backoff_cap.min(config.resync_interval);
                false
            }
        }
    }

    fn collected(&self, result: Result<GcRound, CloudError>) {
        match result {
            Ok(round) => {
                let deleted = round.deleted.len() as u64;
                self.engine
                    .maintainer
                    .parts()
                    .metrics
                    .interface_deletion_ops
                    .inc_by(deleted);
            }
            Err(error) => tracing::warn!(%error, "leaked-interface GC failed"),
        }
    }

    fn node_done(&mut self, name: &str, result: Result<NodePass, MaintainError>) {
        if let Some(initial) = self.initial.as_mut() {
            initial.remove(name);
        }
        let now = Instant::now().into_std();
        match result {
            Ok(pass) => {
                self.failures.remove(name);
                self.schedule.done(name, pass.needed);
                if matches!(pass.steps.last(), Some(Step::Blocked(_))) {
                    self.schedule
                        .revisit(name, now + self.engine.config.blocked_retry);
                } else if pass.needed > 0 {
                    // Steps ran out before the node was satisfied.
                    self.schedule.request(name, pass.needed, now);
                }
                if pass.release_pending {
                    self.schedule
                        .revisit(name, now + self.engine.config.release_recheck);
                }
                self.engine.state.send_modify(|s| s.passes += 1);
            }
            Err(MaintainError::NoSuchNode(_)) => {
                self.schedule.done(name, 0);
                self.schedule.forget(name);
            }
            Err(error) => self.node_failed(name, &error.to_string()),
        }
    }

    /// A pass failed (or panicked): back off, doubling per failure.
    fn node_failed(&mut self, name: &str, error: &str) {
        if let Some(initial) = self.initial.as_mut() {
            initial.remove(name);
        }
        let failures = self.failures.entry(name.to_string()).or_insert(0);
        *failures += 1;
        let config = &self.engine.config;
        let backoff = failure_backoff(
            config.failure_backoff,
            config.failure_backoff_cap,
            *failures,
        );
        tracing::warn!(node = %name, %error, ?backoff, "node maintenance failed");
        self.schedule.done(name, 0);
        // Held, not merely revisited: the node's own publish and every watch
        // event would otherwise queue it again at once.
        self.schedule
            .back_off(name, Instant::now().into_std() + backoff);
        self.engine.state.send_modify(|s| s.failed_passes += 1);
    }

    /// Periodic resync and GC, unless one is still running.
    fn timers(&mut self) {
        let now = Instant::now();
        if now >= self.next_resync {
            self.next_resync = now + self.engine.config.resync_interval;
            // One still running answers none of it: the next one does.
            self.request_resync(now);
            if !self.in_flight(&Work::Resync) {
                self.start(Work::Resync);
            }
        }
        if now >= self.next_gc {
            self.next_gc = now + self.engine.config.gc_interval;
            if self.cache_ready && !self.in_flight(&Work::Gc) {
                self.start(Work::Gc);
            }
        }
    }
}
