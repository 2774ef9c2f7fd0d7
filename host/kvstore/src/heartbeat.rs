//! The heartbeat: `cilium/.heartbeat` holds the time in RFC 3339, written
//! every minute on the operator's session lease. cilium-agents and
//! clustermesh peers call the kvstore unhealthy after two minutes without a
//! heartbeat event, so a write is given 25 s and no more.
//!
//! With a cluster name other than `default` and a cluster id other than 0,
//! the round also writes `cilium/cluster-config/<cluster>`, the
//! CiliumClusterConfig peers read before they connect.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ipam_duty::{Duty, RoundReport};
use serde::Serialize;

use crate::heartbeat_metrics::HeartbeatMetrics;
use crate::layout::{cluster_config_key, HEARTBEAT_KEY};
use crate::mesh::ClusterMesh;
use crate::SharedStore;

/// CiliumClusterConfig in Cilium's field names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterConfig {
    pub id: u32,
    pub capabilities: Capabilities,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// Peers wait for a synced marker of each prefix they watch before they
    /// read it: true only if one is written for every such prefix.
    pub synced_canaries: bool,
    /// Whether the data comes from a cache (kvstoremesh); never ours.
    pub cached: bool,
    pub max_connected_clusters: u32,
    /// Left out when not set, as Cilium leaves out its nil pointer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_exports_enabled: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatSettings {
    pub interval: Duration,
    /// A write's limit (Cilium's 25 s).
    pub write_timeout: Duration,
    pub cluster_name: String,
    /// The cluster's id and the mesh's size (the config's
    /// `maxConnectedClusters`: peers refuse a config whose id exceeds it).
    pub mesh: ClusterMesh,
    /// Whether every prefix peers watch has its synced marker written.
    pub synced_canaries: bool,
    pub service_exports_enabled: Option<bool>,
}

impl Default for HeartbeatSettings {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(60),
            write_timeout: Duration::from_secs(25),
            cluster_name: "default".into(),
            mesh: ClusterMesh::default(),
            synced_canaries: false,
            service_exports_enabled: None,
        }
    }
}

impl HeartbeatSettings {
    /// The cluster config to write, if this cluster has one (a name other
    /// than `default` and an id other than 0).
    pub fn cluster_config(&self) -> Option<ClusterConfig> {
        let id = self.mesh.cluster_id();
        let named = self.cluster_name != "default" && id != 0;
        named.then_some(ClusterConfig {
            id,
            capabilities: Capabilities {
                synced_canaries: self.synced_canaries,
                cached: false,
                max_connected_clusters: self.mesh.max_connected_clusters().value(),
                service_exports_enabled: self.service_exports_enabled,
            },
        })
    }
}

/// `now` as Go's time.RFC3339 writes it in UTC (whole seconds, `Z`).
pub fn rfc3339(now: jiff::Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub struct Heartbeat {
    store: Arc<dyn SharedStore>,
    settings: HeartbeatSettings,
    metrics: Arc<HeartbeatMetrics>,
}

impl Heartbeat {
    pub fn new(store: Arc<dyn SharedStore>, settings: HeartbeatSettings) -> Self {
        Self {
            store,
            settings,
            metrics: Arc::default(),
        }
    }

    /// Record each heartbeat written in `metrics` (registered by the
    /// caller).
    pub fn with_metrics(mut self, metrics: Arc<HeartbeatMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    async fn write(&self, key: &str, value: Vec<u8>) -> Result<(), String> {
        match tokio::time::timeout(
            self.settings.write_timeout,
            self.store.put_leased(key, value),
        )
        .await
        {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "{key}: no answer within {} s",
                self.settings.write_timeout.as_secs()
            )),
        }
    }
}

