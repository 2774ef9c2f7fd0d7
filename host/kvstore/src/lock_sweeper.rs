//! The lock sweeper (duty `lock-sweeper`): deletes identity locks whose
//! holder forgot them, as cilium-operator does in kvstore identity mode.
//!
//! An agent's identity lock is an etcd mutex key on the agent's lock lease.
//! If the agent stops, the lease expires and etcd removes the key; but an
//! agent that lives on and leaks the lock (a bug, a hung goroutine) keeps
//! the lease alive, and every other agent allocating that identity waits
//! behind it forever. A lock is held for the length of a kvstore write or
//! two; one seen held by the same key, untouched, on two sweeps a lock lease
//! TTL apart is stale, and deleting it lets the first waiter through.
//!
//! Each sweep lists every key under `cilium/state/identities/v1/locks/`,
//! [`decide::plan_sweep`] picks the holders to delete, and each is deleted
//! only if its mod revision is still the one listed
//! ([`SharedStore::delete_if_unchanged`]), so a holder re-written after the
//! listing is spared.

pub mod decide;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ipam_duty::{Duty, RoundReport};

use crate::layout::IDENTITY_LOCKS_PREFIX;
use crate::{KvError, SharedStore};
use decide::{plan_sweep, Holders};

/// How the lock sweeper runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockSweeperSettings {
    /// Time between sweeps: the lock lease TTL, so a holder deleted has
    /// held its lock for at least one TTL.
    pub interval: Duration,
}

impl Default for LockSweeperSettings {
    /// Cilium's lock lease TTL, 25 s.
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(25),
        }
    }
}

/// The lock sweeper duty, over any [`SharedStore`]. Made anew each time
/// this replica leads: it then needs two sweeps before deleting anything,
/// so a lock taken just before a leader change is not judged on what
/// another replica saw.
pub struct LockSweeper<S: ?Sized> {
    store: Arc<S>,
    settings: LockSweeperSettings,
    /// The holders the previous sweep saw.
    previous: Holders,
}

impl<S: SharedStore + ?Sized> LockSweeper<S> {
    pub fn new(store: Arc<S>, settings: LockSweeperSettings) -> Self {
        Self {
            store,
            settings,
            previous: Holders::new(),
        }
    }

    /// One sweep: the number of stale holders deleted. On a store error the
    /// holders not yet deleted stay remembered, so the next sweep deletes
    /// them if they are still unchanged.
    pub async fn sweep(&mut self) -> Result<u64, KvError> {
        let listing = self.store.list_prefix(IDENTITY_LOCKS_PREFIX).await?;
        let plan = plan_sweep(&self.previous, &listing);
        self.previous = plan.remember;
        let mut deleted = 0;
        for (index, holder) in plan.delete.iter().enumerate() {
            match self
                .store
                .delete_if_unchanged(&holder.key, holder.mod_revision)
                .await
            {
                Ok(true) => {
                    tracing::info!(key = %holder.key, lease = format!("{:x}", holder.lease), "stale identity lock deleted");
                    deleted += 1;
                }
                // Written since the listing: its owner is alive after all.
                Ok(false) => {}
                Err(error) => {
                    for left in &plan.delete[index..] {
                        if let Some(path) = crate::layout::lock_path_of(&left.key) {
                            self.previous.insert(path.to_string(), left.clone());
                        }
                    }
                    return Err(error);
                }
            }
        }
        Ok(deleted)
    }
}

