//! Test helpers shared by the duties' tests.

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use ipam_kvstore::memory::MemoryStore;
use ipam_kvstore::{HeldLock, KeyValue, KvError, SharedStore};

/// A MemoryStore that fails every operation while `failing` is set, as an
/// etcd that is down would.
#[derive(Default)]
pub struct Flaky {
    pub inner: MemoryStore,
    pub failing: AtomicBool,
}

impl Flaky {
    fn check(&self, key: &str) -> Result<(), KvError> {
        if self.failing.load(Ordering::SeqCst) {
            Err(KvError::Etcd {
                operation: "test",
                key: key.into(),
                message: "etcd is down".into(),
            })
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl SharedStore for Flaky {
    async fn put_leased(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        self.check(key)?;
        self.inner.put_leased(key, value).await
    }
    async fn put(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        self.check(key)?;
        self.inner.put(key, value).await
    }
    async fn delete(&self, key: &str) -> Result<bool, KvError> {
        self.check(key)?;
        self.inner.delete(key).await
    }
    async fn delete_if_unchanged(&self, key: &str, revision: i64) -> Result<bool, KvError> {
        self.check(key)?;
        self.inner.delete_if_unchanged(key, revision).await
    }
    async fn list_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>, KvError> {
        self.check(prefix)?;
        self.inner.list_prefix(prefix).await
    }
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, KvError> {
        self.check(key)?;
        self.inner.get(key).await
    }
    async fn lock(&self, path: &str) -> Result<HeldLock, KvError> {
        self.check(path)?;
        self.inner.lock(path).await
    }
    async fn unlock(&self, lock: HeldLock) -> Result<(), KvError> {
        self.inner.unlock(lock).await
    }
    async fn delete_if_locked(
        &self,
        key: &str,
        revision: i64,
        lock: &HeldLock,
    ) -> Result<bool, KvError> {
        self.check(key)?;
        self.inner.delete_if_locked(key, revision, lock).await
    }
}
