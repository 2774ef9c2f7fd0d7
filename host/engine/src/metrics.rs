//! The engine's Prometheus registry. Names and meanings follow Cilium's
//! `cilium_operator_ipam_*` metrics, so dashboards and alerts written for
//! cilium-operator keep working; the cloud API metrics are provider-neutral
//! (`cilium_operator_ipam_api_*` instead of `cilium_operator_ec2_api_*` or
//! `cilium_operator_azure_api_*`). See docs/metrics.md for the list.

use std::time::Duration;

use ipam_cloud::answer::{BadField, RefusalSink};
use ipam_cloud::Operation;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabel {
    pub r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabel {
    pub target_node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CategoryLabel {
    pub category: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SubnetLabel {
    pub subnet_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SubnetZoneLabel {
    pub subnet_id: String,
    pub availability_zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabel {
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiCallLabel {
    pub operation: &'static str,
    /// `ok`, or the error's kind (`throttled`, `transient`, `timeout`, ...).
    pub response_code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BudgetLabel {
    pub provider: String,
    /// What was over (`entries`, `bytes`, `header-set`).
    pub resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabel {
    pub provider: String,
}

/// A Kubernetes field manager (or `cilium-operator` for Cilium's operator
/// seen through its Lease).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ManagerLabel {
    pub manager: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabel {
    pub provider: String,
    pub operation: &'static str,
    /// What was wrong (`outside-network`, `duplicate-address`, ...).
    pub problem: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabel {
    /// `ip` (assign or unassign) or `interface` (create or delete).
    pub r#type: &'static str,
    pub status: &'static str,
    pub subnet_id: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    // 1 ms .. ~33 s: cloud calls, and waits for a rate limit.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

fn histogram_family<L: Clone + std::hash::Hash + Eq>() -> HistogramFamily<L> {
    Family::new_with_constructor(seconds_histogram)
}

pub struct Metrics {
    registry: Registry,
    /// IPs over all nodes by type: available, used, needed.
    pub ips: Family<TypeLabel, Gauge>,
    pub available_ips: Family<NodeLabel, Gauge>,
    pub used_ips: Family<NodeLabel, Gauge>,
    pub needed_ips: Family<NodeLabel, Gauge>,
    /// Nodes by category: total, in-deficit, at-capacity.
    pub nodes: Family<CategoryLabel, Gauge>,
    pub available_ips_per_subnet: Family<SubnetZoneLabel, Gauge>,
    pub allocation_ops: Family<SubnetLabel, Counter>,
    pub release_ops: Family<SubnetLabel, Counter>,
    pub interface_creation_ops: Family<SubnetLabel, Counter>,
    pub interface_deletion_ops: Counter,
    pub allocation_duration_seconds: HistogramFamily<DurationLabel>,
    pub release_duration_seconds: HistogramFamily<DurationLabel>,
    pub resync_total: Counter,
    pub api_duration_seconds: HistogramFamily<ApiCallLabel>,
    pub api_calls: Family<ApiCallLabel, Counter>,
    pub api_rate_limit_duration_seconds: HistogramFamily<OperationLabel>,
    pub api_answers_refused: Family<RefusalLabel, Counter>,
    pub provider_over_budget: Family<BudgetLabel, Counter>,
    pub provider_log_lines_dropped: Family<ProviderLabel, Counter>,
    /// 1 while another writer of the operator's CiliumNode fields is seen
    /// (and the engine does not write), 0 after.
    pub other_writer: Family<ManagerLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("cilium_operator_ipam"),
            ips: Family::default(),
            available_ips: Family::default(),
            used_ips: Family::default(),
            needed_ips: Family::default(),
            nodes: Family::default(),
            available_ips_per_subnet: Family::default(),
            allocation_ops: Family::default(),
            release_ops: Family::default(),
            interface_creation_ops: Family::default(),
            interface_deletion_ops: Counter::default(),
            allocation_duration_seconds: histogram_family(),
            release_duration_seconds: histogram_family(),
            resync_total: Counter::default(),
            api_duration_seconds: histogram_family(),
            api_calls: Family::default(),
            api_rate_limit_duration_seconds: histogram_family(),
            api_answers_refused: Family::default(),
            provider_over_budget: Family::default(),
            provider_log_lines_dropped: Family::default(),
            other_writer: Family::default(),
        };
        let r = &mut metrics.registry;
        r.register(
            "ips",
            "IPs over all nodes, by type (available, used, needed)",
            metrics.ips.clone(),
        );
        r.register(
            "available_ips",
            "IPs available on a node",
            metrics.available_ips.clone(),
        );
        r.register("used_ips", "IPs used on a node", metrics.used_ips.clone());
        r.register(
            "needed_ips",
            "IPs a node still needs to reach its watermark",
            metrics.needed_ips.clone(),
        );
        r.register(
            "nodes",
            "Nodes by category (total, in-deficit, at-capacity)",
            metrics.nodes.clone(),
        );
        r.register(
            "available_ips_per_subnet",
            "Free addresses per subnet, as the cloud last reported",
            metrics.available_ips_per_subnet.clone(),
        );
        r.register(
            "allocation_ops",
            "IP allocation operations, by subnet",
            metrics.allocation_ops.clone(),
        );
        r.register(
            "release_ops",
            "IP release operations, by subnet",
            metrics.release_ops.clone(),
        );
        r.register(
            "interface_creation_ops",
            "Interfaces created, by subnet",
            metrics.interface_creation_ops.clone(),
        );
        r.register(
            "interface_deletion_ops",
            "Interfaces deleted (emptied or leaked)",
            metrics.interface_deletion_ops.clone(),
        );
        r.register(
            "allocation_duration_seconds",
            "Duration of allocations (type ip or interface), by status and subnet",
            metrics.allocation_duration_seconds.clone(),
        );
        r.register(
            "release_duration_seconds",
            "Duration of releases (type ip or interface), by status and subnet",
            metrics.release_duration_seconds.clone(),
        );
        r.register(
            "resync",
            "Full resyncs of the cloud's state",
            metrics.resync_total.clone(),
        );
        r.register(
            "api_duration_seconds",
            "Duration of provider calls, by operation and response code",
            metrics.api_duration_seconds.clone(),
        );
        r.register(
            "api_calls",
            "Provider calls, by operation and response code",
            metrics.api_calls.clone(),
        );
        r.register(
            "api_rate_limit_duration_seconds",
            "Time waited for the cloud's rate limit before a call, by operation",
            metrics.api_rate_limit_duration_seconds.clone(),
        );
        r.register(
            "api_answers_refused",
            "Provider answers (a listed item, or a whole mutation's answer) refused as \
             malformed or impossible, by provider, operation and problem",
            metrics.api_answers_refused.clone(),
        );
        r.register(
            "provider_over_budget",
            "Provider calls whose instance went over its host-resource budget (and was \
             replaced), by provider and what was over",
            metrics.provider_over_budget.clone(),
        );
        r.register(
            "provider_log_lines_dropped",
            "Guest log lines dropped over a provider call's log budget, by provider",
            metrics.provider_log_lines_dropped.clone(),
        );
        r.register(
            "other_writer",
            "1 while another writer (a field manager, or Cilium's operator through its \
             Lease) changes the CiliumNode fields this operator owns, so it does not write; \
             0 after, by manager",
            metrics.other_writer.clone(),
        );
        metrics
    }

    /// The registry, for a server to extend (process metrics) or encode.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    pub fn observe_api_call(
        &self,
        operation: Operation,
        response_code: &'static str,
        took: Duration,
    ) {
        let label = ApiCallLabel {
            operation: operation.wit_name(),
            response_code,
        };
        self.api_duration_seconds
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        self.api_calls.get_or_create(&label).inc();
    }

    pub fn observe_rate_limit_wait(&self, operation: Operation, waited: Duration) {
        self.api_rate_limit_duration_seconds
            .get_or_create(&OperationLabel {
                operation: operation.wit_name(),
            })
            .observe(waited.as_secs_f64());
    }

    /// Calls made of one operation with one response code.
    pub fn api_calls_with(&self, operation: Operation, response_code: &'static str) -> u64 {
        self.api_calls
            .get(&ApiCallLabel {
                operation: operation.wit_name(),
                response_code,
            })
            .map_or(0, |c| c.get())
    }

    /// Calls made of one operation, every response code counted.
    pub fn api_calls(&self, operation: Operation) -> u64 {
        ipam_cloud::RESPONSE_CODES
            .iter()
            .map(|&response_code| self.api_calls_with(operation, response_code))
            .sum()
    }
}

impl RefusalSink for Metrics {
    fn refused(&self, provider: &str, operation: Operation, bad: &BadField) {
        self.api_answers_refused
            .get_or_create(&RefusalLabel {
                provider: provider.to_string(),
                operation: operation.wit_name(),
                problem: bad.problem.label(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_cilium_names() {
        let metrics = Metrics::new();
        metrics
            .ips
            .get_or_create(&TypeLabel { r#type: "used" })
            .set(3);
        metrics
            .interface_creation_ops
            .get_or_create(&SubnetLabel {
                subnet_id: "subnet-a".into(),
            })
            .inc();
        metrics.observe_api_call(Operation::AssignIps, "ok", Duration::from_millis(3));
        metrics.observe_api_call(Operation::AssignIps, "throttled", Duration::from_millis(1));
        let text = metrics.encode();
        assert!(
            text.contains("cilium_operator_ipam_ips{type=\"used\"} 3"),
            "{text}"
        );
        assert!(text.contains(
            "cilium_operator_ipam_interface_creation_ops_total{subnet_id=\"subnet-a\"} 1"
        ));
        assert!(text.contains(
            "cilium_operator_ipam_api_duration_seconds_count{operation=\"assign-ips\",response_code=\"ok\"} 1"
        ));
        assert_eq!(metrics.api_calls(Operation::AssignIps), 2);
        assert_eq!(metrics.api_calls(Operation::CreateInterface), 0);
    }
}
