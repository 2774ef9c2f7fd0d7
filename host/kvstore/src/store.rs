//! The operations the duties need from a kvstore, as a trait: the etcd
//! client implements it, and [`crate::memory::MemoryStore`] implements it
//! in memory for tests of what a duty writes.

use async_trait::async_trait;

use crate::KvError;

/// One key as etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Vec<u8>,
    /// The revision that created the key (the lock order of a mutex).
    pub create_revision: i64,
    /// The revision of the key's last write.
    pub mod_revision: i64,
    /// The lease the key is attached to (0: none).
    pub lease: i64,
}

/// A kvstore lock this operator holds: an etcd concurrency mutex, the key
/// `<path>/<lease id in lower-case hex>` on the lock lease. It is held while
/// that key is the one under `<path>/` with the smallest create revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    /// The lock path (`cilium/state/identities/v1/locks/id/42.lock`).
    pub path: String,
    /// Our key under it.
    pub key: String,
    /// The lease our key is on.
    pub lease: i64,
}

/// What the operator's duties read and write.
#[async_trait]
pub trait SharedStore: Send + Sync {
    /// Write `value` at `key` attached to the operator's session lease, so
    /// the key goes when the operator is gone for longer than the lease.
    async fn put_leased(&self, key: &str, value: Vec<u8>) -> Result<(), KvError>;

    /// Write `value` at `key` with no lease.
    async fn put(&self, key: &str, value: Vec<u8>) -> Result<(), KvError>;

    /// Delete `key`; whether it existed.
    async fn delete(&self, key: &str) -> Result<bool, KvError>;

    /// Delete `key` only if its last write is still `mod_revision` (nobody
    /// wrote it since it was read); whether it was deleted.
    async fn delete_if_unchanged(&self, key: &str, mod_revision: i64) -> Result<bool, KvError>;

    /// Every key under `prefix`, in key order.
    async fn list_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>, KvError>;

    /// The key at `key`, if any.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, KvError>;

    /// Hand every key name under `prefix` to `visit`, in key order, as of
    /// one revision, without holding them all: a listing of a million value
    /// keys would otherwise be held whole. By default, from
    /// [`SharedStore::list_prefix`].
    async fn visit_keys(
        &self,
        prefix: &str,
        visit: &mut (dyn for<'k> FnMut(&'k str) + Send),
    ) -> Result<(), KvError> {
        for kv in self.list_prefix(prefix).await? {
            visit(&kv.key);
        }
        Ok(())
    }

    /// Take the lock at `path` (an etcd concurrency mutex on the lock
    /// lease), waiting behind its holder and earlier waiters.
    async fn lock(&self, path: &str) -> Result<HeldLock, KvError>;

    /// Give the lock back (delete our key).
    async fn unlock(&self, lock: HeldLock) -> Result<(), KvError>;

    /// Delete `key` only if its last write is still `mod_revision` and
    /// `lock` is still ours (its key exists), in one transaction; whether
    /// it was deleted.
    async fn delete_if_locked(
        &self,
        key: &str,
        mod_revision: i64,
        lock: &HeldLock,
    ) -> Result<bool, KvError>;

    /// Take the lock at `path`, and the names of the keys under `prefix`
    /// as of a revision at which it was ours. On an error no lock is held.
    /// By default the two calls; etcd reads the keys in the transaction
    /// that takes the lock when no one is ahead (one request for both).
    async fn lock_and_list_keys(
        &self,
        path: &str,
        prefix: &str,
    ) -> Result<(HeldLock, Vec<String>), KvError> {
        let lock = self.lock(path).await?;
        let mut keys = Vec::new();
        match self
            .visit_keys(prefix, &mut |key| keys.push(key.to_string()))
            .await
        {
            Ok(()) => Ok((lock, keys)),
            Err(error) => {
                // Given back, or agents would wait for it until the lock
                // lease or the lock sweeper ends it; the listing's error
                // is the one to report.
                let _ = self.unlock(lock).await;
                Err(error)
            }
        }
    }

    /// [`SharedStore::delete_if_locked`], then give the lock back, whether
    /// or not the key was deleted (also when deleting failed); whether it
    /// was deleted. By default the two calls; etcd does both in one
    /// transaction.
    async fn delete_if_locked_then_unlock(
        &self,
        key: &str,
        mod_revision: i64,
        lock: HeldLock,
    ) -> Result<bool, KvError> {
        let deleted = self.delete_if_locked(key, mod_revision, &lock).await;
        let unlocked = self.unlock(lock).await;
        let deleted = deleted?;
        unlocked?;
        Ok(deleted)
    }
}
