//! A lease kept alive by us (etcd-client's keep-alive is one request at a
//! time: the loop is ours). Keep-alives go every third of the TTL; a broken
//! stream is reopened; a lease etcd no longer has (expired while we could
//! not reach it, or revoked) is replaced by a new one, announced on
//! [`Session::changes`] so that whoever wrote keys on the old lease writes
//! them again.

use std::time::Duration;

use std::sync::Arc;

use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::client::EtcdClient;
use crate::KvError;

pub struct Session {
    name: &'static str,
    lease: watch::Receiver<i64>,
    /// Wakes the keep-alive loop before its time (a write was refused for
    /// want of the lease).
    check: Arc<Notify>,
    keeper: JoinHandle<()>,
    client: EtcdClient,
}

async fn grant(client: &EtcdClient, name: &'static str, ttl: Duration) -> Result<i64, KvError> {
    let seconds = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
    let mut raw = client.raw();
    let answer = tokio::time::timeout(Duration::from_secs(25), raw.lease_grant(seconds, None))
        .await
        .map_err(|_| KvError::Timeout {
            operation: "lease grant",
            key: name.to_string(),
            seconds: 25,
        })?
        .map_err(|e| KvError::Etcd {
            operation: "lease grant",
            key: name.to_string(),
            message: e.to_string(),
        })?;
    Ok(answer.id())
}

/// How a stream of keep-alives for one lease ended.
enum Ended {
    /// etcd says the lease is gone (TTL 0 in its answer).
    LeaseGone,
    /// The stream broke or timed out: try again with a new stream.
    Broken(String),
}

/// A keep-alive error that says the lease is gone rather than the stream.
fn ended_by(error: etcd_client::Error) -> Ended {
    let message = error.to_string();
    if message.contains("requested lease not found") {
        Ended::LeaseGone
    } else {
        Ended::Broken(message)
    }
}

async fn keep_alive(client: &EtcdClient, lease: i64, ttl: Duration, check: &Notify) -> Ended {
    let every = (ttl / 3).max(Duration::from_millis(500));
    let mut raw = client.raw();
    let (mut keeper, mut answers) = match raw.lease_keep_alive(lease).await {
        Ok(stream) => stream,
        Err(e) => return ended_by(e),
    };
    loop {
        if let Err(e) = keeper.keep_alive().await {
            return ended_by(e);
        }
        match tokio::time::timeout(every, answers.message()).await {
            Ok(Ok(Some(answer))) if answer.ttl() > 0 => {}
            Ok(Ok(Some(_))) => return Ended::LeaseGone,
            Ok(Ok(None)) => return Ended::Broken("the keep-alive stream ended".into()),
            Ok(Err(e)) => return ended_by(e),
            Err(_) => return Ended::Broken("no keep-alive answer in time".into()),
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = check.notified() => {}
        }
    }
}

impl Session {
    /// Grant a lease of `ttl` and keep it alive until the session is
    /// dropped.
    pub async fn start(
        client: EtcdClient,
        name: &'static str,
        ttl: Duration,
    ) -> Result<Self, KvError> {
        let first = grant(&client, name, ttl).await?;
        tracing::info!(session = name, lease = %format!("{first:x}"), ttl_s = ttl.as_secs(), "kvstore lease granted");
        let (lease_tx, lease) = watch::channel(first);
        let check = Arc::new(Notify::new());
        let keeper = tokio::spawn({
            let client = client.clone();
            let check = check.clone();
            async move {
                let mut current = first;
                loop {
                    match keep_alive(&client, current, ttl, &check).await {
                        Ended::Broken(reason) => {
                            tracing::warn!(session = name, lease = %format!("{current:x}"), %reason, "kvstore lease keep-alive broke; retrying");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                        Ended::LeaseGone => loop {
                            match grant(&client, name, ttl).await {
                                Ok(lease) => {
                                    tracing::warn!(session = name, old = %format!("{current:x}"), new = %format!("{lease:x}"), "kvstore lease expired; a new one is granted and its keys are written again");
                                    current = lease;
                                    lease_tx.send_replace(lease);
                                    break;
                                }
                                Err(error) => {
                                    tracing::warn!(session = name, %error, "granting a new kvstore lease failed; retrying");
                                    tokio::time::sleep(Duration::from_secs(1)).await;
                                }
                            }
                        },
                    }
                }
            }
        });
        Ok(Self {
            name,
            lease,
            check,
            keeper,
            client,
        })
    }

    /// The lease keys are written on now.
    pub fn lease(&self) -> i64 {
        *self.lease.borrow()
    }

    /// etcd refused a write for want of `lease`: check it now rather than
    /// at the next keep-alive, and wait (up to `wait`) for its successor;
    /// the lease to write on.
    pub async fn lost(&self, lease: i64, wait: Duration) -> i64 {
        let mut changes = self.lease.clone();
        self.check.notify_one();
        let _ = tokio::time::timeout(wait, changes.wait_for(|now| *now != lease)).await;
        self.lease()
    }

    /// Told each time the lease is replaced.
    pub fn changes(&self) -> watch::Receiver<i64> {
        self.lease.clone()
    }

    /// Stop keeping the lease alive and revoke it: its keys go at once.
    pub async fn revoke(&self) -> Result<(), KvError> {
        self.keeper.abort();
        let lease = self.lease();
        let mut raw = self.client.raw();
        raw.lease_revoke(lease)
            .await
            .map(drop)
            .map_err(|e| KvError::Etcd {
                operation: "lease revoke",
                key: self.name.to_string(),
                message: e.to_string(),
            })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}
