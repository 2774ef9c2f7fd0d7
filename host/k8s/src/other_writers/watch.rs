//! The loop that watches for other writers: each node's managedFields as
//! the store reads them (at once on every change of a node, and all of
//! them on every poll, when the window may have passed), each manager seen
//! kept for its window ([`Seen`]), and Cilium's operator on every poll. It publishes the pause, sets the metric, logs
//! a pause's start and end at warn and, on the leader, announces each node
//! an Event once per manager and episode.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ipam_engine::metrics::ManagerLabel;
use ipam_engine::{Announcement, Metrics, NodeEvent, NodeStore};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tokio::sync::{broadcast, watch};

use super::cilium_operator::{judge, CiliumOperator, Quiet};
use super::cilium_probe::CiliumProbe;
use super::managed_fields::{RecentWriter, WriterRules};
use super::pause::{Episodes, OtherWriter, Pause};
use super::seen::Seen;
use crate::store::KubeNodeStore;

/// The Event reason on a node another manager writes.
pub const REASON: &str = "OtherWriter";

/// How long the first read of Cilium's operator may hold the engine.
pub const FIRST_READ_LIMIT: Duration = Duration::from_secs(10);

/// How other writers are looked for.
#[derive(Debug, Clone)]
pub struct OtherWriterSettings {
    pub rules: WriterRules,
    /// Between reads of Cilium's operator and sweeps of every node.
    pub poll_interval: Duration,
    /// Where Cilium's operator, its Lease and cilium-config are.
    pub cilium_namespace: String,
}

pub struct OtherWriterWatch {
    store: Arc<KubeNodeStore>,
    probe: CiliumProbe,
    settings: OtherWriterSettings,
    metrics: Arc<Metrics>,
    /// The other managers seen, each for its window.
    memory: Seen,
    /// Node -> the other managers seen on it now.
    seen: BTreeMap<String, Vec<RecentWriter>>,
    /// Cilium's operator while it allocates: its Lease, holder and mode.
    cilium: Option<(String, String, String)>,
    /// How Cilium's operator was last judged quiet, so a change is logged
    /// once.
    quiet: Option<Quiet>,
    episodes: Episodes,
    /// The managers the metric holds at 1.
    on_metric: BTreeSet<String>,
    checked: watch::Sender<bool>,
}

impl OtherWriterWatch {
    pub fn new(
        client: Client,
        store: Arc<KubeNodeStore>,
        settings: OtherWriterSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            probe: CiliumProbe::new(client, &settings.cilium_namespace),
            store,
            settings,
            metrics,
            memory: Seen::default(),
            seen: BTreeMap::new(),
            cilium: None,
            quiet: None,
            episodes: Episodes::default(),
            on_metric: BTreeSet::new(),
            checked: watch::Sender::new(false),
        }
    }

    /// True once the first look is over (the node cache synced, Cilium's
    /// operator read): the engine may not write before.
    pub fn checked(&self) -> watch::Receiver<bool> {
        self.checked.subscribe()
    }

    /// Watch until `shutdown`; `pause` follows the writers seen, and
    /// `leader` says whether this replica announces them.
    pub async fn run(
        mut self,
        mut leader: watch::Receiver<bool>,
        pause: watch::Sender<Option<Pause>>,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut events = self.store.subscribe();
        // The first look: every node the cache lists, and Cilium's operator
        // (given up after FIRST_READ_LIMIT, with a warning: the polls go
        // on).
        let mut synced = self.store.synced();
        tokio::select! {
            () = &mut shutdown => return,
            _ = synced.wait_for(|s| *s) => {}
        }
        if tokio::time::timeout(FIRST_READ_LIMIT, self.poll_cilium())
            .await
            .is_err()
        {
            tracing::warn!(
                namespace = %self.settings.cilium_namespace,
                "Cilium's operator's objects not read within {} s; looking again every {} s",
                FIRST_READ_LIMIT.as_secs(),
                self.settings.poll_interval.as_secs()
            );
        }
        self.sweep();
        self.publish(&pause);
        self.checked.send_replace(true);
        let period = self.settings.poll_interval.max(Duration::from_millis(100));
        let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                _ = poll.tick() => {
                    self.poll_cilium().await;
                    self.sweep();
                }
                event = events.recv() => match event {
                    Ok(NodeEvent::Upserted(node)) => self.look_at(&node.name),
                    Ok(NodeEvent::Deleted(name)) => {
                        self.memory.forget(&name);
                        self.seen.remove(&name);
                        self.episodes.forget(&name);
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => self.sweep(),
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                changed = leader.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            // The engine hears of the pause before the Events go out: each
            // Event is an API call, and the engine must not write meanwhile.
            self.publish(&pause);
            let leading = *leader.borrow();
            self.announce(leading).await;
        }
    }

    fn look_at(&mut self, node: &str) {
        let now = Timestamp::now();
        let rules = &self.settings.rules;
        let writers = rules.recent(&self.store.contested_entries(node), now);
        self.memory.note(node, writers);
        self.seen = self.memory.current(rules.window, now);
    }

    /// Every node again: a window may have passed without a change.
    fn sweep(&mut self) {
        let now = Timestamp::now();
        let rules = &self.settings.rules;
        for (node, entries) in self.store.all_contested_entries() {
            self.memory.note(&node, rules.recent(&entries, now));
        }
        self.seen = self.memory.current(rules.window, now);
    }

    async fn poll_cilium(&mut self) {
        let now = Timestamp::now();
        let view = match self.probe.read(now).await {
            Ok(view) => view,
            Err(error) => {
                // The last judgement stands until a read succeeds.
                tracing::warn!(%error, "could not read Cilium's operator's objects");
                return;
            }
        };
        match judge(&view, now) {
            CiliumOperator::Allocating { holder, mode } => {
                self.quiet = None;
                self.cilium = Some((self.probe.lease(), holder, mode));
            }
            CiliumOperator::Quiet(why) => {
                if self.quiet.as_ref() != Some(&why) {
                    tracing::debug!(namespace = %self.settings.cilium_namespace, %why, "Cilium's operator does not allocate");
                }
                self.quiet = Some(why);
                self.cilium = None;
            }
        }
    }

    /// Each node's Event, once per manager and episode, from the leader.
    async fn announce(&mut self, leading: bool) {
        let ended: Vec<String> = self
            .episodes
            .nodes()
            .into_iter()
            .filter(|node| !self.seen.contains_key(node))
            .collect();
        for node in ended {
            self.episodes.forget(&node);
        }
        let mut due: Vec<(String, RecentWriter)> = Vec::new();
        for (node, writers) in &self.seen {
            for writer in self.episodes.observe(node, writers, leading) {
                due.push((node.clone(), writer.clone()));
            }
        }
        let window = self.settings.rules.window.as_secs();
        for (node, writer) in due {
            let fields: Vec<&str> = writer.fields.iter().map(|f| f.path()).collect();
            let note = format!(
                "{} changed {} at {}: this operator writes none of this node's IPAM fields \
                 and calls no cloud API until {window} s after that manager's last change",
                writer.manager,
                fields.join(" and "),
                writer.time
            );
            let announcement = Announcement {
                warning: true,
                reason: REASON,
                note,
            };
            self.store.announce(&node, announcement).await;
        }
    }

    /// Cilium's operator as a writer, if it allocates for any node.
    fn cilium_writer(&self) -> Option<OtherWriter> {
        let (lease, holder, mode) = self.cilium.clone()?;
        let (nodes, node) = self.store.nodes_cilium_allocates_for();
        Some(OtherWriter::CiliumOperator {
            lease,
            holder,
            mode,
            nodes,
            node: node?,
        })
    }

    /// The pause, the metric and the log, from the writers seen now.
    fn publish(&mut self, pause: &watch::Sender<Option<Pause>>) {
        let writers: Vec<OtherWriter> = self
            .cilium_writer()
            .into_iter()
            .chain(self.seen.iter().flat_map(|(node, writers)| {
                writers.iter().map(|w| OtherWriter::Manager {
                    manager: w.manager.clone(),
                    node: node.clone(),
                    fields: w.fields.clone(),
                    time: w.time,
                })
            }))
            .collect();
        let now = Pause::of(writers, self.settings.rules.window);
        let managers = now.as_ref().map(Pause::managers).unwrap_or_default();
        for gone in self.on_metric.difference(&managers) {
            self.metrics.other_writer.get_or_create(&label(gone)).set(0);
        }
        for seen in &managers {
            self.metrics.other_writer.get_or_create(&label(seen)).set(1);
        }
        self.on_metric = managers;
        pause.send_if_modified(|before| {
            if *before == now {
                return false;
            }
            match (&*before, &now) {
                (None, Some(started)) => {
                    tracing::warn!(reason = %started.reason(), "another writer: the engine stops writing");
                }
                (Some(_), None) => {
                    tracing::warn!("no other writer any more: the engine writes again");
                }
                _ => {}
            }
            *before = now;
            true
        });
    }
}

