//! A [`SharedStore`] in memory, with etcd's revisions: for tests of what a
//! duty writes, without an etcd.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::{HeldLock, KeyValue, KvError, SharedStore};

/// The lease [`MemoryStore::put_leased`] attaches keys to.
pub const MEMORY_SESSION_LEASE: i64 = 0x5e55;

/// The lease [`MemoryStore::lock`] puts its lock keys on.
pub const MEMORY_LOCK_LEASE: i64 = 0x10c;

#[derive(Default)]
struct State {
    revision: i64,
    keys: BTreeMap<String, KeyValue>,
    /// Writes and deletes, in order: (`put`|`delete`, key).
    writes: Vec<(&'static str, String)>,
}

#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
    /// Woken when a key is deleted (a lock waiter looks again).
    deleted: tokio::sync::Notify,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        // A test that panicked while holding the lock poisons it; the
        // state is still what it was, so keep going.
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut state)
    }

    /// The value at `key`, as text.
    pub fn text(&self, key: &str) -> Option<String> {
        self.with(|s| {
            s.keys
                .get(key)
                .map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
        })
    }

    /// Every key, in order.
    pub fn keys(&self) -> Vec<String> {
        self.with(|s| s.keys.keys().cloned().collect())
    }

    /// Writes and deletes so far, in order.
    pub fn writes(&self) -> Vec<(&'static str, String)> {
        self.with(|s| s.writes.clone())
    }

    fn store(&self, key: &str, value: Vec<u8>, lease: i64) {
        self.with(|s| {
            s.revision += 1;
            let revision = s.revision;
            let create_revision = s.keys.get(key).map_or(revision, |kv| kv.create_revision);
            s.keys.insert(
                key.to_string(),
                KeyValue {
                    key: key.to_string(),
                    value,
                    create_revision,
                    mod_revision: revision,
                    lease,
                },
            );
            s.writes.push(("put", key.to_string()));
        });
    }
}

#[async_trait]
impl SharedStore for MemoryStore {
    async fn put_leased(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        self.store(key, value, MEMORY_SESSION_LEASE);
        Ok(())
    }

    async fn put(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        self.store(key, value, 0);
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<bool, KvError> {
        let existed = self.with(|s| {
            let existed = s.keys.remove(key).is_some();
            if existed {
                s.revision += 1;
                s.writes.push(("delete", key.to_string()));
            }
            existed
        });
        if existed {
            self.deleted.notify_waiters();
        }
        Ok(existed)
    }

    async fn delete_if_unchanged(&self, key: &str, mod_revision: i64) -> Result<bool, KvError> {
        let unchanged = self.with(|s| {
            s.keys
                .get(key)
                .is_some_and(|kv| kv.mod_revision == mod_revision)
        });
        if unchanged {
            self.delete(key).await
        } else {
            Ok(false)
        }
    }

    async fn list_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>, KvError> {
        Ok(self.with(|s| {
            s.keys
                .range(prefix.to_string()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(_, kv)| kv.clone())
                .collect()
        }))
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, KvError> {
        Ok(self.with(|s| s.keys.get(key).cloned()))
    }

    async fn lock(&self, path: &str) -> Result<HeldLock, KvError> {
        // One lease for every lock of this store, so two locks of one path
        // need distinct keys: the lease, then a count.
        let key = self.with(|s| {
            let key = format!("{path}/{MEMORY_LOCK_LEASE:x}-{}", s.revision + 1);
            key
        });
        self.store(&key, Vec::new(), MEMORY_LOCK_LEASE);
        let lock = HeldLock {
            path: path.to_string(),
            key,
            lease: MEMORY_LOCK_LEASE,
        };
        loop {
            let woken = self.deleted.notified();
            let first = self
                .list_prefix(&format!("{path}/"))
                .await?
                .into_iter()
                .min_by_key(|kv| kv.create_revision);
            if first.is_some_and(|kv| kv.key == lock.key) {
                return Ok(lock);
            }
            woken.await;
        }
    }

    async fn unlock(&self, lock: HeldLock) -> Result<(), KvError> {
        self.delete(&lock.key).await.map(drop)
    }

    async fn delete_if_locked(
        &self,
        key: &str,
        mod_revision: i64,
        lock: &HeldLock,
    ) -> Result<bool, KvError> {
        let mine = self.with(|s| s.keys.contains_key(&lock.key));
        if mine {
            self.delete_if_unchanged(key, mod_revision).await
        } else {
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn revisions_and_prefixes_behave_as_etcd_s() {
        let store = MemoryStore::new();
        store.put("a/1", b"x".to_vec()).await.unwrap();
        store.put_leased("a/2", b"y".to_vec()).await.unwrap();
        store.put("b/1", b"z".to_vec()).await.unwrap();
        store.put("a/1", b"x2".to_vec()).await.unwrap();
        let listed = store.list_prefix("a/").await.unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!((listed[0].create_revision, listed[0].mod_revision), (1, 4));
        assert_eq!(listed[1].lease, MEMORY_SESSION_LEASE);
        assert!(!store.delete_if_unchanged("a/1", 1).await.unwrap());
        assert!(store.delete_if_unchanged("a/1", 4).await.unwrap());
        assert!(!store.delete("a/1").await.unwrap());
        assert_eq!(store.keys(), ["a/2", "b/1"]);
    }

    #[tokio::test]
    async fn a_lock_waits_for_its_holder() {
        let store = std::sync::Arc::new(MemoryStore::new());
        store.put("id/1", b"k".to_vec()).await.unwrap();
        let first = store.lock("locks/id/1.lock").await.unwrap();
        let waiter = tokio::spawn({
            let store = store.clone();
            async move { store.lock("locks/id/1.lock").await.unwrap() }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert!(store.delete_if_locked("id/1", 1, &first).await.unwrap());
        store.unlock(first.clone()).await.unwrap();
        let second = waiter.await.unwrap();
        assert_ne!(second.key, first.key);
        store.put("id/2", b"k".to_vec()).await.unwrap();
        let revision = store.get("id/2").await.unwrap().unwrap().mod_revision;
        assert!(
            !store
                .delete_if_locked("id/2", revision, &first)
                .await
                .unwrap(),
            "a lock no longer held deletes nothing"
        );
    }
}
