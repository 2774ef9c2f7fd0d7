//! What pool maintenance works with, held once and lent to each part of a
//! pass (allocation, release, publishing).

use std::sync::Arc;

use ipam_cloud::CloudApi;

use crate::instance_cache::InstanceCache;
use crate::maintenance_settings::MaintenanceSettings;
use crate::metrics::Metrics;
use crate::node_store::NodeStore;

pub struct Parts {
    pub cloud: Arc<dyn CloudApi>,
    /// The engine's picture of the cloud.
    pub cache: Arc<InstanceCache>,
    pub store: Arc<dyn NodeStore>,
    pub settings: MaintenanceSettings,
    pub metrics: Arc<Metrics>,
}