fn label(manager: &str) -> ManagerLabel {
    ManagerLabel {
        manager: manager.to_string(),
    }
}

/// True while this replica may write: it leads, the first look for
/// another writer is over ([`OtherWriterWatch::checked`]) and no other
/// writer is seen. Ends (its sender dropped) when an input's sender is.
pub fn writing(
    mut leader: watch::Receiver<bool>,
    mut pause: watch::Receiver<Option<Pause>>,
    mut checked: watch::Receiver<bool>,
) -> watch::Receiver<bool> {
    let may = |leader: &watch::Receiver<bool>,
               pause: &watch::Receiver<Option<Pause>>,
               checked: &watch::Receiver<bool>| {
        *leader.borrow() && *checked.borrow() && pause.borrow().is_none()
    };
    let (sender, receiver) = watch::channel(may(&leader, &pause, &checked));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                changed = leader.changed() => if changed.is_err() { return },
                changed = pause.changed() => if changed.is_err() { return },
                changed = checked.changed() => if changed.is_err() { return },
            }
            let now = may(&leader, &pause, &checked);
            sender.send_if_modified(|before| std::mem::replace(before, now) != now);
        }
    });
    receiver
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writing_needs_the_lease_the_first_look_and_no_other_writer() {
        let (leader_tx, leader) = watch::channel(false);
        let (pause_tx, pause) = watch::channel(None);
        let (checked_tx, checked) = watch::channel(false);
        let mut writing = writing(leader, pause, checked);
        assert!(!*writing.borrow());
        leader_tx.send_replace(true);
        tokio::task::yield_now().await;
        assert!(!*writing.borrow(), "not before the first look");
        checked_tx.send_replace(true);
        writing.wait_for(|w| *w).await.expect("writing");
        let other = OtherWriter::CiliumOperator {
            lease: "kube-system/cilium-operator-resource-lock".into(),
            holder: "h".into(),
            mode: "eni".into(),
            nodes: 1,
            node: "n1".into(),
        };
        pause_tx.send_replace(Pause::of(vec![other], Duration::from_secs(120)));
        writing.wait_for(|w| !*w).await.expect("paused");
        pause_tx.send_replace(None);
        writing.wait_for(|w| *w).await.expect("resumed");
        leader_tx.send_replace(false);
        writing.wait_for(|w| !*w).await.expect("not leading");
        drop(leader_tx);
        assert!(
            writing.changed().await.is_err(),
            "ends with the leader's sender"
        );
    }
}