#[async_trait]
impl Duty for Heartbeat {
    fn name(&self) -> &'static str {
        "heartbeat"
    }

    fn interval(&self) -> Duration {
        self.settings.interval
    }

    async fn round(&mut self) -> Result<RoundReport, String> {
        let at = jiff::Timestamp::now();
        let now = rfc3339(at);
        self.write(HEARTBEAT_KEY, now.clone().into_bytes()).await?;
        self.metrics.written(at);
        tracing::debug!(key = HEARTBEAT_KEY, %now, "heartbeat written");
        if let Some(config) = self.settings.cluster_config() {
            let key = cluster_config_key(&self.settings.cluster_name);
            let value = serde_json::to_vec(&config).map_err(|e| e.to_string())?;
            self.write(&key, value).await?;
        }
        Ok(RoundReport::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryStore, MEMORY_SESSION_LEASE};
    use crate::test_store::Meddling;

    #[test]
    fn times_are_written_as_go_s_rfc3339() {
        let t: jiff::Timestamp = "2026-11-25T08:30:05.123Z".parse().unwrap();
        assert_eq!(rfc3339(t), "2026-11-25T08:30:05Z");
    }

    #[test]
    fn the_cluster_config_is_written_only_for_a_named_cluster_with_an_id() {
        let settings = |name: &str, id| HeartbeatSettings {
            cluster_name: name.into(),
            mesh: ClusterMesh::new(id, Default::default()).unwrap(),
            ..HeartbeatSettings::default()
        };
        assert!(settings("default", 3).cluster_config().is_none());
        assert!(settings("east", 0).cluster_config().is_none());
        let config = settings("east", 3).cluster_config().unwrap();
        assert_eq!(
            serde_json::to_value(&config).unwrap(),
            serde_json::json!({"id": 3, "capabilities": {"syncedCanaries": false, "cached": false, "maxConnectedClusters": 255}})
        );
        let mut exports = settings("east", 3);
        exports.service_exports_enabled = Some(true);
        exports.synced_canaries = true;
        let json = serde_json::to_value(exports.cluster_config().unwrap()).unwrap();
        assert_eq!(json["capabilities"]["serviceExportsEnabled"], true);
        assert_eq!(json["capabilities"]["syncedCanaries"], true);
        let wide = HeartbeatSettings {
            cluster_name: "east".into(),
            mesh: ClusterMesh::new(300, crate::mesh::MaxConnectedClusters::Clusters511).unwrap(),
            ..HeartbeatSettings::default()
        };
        let json = serde_json::to_value(wide.cluster_config().unwrap()).unwrap();
        assert_eq!(json["id"], 300);
        assert_eq!(json["capabilities"]["maxConnectedClusters"], 511);
    }

    #[tokio::test]
    async fn a_round_writes_the_heartbeat_and_cluster_config_on_the_session_lease() {
        let store = Arc::new(MemoryStore::new());
        let metrics = Arc::new(HeartbeatMetrics::new());
        let mut heartbeat = Heartbeat::new(
            store.clone(),
            HeartbeatSettings {
                cluster_name: "east".into(),
                mesh: ClusterMesh::new(7, Default::default()).unwrap(),
                ..HeartbeatSettings::default()
            },
        )
        .with_metrics(metrics.clone());
        assert_eq!(metrics.last_written(), 0);
        heartbeat.round().await.unwrap();
        let beat = store.get(HEARTBEAT_KEY).await.unwrap().unwrap();
        assert_eq!(beat.lease, MEMORY_SESSION_LEASE);
        let text = String::from_utf8(beat.value).unwrap();
        let written: jiff::Timestamp = text.parse().unwrap();
        assert!(
            (jiff::Timestamp::now() - written).get_seconds().abs() < 5,
            "{text}"
        );
        assert_eq!(
            metrics.last_written(),
            written.as_second(),
            "the gauge holds the time written"
        );
        let config = store.text("cilium/cluster-config/east").unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&config).unwrap()["id"],
            7
        );
    }

    #[tokio::test]
    async fn a_failed_write_leaves_the_gauge_at_the_last_heartbeat_written() {
        let store = Arc::new(Meddling::default());
        let metrics = Arc::new(HeartbeatMetrics::new());
        let mut heartbeat = Heartbeat::new(store.clone(), HeartbeatSettings::default())
            .with_metrics(metrics.clone());
        store.fail_next("put", HEARTBEAT_KEY);
        assert!(heartbeat.round().await.is_err());
        assert_eq!(metrics.last_written(), 0, "nothing written yet");
        heartbeat.round().await.unwrap();
        let written = metrics.last_written();
        assert!(written > 0);
        store.fail_next("put", HEARTBEAT_KEY);
        assert!(heartbeat.round().await.is_err());
        assert_eq!(
            metrics.last_written(),
            written,
            "the failed round changed nothing"
        );
    }
}
