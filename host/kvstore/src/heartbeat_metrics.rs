//! When the heartbeat was last written, as a Prometheus gauge, so an alert
//! computes its age (`time() - cilium_operator_kvstore_heartbeat_timestamp_seconds`)
//! and sees a heartbeat that stopped before cilium-agents call the kvstore
//! unhealthy.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `cilium_operator_kvstore_heartbeat_timestamp_seconds`: 0 until this
/// replica first writes the heartbeat.
#[derive(Debug, Default)]
pub struct HeartbeatMetrics {
    written: Gauge,
}

impl HeartbeatMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add the gauge to `registry` (prefix `cilium_operator_kvstore`).
    pub fn register(&self, registry: &mut Registry) {
        registry
            .sub_registry_with_prefix("cilium_operator_kvstore")
            .register(
                "heartbeat_timestamp_seconds",
                "Unix time of the last kvstore heartbeat this replica wrote successfully (0: none yet)",
                self.written.clone(),
            );
    }

    /// A heartbeat holding `at` was written.
    pub fn written(&self, at: jiff::Timestamp) {
        self.written.set(at.as_second());
    }

    /// Unix seconds of the last heartbeat written, 0 for none.
    pub fn last_written(&self) -> i64 {
        self.written.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauge_holds_the_last_heartbeat_s_unix_time() {
        let metrics = HeartbeatMetrics::new();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let page = |registry: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
            text
        };
        assert!(page(&registry)
            .lines()
            .any(|l| l == "cilium_operator_kvstore_heartbeat_timestamp_seconds 0"));
        let at: jiff::Timestamp = "2026-11-25T08:30:05Z".parse().unwrap();
        metrics.written(at);
        assert_eq!(metrics.last_written(), 1_795_595_405);
        let text = page(&registry);
        assert!(
            text.lines()
                .any(|l| l == "cilium_operator_kvstore_heartbeat_timestamp_seconds 1795595405"),
            "{text}"
        );
    }
}
