//! Leaked-interface GC: interfaces this cluster's operator created (by the
//! cluster tag) that are detached and older than a grace period are deleted,
//! but only when two rounds in a row see them so, since a create in flight
//! (created, not yet attached) looks the same for a moment. The provider's
//! listing is not trusted to have filtered: an item without this cluster's
//! tag, or that the engine's cache holds attached to an instance, is never
//! deleted, whatever the listing says of it.

use std::collections::BTreeSet;
use std::sync::Mutex;

use ipam_cloud::{CloudApi, CloudError, NetworkInterface};
use ipam_pool::tags::{cluster_tag, created_at};

pub struct LeakCollector {
    cluster_name: String,
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

impl LeakCollector {
    pub fn new(cluster_name: impl Into<String>, grace_seconds: u64) -> Self {
        Self {
            cluster_name: cluster_name.into(),
            grace_seconds,
            suspects: Mutex::new(BTreeSet::new()),
        }
    }

    /// Old enough to be a leak: created-at past the grace period. An
    /// interface without a readable created-at is aged by the two rounds only.
    fn old_enough(&self, interface: &NetworkInterface, now: u64) -> bool {
        created_at(&interface.tags)
            .is_none_or(|created| now.saturating_sub(created) >= self.grace_seconds)
    }

    /// One round at `now` (unix seconds), sparing every interface in
    /// `attached` (those the engine's cache holds on an instance). Needs the
    /// delete-interface capability.
    pub async fn round(
        &self,
        cloud: &dyn CloudApi,
        now: u64,
        attached: &BTreeSet<String>,
    ) -> Result<GcRound, CloudError> {
        if !cloud.info().capabilities.delete_interface {
            return Ok(GcRound::default());
        }
        let ours = [cluster_tag(&self.cluster_name)];
        let mut leaked = BTreeSet::new();
        for interface in cloud.get_detached_interfaces(&ours).await? {
            let spared = if !interface.tags.contains(&ours[0]) {
                Some("it does not carry this cluster's tag")
            } else if interface.instance_id.is_some() || attached.contains(&interface.id) {
                Some("it is attached to an instance")
            } else {
                None
            };
            if let Some(why) = spared {
                tracing::warn!(interface = %interface.id, why, "the provider listed an interface as detached and ours that is not: spared");
            } else if self.old_enough(&interface, now) {
                leaked.insert(interface.id);
            }
        }
        let previous =
            std::mem::take(&mut *self.suspects.lock().unwrap_or_else(|p| p.into_inner()));
        let mut round = GcRound::default();
        let mut still_suspected = BTreeSet::new();
        for id in leaked {
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
