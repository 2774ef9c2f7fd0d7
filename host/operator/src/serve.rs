//! The operator's HTTP endpoints (`ipam-health-http`): `/healthz`,
//! `/readyz` (the start-up steps still waited for, then ready as the
//! operator defines it, see `crate::startup` and `ipam_k8s::operator`; the
//! cloud trouble of the last ten minutes listed below the verdict either
//! way), `/metrics` (the engine's registry, the duties', the start-up
//! steps', the leader's, the kvstore heartbeat's when it runs, and the
//! process's own metrics, in the Prometheus text format 0.0.4 as Cilium's
//! operator serves it, Cilium's counters without `_total` under their bare
//! names).

use std::sync::Arc;

use ipam_duty::DutyMetrics;
use ipam_engine::metrics::COUNTERS_WITHOUT_TOTAL;
use ipam_engine::{CloudProblems, Metrics};
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
/// on, the heartbeat's (`cilium_operator_kvstore_heartbeat_timestamp_seconds`);
/// `/readyz` lists `problems`.
pub fn endpoints(
    readiness: Readiness,
    problems: Arc<CloudProblems>,
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
    .with_bare_counters(COUNTERS_WITHOUT_TOTAL)
    .with_problems(Arc::new(move || {
        problems.lines(tokio::time::Instant::now())
    }))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use ipam_engine::metrics::{
        step_type, CategoryLabel, DurationLabel, NodeLabel, SubnetLabel, SubnetZoneLabel, TypeLabel,
    };
    use ipam_tests::cilium_metrics::{
        differences, CILIUM_OPERATOR_EC2, CILIUM_OPERATOR_IPAM, NOT_EXPORTED,
    };

    fn page_with(metrics: Metrics, heartbeat: Option<&HeartbeatMetrics>) -> String {
        let duties = DutyMetrics::new();
        duties.round("heartbeat", Duration::from_millis(3), 0, false);
        let startup = Startup::<StartStep>::default();
        startup.off(StartStep::Etcd);
        let leader = LeaderMetrics::new();
        leader.leading(true);
        endpoints(
            Arc::new(|| None),
            Arc::new(CloudProblems::default()),
            Arc::new(metrics),
            &duties,
            &startup,
            &leader,
            heartbeat,
        )
        .metrics_text()
    }

    fn page(metrics: Metrics) -> String {
        page_with(metrics, None)
    }

    #[test]
    fn the_page_says_who_leads_and_the_heartbeat_only_with_its_duty() {
        let heartbeat = HeartbeatMetrics::new();
        let text = page_with(Metrics::new(), Some(&heartbeat));
        for line in [
            "cilium_operator_leader 1",
            "cilium_operator_leader_transitions_total 1",
            "cilium_operator_kvstore_heartbeat_timestamp_seconds 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
        assert!(
            !page(Metrics::new()).contains("cilium_operator_kvstore_heartbeat"),
            "no heartbeat gauge without the heartbeat duty"
        );
    }

    /// Every family with a sample, as a running operator has them.
    fn every_family_observed() -> Metrics {
        let m = Metrics::with_cloud_api("ec2");
        let node = NodeLabel {
            target_node: "n1".into(),
        };
        let subnet = SubnetLabel {
            subnet_id: "subnet-1".into(),
        };
        m.available_ips.get_or_create(&node).set(27);
        m.used_ips.get_or_create(&node).set(3);
        m.needed_ips.get_or_create(&node).set(0);
        m.ips.get_or_create(&TypeLabel { r#type: "used" }).set(3);
        m.nodes
            .get_or_create(&CategoryLabel { category: "total" })
            .set(1);
        m.available_ips_per_subnet
            .get_or_create(&SubnetZoneLabel {
                subnet_id: "subnet-1".into(),
                availability_zone: "zone-a".into(),
            })
            .set(200);
        m.ip_allocation_ops.get_or_create(&subnet).inc_by(8);
        m.ip_release_ops.get_or_create(&subnet).inc_by(2);
        m.interface_creation_ops.get_or_create(&subnet).inc();
        for (family, kind) in [
            (&m.allocation_duration_seconds, step_type::ALLOCATE_IP),
            (&m.release_duration_seconds, step_type::RELEASE_IP),
        ] {
            family
                .get_or_create(&DurationLabel {
                    r#type: kind,
                    status: "success",
                    subnet_id: "subnet-1".into(),
                })
                .observe(0.2);
        }
        m.resync_total.inc();
        for trigger in [&m.deficit_resolver, &m.k8s_sync, &m.resync] {
            trigger.queued.inc();
            trigger.ran(Duration::from_millis(20), Duration::from_millis(5), 1);
        }
        let cloud_api = m.cloud_api.as_ref().expect("ec2");
        cloud_api.observe_call("AssignPrivateIpAddresses", true, Duration::from_millis(40));
        cloud_api.observe_wait("AssignPrivateIpAddresses", Duration::from_millis(9));
        m
    }

    #[test]
    fn the_metrics_page_has_every_family_of_ciliums_operator_as_cilium_names_it() {
        let text = page(every_family_observed());
        let missing = differences(&text, CILIUM_OPERATOR_IPAM, NOT_EXPORTED);
        assert!(missing.is_empty(), "{missing:#?}\n{text}");
        let missing = differences(&text, CILIUM_OPERATOR_EC2, &[]);
        assert!(missing.is_empty(), "{missing:#?}\n{text}");
        for exact in [
            "# TYPE cilium_operator_ipam_ip_allocation_ops counter\n\
             cilium_operator_ipam_ip_allocation_ops{subnet_id=\"subnet-1\"} 8\n",
            "# TYPE cilium_operator_ipam_ip_release_ops counter\n\
             cilium_operator_ipam_ip_release_ops{subnet_id=\"subnet-1\"} 2\n",
            "# TYPE cilium_operator_ipam_interface_creation_ops counter\n\
             cilium_operator_ipam_interface_creation_ops{subnet_id=\"subnet-1\"} 1\n",
            "# TYPE cilium_operator_ipam_resync_total counter\n\
             cilium_operator_ipam_resync_total 1\n",
            "# TYPE cilium_operator_ipam_deficit_resolver_queued_total counter\n\
             cilium_operator_ipam_deficit_resolver_queued_total 1\n",
            "# TYPE cilium_operator_ipam_interface_deletion_ops_total counter\n\
             cilium_operator_ipam_interface_deletion_ops_total 0\n",
            "cilium_operator_duty_runs_total{duty=\"heartbeat\"} 1\n",
            "cilium_operator_startup_step{step=\"etcd\",state=\"off\"} 1\n",
            "cilium_operator_ec2_api_duration_seconds_count{operation=\"AssignPrivateIpAddresses\",response_code=\"OK\"} 1\n",
        ] {
            assert!(text.contains(exact), "{exact:?} in\n{text}");
        }
        for cilium in COUNTERS_WITHOUT_TOTAL {
            assert!(!text.contains(&format!("{cilium}_total")), "{text}");
        }
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
        assert!(!text.contains("# EOF"), "{text}");
        assert!(!text.contains("# UNIT"), "{text}");
    }

    #[test]
    fn without_a_named_cloud_there_is_no_cloud_api_family() {
        let text = page(Metrics::new());
        assert!(text.contains("# TYPE cilium_operator_ipam_resync_total counter"));
        assert!(!text.contains("cilium_operator_ec2_"));
        assert!(!text.contains("cilium_operator_azure_"));
    }
}
