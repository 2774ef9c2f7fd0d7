//! The virtual networks get-vpcs listed, kept for the get-subnets the host
//! calls right after it. Both read VirtualNetworks.List in every network
//! resource group, and a resync calls them one after the other, on the same
//! instance in practice (the host's instance pool hands out the instance
//! returned last), so one listing can serve both. get-subnets takes it once
//! and only while it is fresh: a later get-subnets lists again, so the free
//! counts it reports after an assign are ARM's new ones.

use std::time::Duration;

use crate::models::VirtualNetwork;

/// How long after get-vpcs began its listing the listing serves get-subnets.
pub const KEPT_FOR: Duration = Duration::from_secs(1);

pub struct KeptNetworks {
    /// When the listing began, on the transport's monotonic clock.
    listed_at: Duration,
    networks: Vec<VirtualNetwork>,
}

impl KeptNetworks {
    pub fn new(networks: Vec<VirtualNetwork>, listed_at: Duration) -> Self {
        KeptNetworks {
            listed_at,
            networks,
        }
    }

    /// The networks, if the listing began no more than [`KEPT_FOR`] before
    /// `now`.
    pub fn fresh_at(self, now: Duration) -> Option<Vec<VirtualNetwork>> {
        (now.saturating_sub(self.listed_at) <= KEPT_FOR).then_some(self.networks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept_at(seconds: u64) -> KeptNetworks {
        let network = serde_json::from_str(r#"{"id": "v"}"#).expect("a network");
        KeptNetworks::new(vec![network], Duration::from_secs(seconds))
    }

    #[test]
    fn a_listing_serves_for_one_second_from_when_it_began() {
        let at = |seconds: u64, nanos: u32| Duration::new(seconds, nanos);
        assert_eq!(kept_at(10).fresh_at(at(10, 0)).map(|n| n.len()), Some(1));
        assert!(kept_at(10).fresh_at(at(11, 0)).is_some());
        assert!(kept_at(10).fresh_at(at(11, 1)).is_none());
        assert!(kept_at(10).fresh_at(at(60, 0)).is_none());
    }
}
