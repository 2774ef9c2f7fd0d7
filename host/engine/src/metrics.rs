//! The engine's Prometheus registry. Every `cilium_operator_ipam_*` series
//! Cilium's operator exports in ENI and Azure mode is here under Cilium's
//! name, type and labels (`pkg/ipam/metrics`), with Cilium's meaning where
//! the engine has one (docs/metrics.md says how each maps), so dashboards
//! and alerts written for cilium-operator keep working; so are Cilium's
//! cloud API families (`cilium_operator_ec2_api_*`, `..._azure_api_*`) for
//! the cloud the operator is told it runs on. Beyond Cilium's: the
//! provider-neutral `cilium_operator_ipam_api_*`, interface deletions and
//! the provider runtime's refusals and budgets.
//!
//! prometheus-client's OpenMetrics text names a counter's samples
//! `<family>_total`; `/metrics` is served as Prometheus text 0.0.4 (as
//! Cilium's promhttp handler serves it), where the families in
//! [`COUNTERS_WITHOUT_TOTAL`] keep Cilium's bare names.

mod cloud_api;
mod labels;
mod trigger;

use std::time::Duration;

use ipam_cloud::answer::{BadField, RefusalSink};
use ipam_cloud::Operation;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub use cloud_api::{operation_labels, CloudApiMetrics};
pub use labels::{
    ApiCallLabel, BudgetLabel, CategoryLabel, CloudCallLabel, CloudOperationLabel, DurationLabel,
    ManagerLabel, NodeLabel, OperationLabel, ProviderLabel, RefusalLabel, SubnetLabel,
    SubnetZoneLabel, TypeLabel,
};
pub use trigger::TriggerMetrics;

/// Cilium's counters whose names do not end in `_total`: served under
/// these names (no `_total` added), as Cilium's Go client serves them.
pub const COUNTERS_WITHOUT_TOTAL: &[&str] = &[
    "cilium_operator_ipam_ip_allocation_ops",
    "cilium_operator_ipam_ip_release_ops",
    "cilium_operator_ipam_interface_creation_ops",
];

