//! Leaked-interface GC: interfaces this operator owns ([`Ownership`]: the
//! ones it created, by the cluster tag, and the ones the user handed over by
//! naming their tags) that are detached and older than a grace period are
//! deleted, but only when two rounds in a row see them so, since a create in
//! flight (created, not yet attached) looks the same for a moment. The
//! provider's listing is not trusted to have filtered: an item it is not
//! owned by these tags, or that the engine's cache holds attached to an
//! instance, is never deleted, whatever the listing says of it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use ipam_cloud::{CloudApi, CloudError, NetworkInterface};
use ipam_pool::tags::{created_at, Ownership};

pub struct LeakCollector {
    ownership: Ownership,
    grace_seconds: u64,
    /// Seen leaked in the previous round.
    suspects: Mutex<BTreeSet<String>>,
}

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcRound {
    /// Seen for the first time: deleted next round if still leaked.
    pub suspected: Vec<String>,
    pub deleted: Vec<String>,
}

/// What a listing of detached interfaces holds, judged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeakReview {
    /// Owned, detached and past the grace period: deleted when a second
    /// round sees them so.
    pub leaked: Vec<NetworkInterface>,
    /// Owned and detached but younger than the grace period.
    pub young: Vec<String>,
    /// Listed but never to be deleted, and why.
    pub spared: Vec<(String, &'static str)>,
}

impl LeakCollector {
    pub fn new(ownership: Ownership, grace_seconds: u64) -> Self {
        Self {
            ownership,
            grace_seconds,
            suspects: Mutex::new(BTreeSet::new()),
        }
    }

    pub fn grace_seconds(&self) -> u64 {
        self.grace_seconds
    }

    /// Old enough to be a leak: created-at past the grace period. An
    /// interface without a readable created-at (one adopted from another
    /// operator) is aged by the two rounds only.
    fn old_enough(&self, interface: &NetworkInterface, now: u64) -> bool {
        created_at(&interface.tags)
            .is_none_or(|created| now.saturating_sub(created) >= self.grace_seconds)
    }

    /// The detached interfaces the owned tags find: one listing per tag set,
    /// merged by id. A read: nothing is changed.
    pub async fn list(&self, cloud: &dyn CloudApi) -> Result<Vec<NetworkInterface>, CloudError> {
        let mut found = BTreeMap::new();
        for tags in self.ownership.listings() {
            for interface in cloud.get_detached_interfaces(&tags).await? {
                found.entry(interface.id.clone()).or_insert(interface);
            }
        }
        Ok(found.into_values().collect())
    }

    /// Judge a listing at `now` (unix seconds), sparing every interface in
    /// `attached` (those the engine's cache holds on an instance).
    pub fn review(
        &self,
        listed: Vec<NetworkInterface>,
        now: u64,
        attached: &BTreeSet<String>,
    ) -> LeakReview {
        let mut review = LeakReview::default();
        for interface in listed {
            if !self.ownership.owns(&interface.tags) {
                review.spared.push((
                    interface.id,
                    "it carries neither this cluster's tag nor the adoption tags",
                ));
            } else if interface.instance_id.is_some() || attached.contains(&interface.id) {
                review
                    .spared
                    .push((interface.id, "it is attached to an instance"));
            } else if self.old_enough(&interface, now) {
                review.leaked.push(interface);
            } else {
                review.young.push(interface.id);
            }
        }
        review
    }

    /// One round at `now` (unix seconds), sparing every interface in
    /// `attached`. Needs the delete-interface capability.
    pub async fn round(
        &self,
        cloud: &dyn CloudApi,
        now: u64,
        attached: &BTreeSet<String>,
    ) -> Result<GcRound, CloudError> {
        if !cloud.info().capabilities.delete_interface {
            return Ok(GcRound::default());
        }
        let review = self.review(self.list(cloud).await?, now, attached);
        for (interface, why) in &review.spared {
            tracing::warn!(%interface, why, "the provider listed an interface as detached and ours that is not: spared");
        }
        let previous =
            std::mem::take(&mut *self.suspects.lock().unwrap_or_else(|p| p.into_inner()));
        let mut round = GcRound::default();
        let mut still_suspected = BTreeSet::new();
        for id in review.leaked.into_iter().map(|i| i.id) {
            if previous.contains(&id) {
                match cloud.delete_interface(&id).await {
                    Ok(()) => {
                        tracing::info!(interface = %id, "deleted leaked interface");
                        round.deleted.push(id);
                    }
                    Err(error) => {
                        tracing::warn!(interface = %id, %error, "could not delete leaked interface; retrying next round");
                        still_suspected.insert(id);
                    }
                }
            } else {
                round.suspected.push(id.clone());
                still_suspected.insert(id);
            }
        }
        *self.suspects.lock().unwrap_or_else(|p| p.into_inner()) = still_suspected;
        Ok(round)
    }
}
