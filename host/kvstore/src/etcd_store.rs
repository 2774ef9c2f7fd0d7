//! [`SharedStore`] on etcd: keys written "leased" go on the operator's
//! session lease and are remembered, so that when the lease is replaced
//! (it expired while etcd was out of reach) they are all written again on
//! the new one; locks are etcd concurrency mutexes on a short lock lease,
//! in the layout cilium-agents use (`<path>/<lease in hex>`, the holder the
//! key with the smallest create revision).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, EventType, TxnOp, WatchOptions};

use crate::client::EtcdClient;
use crate::config::EtcdConfig;
use crate::session::Session;
use crate::{HeldLock, KeyValue, KvError, SharedStore};

/// How long a lock is waited for before giving up (and removing our key).
const LOCK_WAIT: Duration = Duration::from_secs(60);

pub struct EtcdStore {
    client: EtcdClient,
    session: Session,
    lock_session: Session,
    /// Keys written on the session lease, and what was written.
    leased: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
    rewriter: tokio::task::JoinHandle<()>,
}

fn remembered(
    leased: &Mutex<BTreeMap<String, Vec<u8>>>,
) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
    // Nothing panics while holding it; if something did, the map is whole.
    leased.lock().unwrap_or_else(|p| p.into_inner())
}

impl EtcdStore {
    /// Connect, and grant the session lease (`lease_ttl`) and the lock
    /// lease (`lock_ttl`).
    pub async fn connect(config: &EtcdConfig) -> Result<Self, KvError> {
        let client = EtcdClient::connect(config).await?;
        Self::with_client(client, config).await
    }

    pub async fn with_client(client: EtcdClient, config: &EtcdConfig) -> Result<Self, KvError> {
        let session = Session::start(client.clone(), "session", config.lease_ttl).await?;
        let lock_session = Session::start(client.clone(), "locks", config.lock_ttl).await?;
        let leased = Arc::new(Mutex::new(BTreeMap::new()));
        let rewriter = tokio::spawn(rewrite_on_new_lease(
            client.clone(),
            session.changes(),
            leased.clone(),
        ));
        Ok(Self {
            client,
            session,
            lock_session,
            leased,
            rewriter,
        })
    }

    pub fn client(&self) -> &EtcdClient {
        &self.client
    }

    /// The session lease keys are written on now.
    pub fn session_lease(&self) -> i64 {
        self.session.lease()
    }

    /// A clean shutdown: revoke the lock lease, so locks still held go now
    /// rather than after their TTL. The session lease is left to expire:
    /// the services and the heartbeat must outlive a restart of the
    /// operator (the next leader writes them again on its own lease).
    pub async fn release_locks(&self) -> Result<(), KvError> {
        self.lock_session.revoke().await
    }

    /// Take the lock at `path` (our key `<path>/<lock lease hex>`) and,
    /// when `list` is given, the names of the keys under it as of a
    /// revision at which the lock was ours: read in the transaction that
    /// creates our key when no one is ahead (the usual case: one request),
    /// else once our turn has come. On an error our key is deleted.
    async fn take_lock(
        &self,
        path: &str,
        list: Option<&str>,
    ) -> Result<(HeldLock, Vec<String>), KvError> {
        let lease = self.lock_session.lease();
        let key = format!("{path}/{lease:x}");
        let created = self
            .client
            .create_and_read(&key, lease, &format!("{path}/"), list)
            .await?;
        let lock = HeldLock {
            path: path.to_string(),
            key,
            lease,
        };
        let ours = created.create_revision;
        if created.first == ours && !created.more {
            return Ok((lock, created.listed));
        }
        let after_our_turn = async {
            if created.first != ours {
                self.wait_for_turn(path, ours).await?;
            }
            let mut keys = Vec::new();
            if let Some(prefix) = list {
                self.client
                    .visit_keys(prefix, &mut |key| keys.push(key.to_string()))
                    .await?;
            }
            Ok(keys)
        };
        let waited = tokio::time::timeout(LOCK_WAIT, after_our_turn)
            .await
            .unwrap_or_else(|_| {
                Err(KvError::Timeout {
                    operation: "lock",
                    key: path.to_string(),
                    seconds: LOCK_WAIT.as_secs(),
                })
            });
        if waited.is_err() {
            let _ = self.client.delete(&lock.key).await;
        }
        waited.map(|keys| (lock, keys))
    }

    /// Wait until no key under `path/` was created before ours.
    async fn wait_for_turn(&self, path: &str, ours: i64) -> Result<(), KvError> {
        let prefix = format!("{path}/");
        loop {
            let listing = self.client.list(&prefix).await?;
            let Some(ahead) = listing
                .keys
                .iter()
                .filter(|kv| kv.create_revision < ours)
                .max_by_key(|kv| kv.create_revision)
            else {
                return Ok(());
            };
            // Wait for the one just ahead of us to go (etcd's waitDeletes):
            // watching only it avoids waking every waiter at each release.
            let options = WatchOptions::new().with_start_revision(listing.revision + 1);
            let mut raw = self.client.raw();
            let mut stream = raw
                .watch(ahead.key.clone(), Some(options))
                .await
                .map_err(|e| KvError::Etcd {
                    operation: "watch lock",
                    key: ahead.key.clone(),
                    message: e.to_string(),
                })?;
            // Until it is deleted, or the watch ends (canceled, broken):
            // then look again.
            while let Ok(Some(answer)) = stream.message().await {
                if answer.canceled()
                    || answer
                        .events()
                        .iter()
                        .any(|e| e.event_type() == EventType::Delete)
                {
                    break;
                }
            }
        }
    }
}

