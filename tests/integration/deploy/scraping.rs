//! With `serviceMonitor.enabled`, the node agents are scraped too: they have
//! no Service (each serves its own node on the host network), so the chart
//! adds a PodMonitor over the agents' pods on their metrics port, only when
//! the agent is deployed.

use super::{find, get, helm_template_with};

#[test]
fn the_agents_get_a_pod_monitor_beside_the_operator_s_service_monitor() {
    let monitors = |set: &str| {
        helm_template_with(&[], &["--set", set])
            .into_iter()
            .filter(|o| get(o, "kind").as_str() == Some("PodMonitor"))
            .count()
    };
    assert_eq!(
        monitors("serviceMonitor.enabled=false,cilium.agent=false,agent.enabled=true"),
        0
    );
    assert_eq!(
        monitors("serviceMonitor.enabled=true"),
        0,
        "no agent, no PodMonitor"
    );
    let objects = helm_template_with(
        &[],
        &[
            "--set",
            "serviceMonitor.enabled=true,serviceMonitor.interval=15s,cilium.agent=false,agent.enabled=true",
        ],
    );
    let monitor = find(&objects, "PodMonitor", "ipam-agent");
    let daemonset = find(&objects, "DaemonSet", "ipam-agent");
    assert_eq!(
        get(monitor, "spec.selector.matchLabels"),
        get(daemonset, "spec.selector.matchLabels"),
        "the agents' pods"
    );
    assert_eq!(
        get(monitor, "spec.podMetricsEndpoints.0.port").as_str(),
        get(daemonset, "spec.template.spec.containers.0.ports.0.name").as_str(),
        "their metrics port"
    );
    assert_eq!(
        get(monitor, "spec.podMetricsEndpoints.0.interval").as_str(),
        Some("15s")
    );
    assert_eq!(
        get(monitor, "metadata.namespace").as_str(),
        Some("kube-system")
    );
}
