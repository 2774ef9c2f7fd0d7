//! [`NodeUpdate`]: the operator's changes to one node. The operator never
//! writes a whole node: an update names only the fields it owns, and
//! `release-ips` entries one by one, so a change the agent made meanwhile
//! (status.ipam.used, its answers in release-ips) survives, as a merge patch
//! does on the API server ([`crate::patch`]).

use std::collections::BTreeMap;

use crate::node::{AllocationIp, AzureInterface, CiliumNode, EniInterface};
use crate::release_state::ReleaseState;

/// The operator's changes to one node. `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeUpdate {
    /// Replaces spec.ipam.pool.
    pub pool: Option<BTreeMap<String, AllocationIp>>,
    /// Per address in status.ipam.release-ips: `Some(state)` sets it,
    /// `None` removes it. Addresses not named are untouched.
    pub release_ips: BTreeMap<String, Option<ReleaseState>>,
    /// Replaces status.ipam.operator-status.error.
    pub operator_error: Option<String>,
    /// Replaces status.eni.enis.
    pub enis: Option<BTreeMap<String, EniInterface>>,
    /// Replaces status.azure.interfaces.
    pub azure_interfaces: Option<Vec<AzureInterface>>,
}

impl NodeUpdate {
    /// Apply to a node, as a merge patch of these fields would.
    pub fn apply_to(&self, node: &mut CiliumNode) {
        if let Some(pool) = &self.pool {
            node.spec.ipam.pool = pool.clone();
        }
        for (ip, state) in &self.release_ips {
            match state {
                Some(state) => node
                    .status
                    .ipam
                    .release_ips
                    .insert(ip.clone(), state.clone()),
                None => node.status.ipam.release_ips.remove(ip),
            };
        }
        if let Some(error) = &self.operator_error {
            node.status.ipam.operator_status.error = error.clone();
        }
        if let Some(enis) = &self.enis {
            node.status.eni.enis = enis.clone();
        }
        if let Some(interfaces) = &self.azure_interfaces {
            node.status.azure.interfaces = interfaces.clone();
        }
    }
}
