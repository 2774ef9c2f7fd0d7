//! Leader election on a coordination.k8s.io/v1 Lease, as client-go does it:
//! the holder renews every retry period; a lease not renewed within its
//! duration may be taken; writes carry the resourceVersion read, so two
//! candidates cannot both win (the loser gets 409). A leader that cannot
//! renew within the renew deadline steps down at once, before the lease
//! could be taken by another, and a clean shutdown hands the lease back.
//! Every change of leadership is shown in [`LeaderMetrics`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::leader_metrics::LeaderMetrics;

#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This candidate (the pod name, usually).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// client-go's defaults: 15 s, 10 s, 2 s.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What to do with the lease as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Ours: renew it.
    Renew,
    /// Free or expired: take it (the transition count to write).
    Acquire { transitions: i32 },
    /// Someone else holds it.
    Follow { holder: String },
}

/// The decision for `identity` at `now` over a lease's spec.
pub fn decide(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> Decision {
    let Some(spec) = spec else {
        return Decision::Acquire { transitions: 0 };
    };
    let transitions = spec.lease_transitions.unwrap_or(0);
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == identity {
        return Decision::Renew;
    }
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map_or(0, |t| t.0.as_millisecond());
    let duration_ms = i64::from(spec.lease_duration_seconds.unwrap_or(0)) * 1000;
    if holder.is_empty() || now.as_millisecond() >= renewed + duration_ms {
        Decision::Acquire {
            transitions: transitions + 1,
        }
    } else {
        Decision::Follow { holder }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lease {name}: {source}")]
    Api { name: String, source: kube::Error },
}

pub struct LeaderElection {
    api: Api<Lease>,
    config: LeaseConfig,
    metrics: Arc<LeaderMetrics>,
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

impl LeaderElection {
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            metrics: Arc::default(),
        }
    }

    /// Show whether this candidate leads in `metrics` (registered by the
    /// caller).
    pub fn with_metrics(mut self, metrics: Arc<LeaderMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Tell the metrics and `leader` whether this candidate leads (the
    /// metrics first: whoever sees `leader` change sees them agree).
    fn set_leader(&self, leader: &watch::Sender<bool>, leading: bool) {
        self.metrics.leading(leading);
        leader.send_replace(leading);
    }

    fn seconds(&self) -> i32 {
        i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    fn spec(&self, now: Timestamp, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.seconds()),
            acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// One attempt to take or keep the lease: whether we hold it now.
    pub async fn try_hold(&self) -> Result<bool, LeaseError> {
        let wrap = |source| LeaseError::Api {
            name: self.config.name.clone(),
            source,
        };
        let now = Timestamp::now();
        let current = self.api.get_opt(&self.config.name).await.map_err(wrap)?;
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, None, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(error) if is_conflict(&error) => Ok(false),
                Err(error) => Err(wrap(error)),
            };
        };
        let spec = match decide(lease.spec.as_ref(), &self.config.identity, now) {
            Decision::Follow { .. } => return Ok(false),
            Decision::Renew => {
                let old = lease.spec.clone().unwrap_or_default();
                self.spec(now, old.acquire_time, old.lease_transitions.unwrap_or(0))
            }
            Decision::Acquire { transitions } => self.spec(now, None, transitions),
        };
        lease.spec = Some(spec);
        // The resourceVersion read travels with the write: of two
        // candidates taking an expired lease, one gets 409.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(error) if is_conflict(&error) => Ok(false),
            Err(error) => Err(wrap(error)),
        }
    }

    /// Hand the lease back if we hold it (a clean shutdown), so a standby
    /// takes over without waiting out the lease.
    pub async fn release(&self) -> Result<(), LeaseError> {
        let wrap = |source| LeaseError::Api {
            name: self.config.name.clone(),
            source,
        };
        let Some(mut lease) = self.api.get_opt(&self.config.name).await.map_err(wrap)? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        self.api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
            .map_err(wrap)?;
        Ok(())
    }

    /// Campaign, hold and renew until `shutdown`; `leader` follows whether
    /// this candidate holds the lease. Leadership is dropped (false) as soon
    /// as a renewal has not succeeded for the renew deadline.
    pub async fn run(&self, leader: &watch::Sender<bool>, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        self.metrics.leading(*leader.borrow());
        let mut last_held: Option<Instant> = None;
        loop {
            match self.try_hold().await {
                Ok(true) => {
                    last_held = Some(Instant::now());
                    if !*leader.borrow() {
                        tracing::info!(identity = %self.config.identity, lease = %self.config.name, "became the leader");
                        self.set_leader(leader, true);
                    }
                }
                Ok(false) => {
                    if *leader.borrow() {
                        tracing::warn!(identity = %self.config.identity, "another candidate holds the lease: stepping down");
                        self.set_leader(leader, false);
                    }
                    last_held = None;
                }
                Err(error) => tracing::warn!(%error, "lease renewal failed"),
            }
            if *leader.borrow()
                && last_held.is_none_or(|at| at.elapsed() >= self.config.renew_deadline)
            {
                tracing::warn!(identity = %self.config.identity, "could not renew the lease in time: stepping down");
                self.set_leader(leader, false);
            }
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
        if *leader.borrow() {
            self.set_leader(leader, false);
            if let Err(error) = self.release().await {
                tracing::warn!(%error, "could not hand the lease back");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renewed_ms: i64, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: (!holder.is_empty()).then(|| holder.to_string()),
            lease_duration_seconds: Some(seconds),
            renew_time: Some(MicroTime(
                Timestamp::from_millisecond(renewed_ms).expect("valid time"),
            )),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(ms).expect("valid time")
    }

    #[test]
    fn decisions() {
        assert_eq!(
            decide(None, "a", at(0)),
            Decision::Acquire { transitions: 0 }
        );
        let held = lease("b", 10_000, 15);
        assert_eq!(
            decide(Some(&held), "a", at(20_000)),
            Decision::Follow { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&held), "a", at(25_000)),
            Decision::Acquire { transitions: 4 },
            "expired"
        );
        assert_eq!(
            decide(Some(&held), "b", at(99_000)),
            Decision::Renew,
            "ours, even late"
        );
        let released = lease("", 10_000, 1);
        assert_eq!(
            decide(Some(&released), "a", at(10_000)),
            Decision::Acquire { transitions: 4 }
        );
    }
}
