//! CiliumEndpoint GC: deletes the CiliumEndpoints nothing owns any more.
//!
//! An endpoint is kept while one of its owners keeps it: a pod of its
//! namespace that exists and has not finished (phase neither Succeeded nor
//! Failed), a CiliumNode that exists, or an owner of any other kind (the GC
//! does not follow those, so it cannot judge them). An endpoint with no
//! owner at all is orphaned, as Cilium has it. An orphan is deleted on the
//! second consecutive round that finds it orphaned with the same uid, never
//! on the first: Cilium deletes at once, and so deletes the endpoint of a
//! pod its cache has not seen yet. The delete carries the uid as a
//! precondition, so an endpoint re-created under the same name is not
//! touched.
//!
//! [`EndpointGc`] is an [`ipam_duty::Duty`]: the operator builds one each
//! time it starts leading and runs its rounds with
//! [`ipam_duty::run_while_leading`]:
//!
//! ```no_run
//! # async fn compose(client: kube::Client, leader: tokio::sync::watch::Receiver<bool>) {
//! use std::sync::Arc;
//! use ipam_k8s::endpoint_gc::{EndpointGc, EndpointGcSettings};
//!
//! let settings = EndpointGcSettings::default();
//! let metrics = Arc::new(ipam_duty::DutyMetrics::new());
//! ipam_duty::run_while_leading(
//!     move || EndpointGc::new(client.clone(), settings.clone()),
//!     leader,
//!     metrics,
//!     std::future::pending(),
//! )
//! .await;
//! # }
//! ```
//!
//! It needs to list and watch ciliumendpoints, pods and ciliumnodes, and to
//! delete ciliumendpoints.

mod caches;
mod decide;
mod delete;
mod read;

use std::time::Duration;

use async_trait::async_trait;
use ipam_duty::{Duty, RoundReport};
use kube::Client;

pub use caches::Cached;

use caches::Caches;
use decide::{plan, Suspects};
use delete::Outcome;

/// Cilium's `--cilium-endpoint-gc-interval` default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// The duty's name in logs and metrics.
pub const NAME: &str = "endpoint-gc";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// Cilium reads an interval of 0 as "GC disabled": the operator should
    /// then not run the duty at all.
    #[error(
        "the CiliumEndpoint GC interval must be above zero (to disable the GC, do not run it)"
    )]
    ZeroInterval,
}

/// How the GC runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointGcSettings {
    interval: Duration,
}

impl EndpointGcSettings {
    /// Rounds every `interval` (above zero).
    pub fn new(interval: Duration) -> Result<Self, SettingsError> {
        if interval.is_zero() {
            return Err(SettingsError::ZeroInterval);
        }
        Ok(Self { interval })
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }
}

impl Default for EndpointGcSettings {
    /// Every [`DEFAULT_INTERVAL`].
    fn default() -> Self {
        Self {
            interval: DEFAULT_INTERVAL,
        }
    }
}

/// The CiliumEndpoint GC duty. It remembers the endpoints the previous
/// round found orphaned, and holds its caches: both go with it, so a
/// replica that leads again starts from fresh caches and no suspects.
pub struct EndpointGc {
    client: Client,
    settings: EndpointGcSettings,
    /// Started by [`Duty::ready`]: the watches begin only once the
    /// replica leads, and end when the duty is dropped.
    caches: Option<Caches>,
    suspects: Suspects,
}

impl EndpointGc {
    /// A GC deleting through `client`. Nothing is watched before
    /// [`Duty::ready`].
    pub fn new(client: Client, settings: EndpointGcSettings) -> Self {
        Self {
            client,
            settings,
            caches: None,
            suspects: Suspects::new(),
        }
    }

    /// How many objects the caches hold (all zero before [`Duty::ready`]).
    pub fn cached(&self) -> Cached {
        self.caches.as_ref().map(Caches::cached).unwrap_or_default()
    }
}

/// What one round did, for its summary.
#[derive(Debug, Default)]
struct Tally {
    deleted: u64,
    gone: u64,
    replaced: u64,
    failed: u64,
    first_failure: Option<String>,
}

#[async_trait]
impl Duty for EndpointGc {
    fn name(&self) -> &'static str {
        NAME
    }

    fn interval(&self) -> Duration {
        self.settings.interval
    }

    /// Start the watches and wait until every cache has its first list: a
    /// round on a partial pod cache would suspect every endpoint.
    async fn ready(&mut self) {
        let client = self.client.clone();
        let caches = self.caches.get_or_insert_with(|| Caches::start(client));
        if !caches.wait_synced().await {
            tracing::warn!(duty = NAME, "a watch ended before its cache was synced");
        }
    }

    async fn round(&mut self) -> Result<RoundReport, String> {
        let Some(caches) = self.caches.as_ref().filter(|c| c.synced()) else {
            return Err("the caches are not synced yet".to_string());
        };
        let (endpoints, owners) = caches.snapshot();
        let decided = plan(&endpoints, &owners, &self.suspects);
        let mut suspects = decided.suspects;
        let mut tally = Tally::default();
        for (endpoint, why) in &decided.delete {
            let outcome = delete::delete(&self.client, endpoint).await;
            let path = format!("{}/{}", endpoint.namespace, endpoint.name);
            let uid = endpoint.uid.as_str();
            match outcome {
                Outcome::Deleted => {
                    tracing::info!(duty = NAME, endpoint = %path, uid, %why, "deleted an orphaned CiliumEndpoint");
                    tally.deleted += 1;
                }
                Outcome::Gone => {
                    tracing::debug!(duty = NAME, endpoint = %path, uid, "orphaned CiliumEndpoint already gone");
                    tally.gone += 1;
                }
                Outcome::Replaced => {
                    tracing::info!(duty = NAME, endpoint = %path, uid, "CiliumEndpoint re-created under the same name since it was judged: left alone");
                    tally.replaced += 1;
                }
                Outcome::Failed(error) => {
                    tracing::warn!(duty = NAME, endpoint = %path, uid, %error, "could not delete an orphaned CiliumEndpoint");
                    tally.failed += 1;
                    tally
                        .first_failure
                        .get_or_insert_with(|| format!("{path}: {error}"));
                    // Still a suspect: the next round tries again.
                    continue;
                }
            }
            // Deleted, or no longer the endpoint judged: whatever holds the
            // name next is judged afresh, from its own first round.
            suspects.remove(&endpoint.key());
        }
        let suspected = suspects.len();
        self.suspects = suspects;
        tracing::info!(
            duty = NAME,
            endpoints = endpoints.len(),
            kept = decided.kept,
            suspected,
            deleted = tally.deleted,
            already_gone = tally.gone,
            replaced = tally.replaced,
            failed = tally.failed,
            "CiliumEndpoint GC round"
        );
        match tally.first_failure {
            None => Ok(RoundReport {
                deletions: tally.deleted,
            }),
            Some(first) => Err(format!(
                "{} of {} deletions failed (first: {first}); {} deleted",
                tally.failed,
                decided.delete.len(),
                tally.deleted
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_default_to_cilium_s_interval_and_refuse_zero() {
        assert_eq!(
            EndpointGcSettings::default().interval(),
            Duration::from_secs(300)
        );
        assert_eq!(
            EndpointGcSettings::new(Duration::ZERO),
            Err(SettingsError::ZeroInterval)
        );
        assert_eq!(
            EndpointGcSettings::new(Duration::from_secs(30)).map(|s| s.interval()),
            Ok(Duration::from_secs(30))
        );
    }
}