#[async_trait]
impl<S: SharedStore + ?Sized + 'static> Duty for LockSweeper<S> {
    fn name(&self) -> &'static str {
        "lock-sweeper"
    }

    fn interval(&self) -> Duration {
        self.settings.interval
    }

    async fn round(&mut self) -> Result<RoundReport, String> {
        let deletions = self.sweep().await.map_err(|e| e.to_string())?;
        Ok(RoundReport { deletions })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;
    use crate::test_store::Meddling;

    const PATH_1: &str = "cilium/state/identities/v1/locks/id/1.lock";
    const PATH_2: &str = "cilium/state/identities/v1/locks/id/2.lock";

    fn sweeper(store: &Arc<MemoryStore>) -> LockSweeper<MemoryStore> {
        LockSweeper::new(store.clone(), LockSweeperSettings::default())
    }

    #[tokio::test]
    async fn a_stale_holder_goes_on_the_second_sweep_a_waiter_never() {
        let store = Arc::new(MemoryStore::new());
        let holder = store.lock(PATH_1).await.unwrap();
        let waiter = tokio::spawn({
            let store = store.clone();
            async move { store.lock(PATH_1).await.unwrap() }
        });
        tokio::task::yield_now().await;
        let mut sweeper = sweeper(&store);

        assert_eq!(sweeper.sweep().await.unwrap(), 0, "first sight");
        assert_eq!(store.list_prefix(PATH_1).await.unwrap().len(), 2);

        assert_eq!(sweeper.sweep().await.unwrap(), 1);
        assert!(store.get(&holder.key).await.unwrap().is_none());
        let waiter = waiter.await.unwrap();
        assert!(
            store.get(&waiter.key).await.unwrap().is_some(),
            "the waiter is kept, and now holds the lock"
        );

        // The former waiter is judged as a holder from its first sight.
        assert_eq!(sweeper.sweep().await.unwrap(), 0);
        assert_eq!(sweeper.sweep().await.unwrap(), 1);
        assert!(store
            .list_prefix(IDENTITY_LOCKS_PREFIX)
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn a_holder_changed_between_sweeps_is_spared() {
        let store = Arc::new(MemoryStore::new());
        let rewritten = store.lock(PATH_1).await.unwrap();
        let stale = store.lock(PATH_2).await.unwrap();
        let mut sweeper = sweeper(&store);
        sweeper.sweep().await.unwrap();
        store.put(&rewritten.key, Vec::new()).await.unwrap();

        assert_eq!(sweeper.sweep().await.unwrap(), 1);
        assert!(store.get(&rewritten.key).await.unwrap().is_some());
        assert!(store.get(&stale.key).await.unwrap().is_none());
        assert_eq!(sweeper.sweep().await.unwrap(), 1, "unchanged from then on");
        assert!(store.get(&rewritten.key).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_holder_rewritten_after_the_listing_is_spared() {
        let store = Arc::new(Meddling::default());
        let key = format!("{PATH_1}/a");
        store.inner.put_leased(&key, Vec::new()).await.unwrap();
        let mut sweeper = LockSweeper::new(store.clone(), LockSweeperSettings::default());
        assert_eq!(sweeper.sweep().await.unwrap(), 0);
        // The second listing sees the holder unchanged, then it is written
        // before the delete.
        store.rewrite_after_next_listing(&key);
        assert_eq!(sweeper.sweep().await.unwrap(), 0);
        assert!(store.inner.get(&key).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn holders_a_failed_sweep_did_not_delete_are_deleted_by_the_next() {
        let store = Arc::new(Meddling::default());
        let first = store.lock(PATH_1).await.unwrap();
        let second = store.lock(PATH_2).await.unwrap();
        let mut sweeper = LockSweeper::new(store.clone(), LockSweeperSettings::default());
        sweeper.sweep().await.unwrap();
        store.fail_next("delete", &first.key);
        assert!(sweeper.sweep().await.is_err());
        assert!(store.inner.get(&second.key).await.unwrap().is_some());
        assert_eq!(
            sweeper.sweep().await.unwrap(),
            2,
            "still stale, still remembered: no need for two more sweeps"
        );
    }

    #[tokio::test]
    async fn the_duty_reports_its_deletions() {
        let store = Arc::new(MemoryStore::new());
        store.lock(PATH_1).await.unwrap();
        let mut duty = sweeper(&store);
        assert_eq!(duty.name(), "lock-sweeper");
        assert_eq!(duty.interval(), Duration::from_secs(25));
        assert_eq!(duty.round().await, Ok(RoundReport { deletions: 0 }));
        assert_eq!(duty.round().await, Ok(RoundReport { deletions: 1 }));
    }
}
