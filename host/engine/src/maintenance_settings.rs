//! The operator's settings of pool maintenance, as one value.

use std::time::Duration;

use ipam_cloud::Tag;
use ipam_pool::tags::Ownership;
use ipam_pool::IpamMode;

/// Engine-wide settings of pool maintenance.
#[derive(Debug, Clone)]
pub struct MaintenanceSettings {
    /// Tagged on every interface the operator creates (`ipam-operator/cluster`);
    /// leaked-interface GC and interface freeing touch only interfaces with it.
    pub cluster_name: String,
    /// Interfaces carrying every one of these tags are freed and collected
    /// like this cluster's own (adoption of the ENIs Cilium's operator
    /// created); empty: none are.
    pub adoption_tags: Vec<Tag>,
    /// Use /28 prefixes where the instance type and provider allow.
    pub prefix_delegation: bool,
    /// How long an address must stay excess before it is marked for release
    /// (Cilium's excess-ip-release-delay, 180 s).
    pub release_delay: Duration,
    /// Delete interfaces of ours whose every address is excess and unused
    /// (when the provider can delete interfaces).
    pub free_interfaces: bool,
    /// Allocation steps per node per pass; the node is visited again after.
    pub max_steps: usize,
    /// Cilium's IPAM mode the cluster's agents run in: which status gets the
    /// interfaces and which spec fields apply. Never read off a node.
    pub ipam_mode: IpamMode,
}

impl MaintenanceSettings {
    /// The interfaces this operator may free and collect.
    pub fn ownership(&self) -> Ownership {
        Ownership::new(&self.cluster_name, self.adoption_tags.clone())
    }
}

impl Default for MaintenanceSettings {
    fn default() -> Self {
        Self {
            cluster_name: "default".into(),
            adoption_tags: Vec::new(),
            prefix_delegation: false,
            release_delay: Duration::from_secs(180),
            free_interfaces: true,
            max_steps: 10,
            ipam_mode: IpamMode::Eni,
        }
    }
}
