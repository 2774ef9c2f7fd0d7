//! The operator's HTTP endpoints (`ipam-health-http`): `/healthz`,
//! `/readyz` (the start-up steps still waited for, then ready as the
//! operator defines it, see `crate::startup` and `ipam_k8s::operator`),
//! `/metrics` (the engine's registry, the duties', the start-up steps', the
//! leader's, the kvstore heartbeat's when it runs, and the process's own
//! metrics, OpenMetrics text).

use std::sync::Arc;

use ipam_duty::DutyMetrics;
use ipam_engine::Metrics;
use ipam_health_http::startup::Startup;
use ipam_health_http::{Endpoints, Readiness};
use ipam_k8s::leader_metrics::LeaderMetrics;
use ipam_kvstore::heartbeat_metrics::HeartbeatMetrics;
use prometheus_client::registry::Registry;

use crate::startup::StartStep;

pub use ipam_health_http::serve;

/// The operator's endpoints: the engine's metrics, then the duties', the
/// start-up's (`cilium_operator_startup_step{step, state}`), the leader's
/// (`cilium_operator_leader*`) and, given only when the heartbeat duty is
/// on, the heartbeat's (`cilium_operator_kvstore_heartbeat_timestamp_seconds`).
pub fn endpoints(
    readiness: Readiness,
    metrics: Arc<Metrics>,
    duties: &DutyMetrics,
    startup: &Startup<StartStep>,
    leader: &LeaderMetrics,
    heartbeat: Option<&HeartbeatMetrics>,
) -> Endpoints {
    let mut duty_registry = Registry::default();
    duties.register(&mut duty_registry);
    startup.register(&mut duty_registry, "cilium_operator_startup_step");
    leader.register(&mut duty_registry);
    if let Some(heartbeat) = heartbeat {
        heartbeat.register(&mut duty_registry);
    }
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
        let leader = LeaderMetrics::new();
        leader.leading(true);
        let heartbeat = HeartbeatMetrics::new();
        let page = |heartbeat: Option<&HeartbeatMetrics>| {
            endpoints(
                Arc::new(|| None),
                Arc::new(Metrics::new()),
                &duties,
                &startup,
                &leader,
                heartbeat,
            )
            .metrics_text()
        };
        let text = page(Some(&heartbeat));
        for line in [
            "cilium_operator_leader 1",
            "cilium_operator_leader_transitions_total 1",
            "cilium_operator_kvstore_heartbeat_timestamp_seconds 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
        assert!(
            !page(None).contains("cilium_operator_kvstore_heartbeat"),
            "no heartbeat gauge without the heartbeat duty"
        );
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
