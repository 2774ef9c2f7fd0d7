//! A [`SharedStore`] in memory, with etcd's revisions: for tests of what a
//! duty writes, without an etcd.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::{KeyValue, KvError, SharedStore};

/// The lease [`MemoryStore::put_leased`] attaches keys to.
pub const MEMORY_SESSION_LEASE: i64 = 0x5e55;

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
        Ok(self.with(|s| {
            let existed = s.keys.remove(key).is_some();
            if existed {
                s.revision += 1;
                s.writes.push(("delete", key.to_string()));
            }
            existed
        }))
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
}
