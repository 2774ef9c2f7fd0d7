//! Whether this replica leads, as Prometheus metrics: a gauge that follows
//! the lease and a counter of its changes, so an alert sees a cluster with
//! no leader (every replica's gauge at 0) or one whose leader keeps
//! changing.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `cilium_operator_leader` and `cilium_operator_leader_transitions_total`.
#[derive(Debug, Default)]
pub struct LeaderMetrics {
    leader: Gauge,
    transitions: Counter,
}

impl LeaderMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add both to `registry` (prefix `cilium_operator`).
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("cilium_operator");
        registry.register(
            "leader",
            "1 while this replica leads (holds the lease, or runs without leader election), 0 otherwise",
            self.leader.clone(),
        );
        registry.register(
            "leader_transitions",
            "Times this replica became the leader or stopped being it",
            self.transitions.clone(),
        );
    }

    /// This replica leads now, or not; a change is counted once.
    pub fn leading(&self, leading: bool) {
        let before = self.leader.set(i64::from(leading));
        if (before != 0) != leading {
            self.transitions.inc();
        }
    }

    pub fn is_leading(&self) -> bool {
        self.leader.get() != 0
    }

    pub fn transitions(&self) -> u64 {
        self.transitions.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(metrics: &LeaderMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn each_change_of_leadership_is_counted_once() {
        let metrics = LeaderMetrics::new();
        let text = page(&metrics);
        assert!(
            text.lines().any(|l| l == "cilium_operator_leader 0"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == "cilium_operator_leader_transitions_total 0"),
            "{text}"
        );
        metrics.leading(false);
        assert_eq!(metrics.transitions(), 0, "a follower from the start");
        metrics.leading(true);
        metrics.leading(true);
        assert!(metrics.is_leading());
        assert_eq!(metrics.transitions(), 1, "renewals are no transitions");
        metrics.leading(false);
        assert_eq!((metrics.is_leading(), metrics.transitions()), (false, 2));
        metrics.leading(true);
        let text = page(&metrics);
        assert!(
            text.lines().any(|l| l == "cilium_operator_leader 1"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == "cilium_operator_leader_transitions_total 3"),
            "{text}"
        );
    }
}