/// Cilium's `type` values of allocations and releases (`pkg/ipam/node.go`).
pub mod step_type {
    pub const ALLOCATE_IP: &str = "allocateIP";
    pub const CREATE_INTERFACE_AND_ALLOCATE_IP: &str = "createInterfaceAndAllocateIP";
    pub const RELEASE_IP: &str = "releaseIP";
    /// An interface freed whole: beyond Cilium's, which frees none.
    pub const DELETE_INTERFACE: &str = "deleteInterface";
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Cilium's buckets for cloud API calls and trigger runs, in seconds.
const CILIUM_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

fn seconds_histogram() -> Histogram {
    // 1 ms .. ~33 s: cloud calls, and waits for a rate limit.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

fn histogram_family<L: Clone + std::hash::Hash + Eq>() -> HistogramFamily<L> {
    Family::new_with_constructor(seconds_histogram)
}

/// Cilium's buckets for allocations and releases: 0, 0.25, 0.5, then
/// every second to a minute.
fn step_histogram() -> Histogram {
    let linear = [0.0, 0.25, 0.5].into_iter();
    Histogram::new(linear.chain((1..=60).map(f64::from)))
}

fn step_family() -> HistogramFamily<DurationLabel> {
    Family::new_with_constructor(step_histogram)
}

pub struct Metrics {
    registry: Registry,
    /// IPs over all nodes by type: available (in pools, not used), used,
    /// needed.
    pub ips: Family<TypeLabel, Gauge>,
    /// The most pod addresses a node's instance can hold (Cilium: its
    /// capacity).
    pub available_ips: Family<NodeLabel, Gauge>,
    pub used_ips: Family<NodeLabel, Gauge>,
    pub needed_ips: Family<NodeLabel, Gauge>,
    /// Nodes by category: total, in-deficit, at-capacity.
    pub nodes: Family<CategoryLabel, Gauge>,
    pub available_ips_per_subnet: Family<SubnetZoneLabel, Gauge>,
    /// Addresses allocated (a /28 counts its sixteen), by subnet.
    pub ip_allocation_ops: Family<SubnetLabel, Counter>,
    /// Addresses released, by subnet.
    pub ip_release_ops: Family<SubnetLabel, Counter>,
    pub interface_creation_ops: Family<SubnetLabel, Counter>,
    /// Interfaces with room for addresses plus empty interface slots
    /// (Cilium's deprecated sum of the two).
    pub available_interfaces: Gauge,
    /// Attached interfaces with room for more addresses, over all nodes.
    pub interface_candidates: Gauge,
    /// Interfaces that could still be attached, over all nodes.
    pub empty_interface_slots: Gauge,
    pub allocation_duration_seconds: HistogramFamily<DurationLabel>,
    pub release_duration_seconds: HistogramFamily<DurationLabel>,
    pub resync_total: Counter,
    /// Node passes (Cilium: its per-node pool maintainer).
    pub deficit_resolver: TriggerMetrics,
    /// CiliumNode writes.
    pub k8s_sync: TriggerMetrics,
    /// Full resyncs of the cloud's state.
    pub resync: TriggerMetrics,
    /// Cilium's cloud API families, for the cloud named at construction.
    pub cloud_api: Option<CloudApiMetrics>,
    pub interface_deletion_ops: Counter,
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
    /// Every family but Cilium's cloud API ones.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// [`Metrics::new`] and Cilium's cloud API families under
    /// `cilium_operator_<subsystem>_` (`ec2`, `azure`).
    pub fn with_cloud_api(subsystem: &str) -> Self {
        Self::build(Some(subsystem))
    }

    fn build(cloud_subsystem: Option<&str>) -> Self {
        use trigger::Figures;
        let mut metrics = Self {
            // Filled below, once the families exist to register.
            registry: Registry::default(),
            ips: Family::default(),
            available_ips: Family::default(),
            used_ips: Family::default(),
            needed_ips: Family::default(),
            nodes: Family::default(),
            available_ips_per_subnet: Family::default(),
            ip_allocation_ops: Family::default(),
            ip_release_ops: Family::default(),
            interface_creation_ops: Family::default(),
            available_interfaces: Gauge::default(),
            interface_candidates: Gauge::default(),
            empty_interface_slots: Gauge::default(),
            allocation_duration_seconds: step_family(),
            release_duration_seconds: step_family(),
            resync_total: Counter::default(),
            deficit_resolver: TriggerMetrics::new(Figures {
                folds: true,
                latency: true,
            }),
            // A write answers the one change it was asked for: nothing is
            // folded, so there is no folding level to report.
            k8s_sync: TriggerMetrics::new(Figures {
                folds: false,
                latency: true,
            }),
            resync: TriggerMetrics::new(Figures {
                folds: true,
                latency: true,
            }),
            cloud_api: cloud_subsystem.map(|_| CloudApiMetrics::new()),
            interface_deletion_ops: Counter::default(),
            api_duration_seconds: histogram_family(),
            api_calls: Family::default(),
            api_rate_limit_duration_seconds: histogram_family(),
            api_answers_refused: Family::default(),
            provider_over_budget: Family::default(),
            provider_log_lines_dropped: Family::default(),
            other_writer: Family::default(),
        };
        let mut registry = Registry::with_prefix("cilium_operator");
        metrics.register_ipam(registry.sub_registry_with_prefix("ipam"));
        if let (Some(subsystem), Some(cloud_api)) = (cloud_subsystem, &metrics.cloud_api) {
            cloud_api.register(registry.sub_registry_with_prefix(subsystem));
        }
        metrics.registry = registry;
        metrics
    }

    /// Every `cilium_operator_ipam_*` family, Cilium's then ours.
    fn register_ipam(&self, r: &mut Registry) {
        let m = self;
        r.register(
            "ips",
            "Number of IPs allocated, by type (available, used, needed)",
            m.ips.clone(),
        );
        r.register(
            "available_ips",
            "Total available IPs on Node for IPAM allocation (the most the node's instance can hold)",
            m.available_ips.clone(),
        );
        r.register(
            "used_ips",
            "Total used IPs on Node for IPAM allocation",
            m.used_ips.clone(),
        );
        r.register(
            "needed_ips",
            "Number of IPs that are needed on the Node to satisfy IPAM allocation requests",
            m.needed_ips.clone(),
        );
        r.register(
            "nodes",
            "Number of nodes by category { total | in-deficit | at-capacity }",
            m.nodes.clone(),
        );
        r.register(
            "available_ips_per_subnet",
            "Number of available IPs per subnet ID",
            m.available_ips_per_subnet.clone(),
        );
        r.register(
            "ip_allocation_ops",
            "Number of IP allocation operations",
            m.ip_allocation_ops.clone(),
        );
        r.register(
            "ip_release_ops",
            "Number of IP release operations",
            m.ip_release_ops.clone(),
        );
        r.register(
            "interface_creation_ops",
            "Number of interfaces allocated",
            m.interface_creation_ops.clone(),
        );
        r.register(
            "available_interfaces",
            "Number of interfaces with addresses available (deprecated by Cilium: interface_candidates plus empty_interface_slots)",
            m.available_interfaces.clone(),
        );
        r.register(
            "interface_candidates",
            "Number of attached interfaces with IPs available for allocation",
            m.interface_candidates.clone(),
        );
        r.register(
            "empty_interface_slots",
            "Number of empty interface slots available for interfaces to be attached",
            m.empty_interface_slots.clone(),
        );
        r.register(
            "allocation_duration_seconds",
            "Allocation ip or interface latency in seconds",
            m.allocation_duration_seconds.clone(),
        );
        r.register(
            "release_duration_seconds",
            "Release ip or interface latency in seconds",
            m.release_duration_seconds.clone(),
        );
        r.register(
            "resync",
            "Number of resync operations to synchronize and resolve IP deficit of nodes",
            m.resync_total.clone(),
        );
        m.deficit_resolver.register(r, "deficit_resolver");
        m.k8s_sync.register(r, "k8s_sync");
        m.resync.register(r, "resync");
        r.register(
            "interface_deletion_ops",
            "Interfaces deleted (emptied or leaked)",
            m.interface_deletion_ops.clone(),
        );
        r.register(
            "api_duration_seconds",
            "Duration of provider calls, by operation and response code",
            m.api_duration_seconds.clone(),
        );
        r.register(
            "api_calls",
            "Provider calls, by operation and response code",
            m.api_calls.clone(),
        );
        r.register(
            "api_rate_limit_duration_seconds",
            "Time waited for the cloud's rate limit before a call, by operation",
            m.api_rate_limit_duration_seconds.clone(),
        );
        r.register(
            "api_answers_refused",
            "Provider answers (a listed item, or a whole mutation's answer) refused as \
             malformed or impossible, by provider, operation and problem",
            m.api_answers_refused.clone(),
        );
        r.register(
            "provider_over_budget",
            "Provider calls whose instance went over its host-resource budget (and was \
             replaced), by provider and what was over",
            m.provider_over_budget.clone(),
        );
        r.register(
            "provider_log_lines_dropped",
            "Guest log lines dropped over a provider call's log budget, by provider",
            m.provider_log_lines_dropped.clone(),
        );
        r.register(
            "other_writer",
            "1 while another writer (a field manager, or Cilium's operator through its \
             Lease) changes the CiliumNode fields this operator owns, so it does not write; \
             0 after, by manager",
            m.other_writer.clone(),
        );
    }

    /// The registry, for a server to extend (process metrics) or encode.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// prometheus-client's OpenMetrics text of the registry (counters named
    /// `_total`; `/metrics` serves it as 0.0.4, see the module doc).
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
        metrics
            .deficit_resolver
            .ran(Duration::from_millis(30), Duration::from_millis(10), 3);
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
        assert!(text.contains("cilium_operator_ipam_deficit_resolver_folds 3\n"));
        assert!(text.contains("cilium_operator_ipam_deficit_resolver_latency_seconds_count 1\n"));
        assert!(
            !text.contains("k8s_sync_folds"),
            "a figure without a meaning is not exported"
        );
        assert!(!text.contains("cilium_operator_ec2"), "no cloud named");
        assert_eq!(metrics.api_calls(Operation::AssignIps), 2);
        assert_eq!(metrics.api_calls(Operation::CreateInterface), 0);
    }

    #[test]
    fn the_named_clouds_api_families_are_cilium_operator_subsystem() {
        let metrics = Metrics::with_cloud_api("ec2");
        let cloud_api = metrics.cloud_api.as_ref().expect("asked for");
        cloud_api.observe_call("AssignPrivateIpAddresses", true, Duration::from_millis(3));
        cloud_api.observe_wait("AssignPrivateIpAddresses", Duration::from_millis(3));
        let text = metrics.encode();
        assert!(text.contains(
            "cilium_operator_ec2_api_duration_seconds_count{operation=\"AssignPrivateIpAddresses\",response_code=\"OK\"} 1"
        ), "{text}");
        assert!(text.contains(
            "cilium_operator_ec2_api_rate_limit_duration_seconds_count{operation=\"AssignPrivateIpAddresses\"} 1"
        ));
        assert!(
            text.contains("# TYPE cilium_operator_ipam_resync counter"),
            "the ipam families beside it"
        );
    }
}
