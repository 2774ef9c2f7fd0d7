//! A [`MemoryStore`] that others meddle with, for the duties' tests: a key
//! re-written right after a listing (someone writing between a duty's read
//! and its write), an operation failing once on a given key (etcd going
//! away mid-round).

use std::sync::Mutex;

use async_trait::async_trait;

use crate::memory::MemoryStore;
use crate::{HeldLock, KeyValue, KvError, SharedStore};

#[derive(Default)]
pub struct Meddling {
    pub inner: MemoryStore,
    rewrite_after_listing: Mutex<Option<String>>,
    fail: Mutex<Option<(&'static str, String)>>,
}

impl Meddling {
    /// Re-write `key` (same value, new mod revision) after the next listing.
    pub fn rewrite_after_next_listing(&self, key: &str) {
        *self.rewrite_after_listing.lock().unwrap() = Some(key.to_string());
    }

    /// Fail the next `operation` on `key` (for `lock`, the lock path).
    pub fn fail_next(&self, operation: &'static str, key: &str) {
        *self.fail.lock().unwrap() = Some((operation, key.to_string()));
    }

    fn failing(&self, operation: &'static str, key: &str) -> Result<(), KvError> {
        let mut fail = self.fail.lock().unwrap();
        if fail
            .as_ref()
            .is_some_and(|(op, k)| *op == operation && k == key)
        {
            *fail = None;
            return Err(KvError::Etcd {
                operation,
                key: key.to_string(),
                message: "injected failure".into(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl SharedStore for Meddling {
    async fn put_leased(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        self.failing("put", key)?;
        self.inner.put_leased(key, value).await
    }

    async fn put(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        self.failing("put", key)?;
        self.inner.put(key, value).await
    }

    async fn delete(&self, key: &str) -> Result<bool, KvError> {
        self.failing("delete", key)?;
        self.inner.delete(key).await
    }

    async fn delete_if_unchanged(&self, key: &str, mod_revision: i64) -> Result<bool, KvError> {
        self.failing("delete", key)?;
        self.inner.delete_if_unchanged(key, mod_revision).await
    }

    async fn list_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>, KvError> {
        self.failing("list", prefix)?;
        let listing = self.inner.list_prefix(prefix).await?;
        let rewrite = self.rewrite_after_listing.lock().unwrap().take();
        if let Some(key) = rewrite {
            let kv = self
                .inner
                .get(&key)
                .await?
                .expect("the key to rewrite exists");
            if kv.lease == 0 {
                self.inner.put(&key, kv.value).await?;
            } else {
                self.inner.put_leased(&key, kv.value).await?;
            }
        }
        Ok(listing)
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, KvError> {
        self.failing("get", key)?;
        self.inner.get(key).await
    }

    async fn lock(&self, path: &str) -> Result<HeldLock, KvError> {
        self.failing("lock", path)?;
        self.inner.lock(path).await
    }

    async fn unlock(&self, lock: HeldLock) -> Result<(), KvError> {
        self.failing("unlock", &lock.path)?;
        self.inner.unlock(lock).await
    }

    async fn delete_if_locked(
        &self,
        key: &str,
        mod_revision: i64,
        lock: &HeldLock,
    ) -> Result<bool, KvError> {
        self.failing("delete", key)?;
        self.inner.delete_if_locked(key, mod_revision, lock).await
    }
}
