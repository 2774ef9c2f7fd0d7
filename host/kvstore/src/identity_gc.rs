//! The identity GC (duty `identity-gc`): deletes the security identities no
//! node uses any more, as cilium-operator does in kvstore identity mode.
//!
//! An agent allocating an identity writes the master key
//! `cilium/state/identities/v1/id/<id>` (value: the labels key, no lease),
//! then its own value key `.../value/<labels key>/<node ip>` on its lease.
//! When the last endpoint with those labels goes, or the node does, the
//! value keys go (deleted, or expired with the lease) but the master key
//! stays: nobody else removes it, and a cluster's 65,280 identities would
//! run out.
//!
//! Each round lists the master keys and judges those in this cluster's id
//! range ([`decide::IdRange`]); others (another cluster's ids, keys that do
//! not parse) are skipped and counted, never deleted. The value keys' names
//! are listed once, page by page, into the set of labels keys in use;
//! [`decide::decide`] then keeps each identity (used), marks it (unused,
//! first seen so) or, when unused and marked by the previous round at the
//! same mod revision, judges it again under the allocator's lock of that
//! key (its value keys listed again, so no agent is half way through
//! taking it: [`SharedStore::lock_and_list_keys`]) and deletes it with
//! [`SharedStore::delete_if_locked_then_unlock`], so a key written since
//! the listing, or a lock lost, deletes nothing. Cilium takes the lock and
//! lists the value keys for every identity every round; here only
//! deletions cost requests, two each on etcd (the listing rides on the
//! transaction that takes the lock, the unlock on the one that deletes),
//! instead of five. Two rounds apart (15 minutes by
//! default) is far longer than an agent takes from the master key to its
//! value key.
//!
//! Deletions are paced by a token bucket (2,500 a minute by default): each
//! deleted identity is a watch event on every agent, and a burst of tens of
//! thousands would reach them all at once.

pub mod decide;

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ipam_duty::{Duty, RoundReport};

use crate::layout::{
    identity_lock_path, is_value_key_of, value_prefix, IDENTITY_ID_PREFIX, IDENTITY_VALUE_PREFIX,
};
use crate::limiter::RateLimiter;
use crate::mesh::ClusterMesh;
use crate::{KvError, SharedStore};
use decide::{classify, decide, Classified, IdRange, MasterKey, Verdict};

/// How the identity GC runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityGcSettings {
    /// This cluster's id and the mesh's size: the GC judges only the
    /// identities of the cluster's range.
    pub mesh: ClusterMesh,
    /// Time between rounds (Cilium's `identity-gc-interval`); an unused
    /// identity goes on the second round that finds it unused.
    pub interval: Duration,
    /// Most deletions a minute, the first ones in a burst of as many
    /// (Cilium's `identity-gc-rate-limit` over `identity-gc-rate-interval`).
    pub deletions_per_minute: NonZeroU32,
}

impl Default for IdentityGcSettings {
    /// Cilium's defaults: cluster 0, every 15 minutes, 2,500 deletions a
    /// minute.
    fn default() -> Self {
        Self {
            mesh: ClusterMesh::default(),
            interval: Duration::from_secs(15 * 60),
            deletions_per_minute: DEFAULT_DELETIONS_PER_MINUTE,
        }
    }
}

/// What one round found and did. `scanned` is `in_range + out_of_range +
/// skipped_malformed`; the keys in range end up `kept_used`, `marked`,
/// `deleted` or `raced`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdentityGcReport {
    /// Master keys listed.
    pub scanned: u64,
    /// Of this cluster's range, judged.
    pub in_range: u64,
    /// Another cluster's, or reserved: skipped.
    pub out_of_range: u64,
    /// Ids or labels that do not parse: skipped (and logged).
    pub skipped_malformed: u64,
    /// Used by a node: kept.
    pub kept_used: u64,
    /// Unused, first seen so: kept until the next round.
    pub marked: u64,
    /// Unused on two rounds: deleted.
    pub deleted: u64,
    /// To delete, but written (re-used) or our lock lost between the
    /// listing and the delete: kept, judged afresh next round.
    pub raced: u64,
}

const DEFAULT_DELETIONS_PER_MINUTE: NonZeroU32 = NonZeroU32::new(2500).unwrap();

/// How many malformed keys a round's summary names.
const MALFORMED_EXAMPLES: usize = 3;

/// The identity GC duty, over any [`SharedStore`]. Made anew each time
/// this replica leads, so the first round of a new leader marks only: it
/// deletes nothing on what another replica saw.
pub struct IdentityGc<S: ?Sized> {
    store: Arc<S>,
    settings: IdentityGcSettings,
    range: IdRange,
    /// Master keys the previous round found unused: their mod revision then.
    remembered: HashMap<String, i64>,
    pace: RateLimiter,
}

/// What became of one master key judged under its lock.
enum Outcome {
    KeptUsed,
    Marked(i64),
    Deleted,
    Raced,
}

impl<S: SharedStore + ?Sized> IdentityGc<S> {
    pub fn new(store: Arc<S>, settings: IdentityGcSettings) -> Self {
        let per_minute = settings.deletions_per_minute.get();
        let pace = RateLimiter::new(f64::from(per_minute) / 60.0, per_minute);
        Self {
            range: IdRange::of_cluster(settings.mesh),
            store,
            settings,
            remembered: HashMap::new(),
            pace,
        }
    }