/// etcd's answer to a write on a lease it does not have.
fn lease_not_found(error: &KvError) -> bool {
    matches!(error, KvError::Etcd { message, .. } if message.contains("requested lease not found"))
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        self.rewriter.abort();
    }
}

async fn rewrite_on_new_lease(
    client: EtcdClient,
    mut lease: tokio::sync::watch::Receiver<i64>,
    leased: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
) {
    while lease.changed().await.is_ok() {
        let id = *lease.borrow_and_update();
        let keys: Vec<(String, Vec<u8>)> = remembered(&leased)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        tracing::info!(keys = keys.len(), lease = %format!("{id:x}"), "writing the operator's keys again on the new lease");
        for (key, value) in keys {
            if let Err(error) = client.put(&key, value, id).await {
                tracing::warn!(%key, %error, "writing a key again on the new lease failed; its duty writes it at its next round");
            }
        }
    }
}

#[async_trait]
impl SharedStore for EtcdStore {
    async fn put_leased(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        let lease = self.session.lease();
        match self.client.put(key, value.clone(), lease).await {
            Err(error) if lease_not_found(&error) => {
                // The lease expired or was revoked; the next keep-alive
                // would notice within a third of its TTL: notice now.
                let lease = self.session.lost(lease, Duration::from_secs(10)).await;
                self.client.put(key, value.clone(), lease).await?;
            }
            other => other?,
        }
        remembered(&self.leased).insert(key.to_string(), value);
        Ok(())
    }

    async fn put(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        self.client.put(key, value, 0).await
    }

    async fn delete(&self, key: &str) -> Result<bool, KvError> {
        let deleted = self.client.delete(key).await?;
        remembered(&self.leased).remove(key);
        Ok(deleted)
    }

    async fn delete_if_unchanged(&self, key: &str, mod_revision: i64) -> Result<bool, KvError> {
        let deleted = self.client.delete_if_unchanged(key, mod_revision).await?;
        if deleted {
            remembered(&self.leased).remove(key);
        }
        Ok(deleted)
    }

    async fn list_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>, KvError> {
        Ok(self.client.list(prefix).await?.keys)
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, KvError> {
        self.client.get(key).await
    }

    async fn visit_keys(
        &self,
        prefix: &str,
        visit: &mut (dyn for<'k> FnMut(&'k str) + Send),
    ) -> Result<(), KvError> {
        self.client.visit_keys(prefix, visit).await.map(drop)
    }

    async fn lock(&self, path: &str) -> Result<HeldLock, KvError> {
        self.take_lock(path, None).await.map(|(lock, _)| lock)
    }

    async fn lock_and_list_keys(
        &self,
        path: &str,
        prefix: &str,
    ) -> Result<(HeldLock, Vec<String>), KvError> {
        self.take_lock(path, Some(prefix)).await
    }

    async fn unlock(&self, lock: HeldLock) -> Result<(), KvError> {
        self.client.delete(&lock.key).await.map(drop)
    }

    async fn delete_if_locked(
        &self,
        key: &str,
        mod_revision: i64,
        lock: &HeldLock,
    ) -> Result<bool, KvError> {
        let deleted = self
            .client
            .txn(
                key,
                still_locked_at(key, mod_revision, lock),
                vec![TxnOp::delete(key, None)],
                Vec::new(),
            )
            .await?;
        if deleted {
            remembered(&self.leased).remove(key);
        }
        Ok(deleted)
    }

    async fn delete_if_locked_then_unlock(
        &self,
        key: &str,
        mod_revision: i64,
        lock: HeldLock,
    ) -> Result<bool, KvError> {
        // Our lock key goes in both branches: the lock is given back in the
        // same request as the delete.
        let answer = self
            .client
            .txn(
                key,
                still_locked_at(key, mod_revision, &lock),
                vec![
                    TxnOp::delete(key, None),
                    TxnOp::delete(lock.key.clone(), None),
                ],
                vec![TxnOp::delete(lock.key.clone(), None)],
            )
            .await;
        let deleted = match answer {
            Ok(deleted) => deleted,
            Err(error) => {
                // Whether the transaction was applied is unknown (a
                // timeout): give the lock back on its own, or agents wait
                // for it until the lock lease or the lock sweeper ends it.
                let _ = self.client.delete(&lock.key).await;
                return Err(error);
            }
        };
        if deleted {
            remembered(&self.leased).remove(key);
        }
        Ok(deleted)
    }
}

/// The guard of a delete under a lock: the key is at `mod_revision` still
/// and our lock key still exists.
fn still_locked_at(key: &str, mod_revision: i64, lock: &HeldLock) -> Vec<Compare> {
    vec![
        Compare::mod_revision(key, CompareOp::Equal, mod_revision),
        Compare::create_revision(lock.key.clone(), CompareOp::Greater, 0),
    ]
}
