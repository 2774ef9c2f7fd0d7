//! The operator's HTTP endpoints (`ipam-health-http`): `/healthz`,
//! `/readyz` (the start-up steps still waited for, then ready as the
//! operator defines it, see `crate::startup` and `ipam_k8s::operator`),
//! `/metrics` (the engine's registry, the duties', the start-up steps' and
//! the process's own metrics, OpenMetrics text).

use std::sync::Arc;

use ipam_duty::DutyMetrics;
use ipam_engine::Metrics;
use ipam_health_http::startup::Startup;
use ipam_health_http::{Endpoints, Readiness};
use prometheus_client::registry::Registry;

use crate::startup::StartStep;

pub use ipam_health_http::serve;

/// The operator's endpoints: the engine's metrics, then the duties' and
/// the start-up's (`cilium_operator_startup_step{step, state}`).
pub fn endpoints(
    readiness: Readiness,
    metrics: Arc<Metrics>,
    duties: &DutyMetrics,
    startup: &Startup<StartStep>,
) -> Endpoints {
    let mut duty_registry = Registry::default();
    duties.register(&mut duty_registry);
    startup.register(&mut duty_registry, "cilium_operator_startup_step");
    let duty_registry = Arc::new(duty_registry);
    Endpoints::with_readiness(
        readiness,
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
        let duties = DutyMetrics::new();
        duties.round("heartbeat", std::time::Duration::from_millis(3), 0, false);
        let startup = Startup::<StartStep>::default();
        startup.off(StartStep::Etcd);
        let text = endpoints(
            Arc::new(|| None),
            Arc::new(Metrics::new()),
            &duties,
            &startup,
        )
        .metrics_text();
        assert!(
            text.contains("# TYPE cilium_operator_ipam_resync counter"),
            "{text}"
        );
        assert!(
            text.contains("cilium_operator_duty_runs_total{duty=\"heartbeat\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("cilium_operator_startup_step{step=\"etcd\",state=\"off\"} 1"),
            "{text}"
        );
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