    /// One round. On a store error the round stops there; the marks of the
    /// keys it did not reach are kept, so their deletion is not put off by
    /// a round.
    pub async fn collect(&mut self) -> Result<IdentityGcReport, KvError> {
        let listing = self.store.list_prefix(IDENTITY_ID_PREFIX).await?;
        let previous = std::mem::take(&mut self.remembered);
        let mut report = IdentityGcReport {
            scanned: listing.len() as u64,
            ..IdentityGcReport::default()
        };
        let mut ours: Vec<MasterKey<'_>> = Vec::new();
        let mut malformed: Vec<String> = Vec::new();
        for kv in &listing {
            match classify(kv, self.range) {
                Classified::InRange(master) => ours.push(master),
                Classified::OutOfRange { .. } => report.out_of_range += 1,
                Classified::Malformed(problem) => {
                    report.skipped_malformed += 1;
                    if malformed.len() < MALFORMED_EXAMPLES {
                        malformed.push(format!("{}: {problem}", kv.key));
                    }
                }
            }
        }
        report.in_range = ours.len() as u64;
        if report.skipped_malformed > 0 {
            tracing::warn!(
                count = report.skipped_malformed,
                examples = %malformed.join("; "),
                "identity GC: master keys skipped, they are not what Cilium writes"
            );
        }
        let in_use = self.labels_in_use().await?;
        for (index, master) in ours.iter().enumerate() {
            let remembered = previous.get(master.key).copied();
            // Used, or unused for the first time: known from the listings
            // alone, and nothing is written, so no lock and no request.
            // Only a deletion is judged again under the lock.
            let verdict = decide(
                remembered,
                master.mod_revision,
                in_use.contains(master.labels),
            );
            let judged = match verdict {
                Verdict::KeepUsed => Ok(Outcome::KeptUsed),
                Verdict::Mark { mod_revision } => Ok(Outcome::Marked(mod_revision)),
                Verdict::Delete => self.judge(master, remembered).await,
            };
            match judged {
                Ok(Outcome::KeptUsed) => report.kept_used += 1,
                Ok(Outcome::Marked(mod_revision)) => {
                    self.remembered.insert(master.key.to_string(), mod_revision);
                    report.marked += 1;
                }
                Ok(Outcome::Deleted) => {
                    tracing::debug!(
                        key = master.key,
                        labels = master.labels,
                        "identity GC: unused identity deleted"
                    );
                    report.deleted += 1;
                }
                Ok(Outcome::Raced) => report.raced += 1,
                Err(error) => {
                    for left in &ours[index..] {
                        if let Some(&mod_revision) = previous.get(left.key) {
                            self.remembered.insert(left.key.to_string(), mod_revision);
                        }
                    }
                    return Err(error);
                }
            }
        }
        Ok(report)
    }

    /// Judge a deletion candidate again under its lock, and unlock. Two
    /// requests on etcd when no one holds the lock: its value keys are
    /// listed in the transaction that takes it, and the delete gives it
    /// back in the same transaction.
    async fn judge(
        &mut self,
        master: &MasterKey<'_>,
        remembered: Option<i64>,
    ) -> Result<Outcome, KvError> {
        // The deletion's token is waited for before the lock, not under it:
        // agents taking this identity would otherwise wait on our lock for
        // as long as we wait on the bucket. A key found used after all
        // wastes its token, which only slows the GC.
        self.paced().await;
        let prefix = value_prefix(master.labels);
        let (lock, listed) = self
            .store
            .lock_and_list_keys(&identity_lock_path(master.id_text), &prefix)
            .await?;
        let used = listed.iter().any(|key| is_value_key_of(&prefix, key));
        let outcome = match decide(remembered, master.mod_revision, used) {
            Verdict::Delete => {
                let deleted = self
                    .store
                    .delete_if_locked_then_unlock(master.key, master.mod_revision, lock)
                    .await?;
                return Ok(if deleted {
                    Outcome::Deleted
                } else {
                    Outcome::Raced
                });
            }
            Verdict::KeepUsed => Outcome::KeptUsed,
            Verdict::Mark { mod_revision } => Outcome::Marked(mod_revision),
        };
        self.store.unlock(lock).await?;
        Ok(outcome)
    }

    /// The labels keys some node uses: every value key's labels part (all
    /// but its last `/segment`, the node), from one listing of the value
    /// keys' names, page by page. One listing a round instead of one per
    /// identity: 65,280 identities at the operator's 20 requests a second
    /// would otherwise take most of an hour.
    async fn labels_in_use(&self) -> Result<HashSet<String>, KvError> {
        let mut in_use = HashSet::new();
        self.store
            .visit_keys(IDENTITY_VALUE_PREFIX, &mut |key| {
                let labels = key
                    .strip_prefix(IDENTITY_VALUE_PREFIX)
                    .and_then(|rest| rest.rsplit_once('/'))
                    .map(|(labels, _node)| labels);
                if let Some(labels) = labels {
                    if !in_use.contains(labels) {
                        in_use.insert(labels.to_string());
                    }
                }
            })
            .await?;
        Ok(in_use)
    }

    /// Wait for a deletion's token, on tokio's clock.
    async fn paced(&mut self) {
        self.pace.acquire().await;
    }
}

#[async_trait]
impl<S: SharedStore + ?Sized + 'static> Duty for IdentityGc<S> {
    fn name(&self) -> &'static str {
        "identity-gc"
    }

    fn interval(&self) -> Duration {
        self.settings.interval
    }

    async fn round(&mut self) -> Result<RoundReport, String> {
        let report = self.collect().await.map_err(|e| e.to_string())?;
        tracing::info!(
            scanned = report.scanned,
            in_range = report.in_range,
            out_of_range = report.out_of_range,
            skipped_malformed = report.skipped_malformed,
            kept_used = report.kept_used,
            marked = report.marked,
            deleted = report.deleted,
            raced = report.raced,
            "identity GC round"
        );
        Ok(RoundReport {
            deletions: report.deleted,
        })
    }
}

#[cfg(test)]
mod tests;
