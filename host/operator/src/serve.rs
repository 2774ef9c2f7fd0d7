//! The operator's HTTP endpoints (`ipam-health-http`): `/healthz`,
//! `/readyz` (ready as the operator defines it, see `ipam_k8s::operator`),
//! `/metrics` (the engine's registry, the duties' and the process's own
//! metrics, OpenMetrics text).

use std::sync::Arc;

use ipam_duty::DutyMetrics;
use ipam_engine::Metrics;
use ipam_health_http::Endpoints;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

pub use ipam_health_http::serve;

/// The operator's endpoints: the engine's metrics, then the duties'.
pub fn endpoints(
    ready: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
    duties: &DutyMetrics,
) -> Endpoints {
    let mut duty_registry = Registry::default();
    duties.register(&mut duty_registry);
    let duty_registry = Arc::new(duty_registry);
    Endpoints::new(
        ready,
        Arc::new(move |text: &mut String| {
            // Writing into a String cannot fail.
            let _ = prometheus_client::encoding::text::encode_registry(text, metrics.registry());
            let _ = prometheus_client::encoding::text::encode_registry(text, &duty_registry);
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_page_holds_the_engine_the_duties_and_the_process() {
        let (_ready_tx, ready) = watch::channel(true);
        let duties = DutyMetrics::new();
        duties.round("heartbeat", std::time::Duration::from_millis(3), 0, false);
        let text = endpoints(ready, Arc::new(Metrics::new()), &duties).metrics_text();
        assert!(
            text.contains("# TYPE cilium_operator_ipam_resync counter"),
            "{text}"
        );
        assert!(
            text.contains("cilium_operator_duty_runs_total{duty=\"heartbeat\"} 1"),
            "{text}"
        );
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
