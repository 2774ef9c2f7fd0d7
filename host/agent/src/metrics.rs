//! The agent's metrics (`ipam_agent_*`): CNI requests by command and result
//! with their latency, addresses given out and freed, the handshake answers,
//! what each restore kept and freed, status patches, and the pool's size;
//! where the agent's conflist stands and the SNAT table's ranges;
//! with a datapath, its counters summed over endpoints (read from the maps
//! at scrape time) and the maps it re-created.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ipam_datapath::{DropReason, EndpointCounters};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandResult {
    pub command: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Command {
    pub command: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabel {
    pub reason: &'static str,
}

/// Where the datapath's counters come from, once it is loaded.
pub trait DatapathTotals: Send + Sync {
    /// Every endpoint's counters summed; an error leaves them out of the
    /// scrape.
    fn totals(&self) -> Result<EndpointCounters, String>;
}

/// Reads the datapath's counters at scrape time: nothing before the
/// datapath is loaded, or without one.
#[derive(Clone, Default)]
struct DatapathCollector {
    source: Arc<OnceLock<Arc<dyn DatapathTotals>>>,
}

impl std::fmt::Debug for DatapathCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatapathCollector")
            .field("loaded", &self.source.get().is_some())
            .finish()
    }
}

impl Collector for DatapathCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(source) = self.source.get() else {
            return Ok(());
        };
        let totals = match source.totals() {
            Ok(totals) => totals,
            Err(error) => {
                tracing::warn!(%error, "reading the datapath's counters");
                return Ok(());
            }
        };
        for (name, help, value) in [
            (
                "datapath_packets",
                "Packets the datapath passed from pods, all endpoints summed",
                totals.packets,
            ),
            (
                "datapath_bytes",
                "Bytes the datapath passed from pods, all endpoints summed",
                totals.bytes,
            ),
        ] {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(value).encode(metric)?;
        }
        let mut drops = encoder.encode_descriptor(
            "datapath_drops",
            "Packets the datapath dropped from pods, by reason, all endpoints summed",
            None,
            MetricType::Counter,
        )?;
        for reason in DropReason::ALL {
            let label = DropLabel {
                reason: reason.name(),
            };
            ConstCounter::new(totals.dropped(reason)).encode(drops.encode_family(&label)?)?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Answer {
    pub answer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Result_ {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct State {
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RangeKind {
    pub kind: &'static str,
}

fn latency_buckets() -> Histogram {
    // 100 µs to about 1.6 s.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.0001, 2.0, 15,
    ))
}

pub struct AgentMetrics {
    registry: Registry,
    cni_requests: Family<CommandResult, Counter>,
    cni_duration: Family<Command, Histogram, fn() -> Histogram>,
    allocations: Counter,
    releases: Family<Reason, Counter>,
    answers: Family<Answer, Counter>,
    restores: Family<Outcome, Counter>,
    patches: Family<Result_, Counter>,
    allocated: Gauge,
    pool: Gauge,
    maps_recreated: Counter,
    datapath: DatapathCollector,
    cni_conflist: Family<State, Gauge>,
    snat_ranges: Family<RangeKind, Gauge>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("ipam_agent");
        let cni_requests = Family::<CommandResult, Counter>::default();
        registry.register(
            "cni_requests",
            "CNI requests answered, by command and result (ok or the CNI error code)",
            cni_requests.clone(),
        );
        let cni_duration: Family<Command, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_buckets);
        registry.register(
            "cni_request_duration_seconds",
            "Time from a CNI request read to its answer written, by command",
            cni_duration.clone(),
        );
        let allocations = Counter::default();
        registry.register(
            "allocations",
            "Addresses given to pods (a retried ADD of the same attachment not counted)",
            allocations.clone(),
        );
        let releases = Family::<Reason, Counter>::default();
        registry.register(
            "releases",
            "Addresses freed, by reason (del, gc, pod-gone at restore)",
            releases.clone(),
        );
        let answers = Family::<Answer, Counter>::default();
        registry.register(
            "handshake_answers",
            "Release handshake answers published, by answer",
            answers.clone(),
        );
        let restores = Family::<Outcome, Counter>::default();
        registry.register(
            "restored_allocations",
            "Saved allocations judged at start-up, by outcome (kept, freed, outside-pool)",
            restores.clone(),
        );
        let patches = Family::<Result_, Counter>::default();
        registry.register(
            "status_patches",
            "Merge patches of the CiliumNode's status.ipam, by result",
            patches.clone(),
        );
        let allocated = Gauge::default();
        registry.register(
            "allocated_addresses",
            "Addresses held by pods now",
            allocated.clone(),
        );
        let pool = Gauge::default();
        registry.register(
            "pool_addresses",
            "Addresses in the node's spec.ipam.pool",
            pool.clone(),
        );
        let maps_recreated = Counter::default();
        registry.register(
            "datapath_maps_recreated",
            "Pinned datapath maps found with another layout at start-up and re-created empty",
            maps_recreated.clone(),
        );
        let datapath = DatapathCollector::default();
        registry.register_collector(Box::new(datapath.clone()));
        let cni_conflist = Family::<State, Gauge>::default();
        registry.register(
            "cni_conflist",
            "1 for where the agent's conflist stands (installed, other_network: another network's \
             configuration is there and take-over is off, not_first: take-over on but its name does \
             not sort first, failed), 0 for the others; none without --cni-conflist",
            cni_conflist.clone(),
        );
        let snat_ranges = Family::<RangeKind, Gauge>::default();
        registry.register(
            "snat_ranges",
            "Ranges in the SNAT table: masqueraded (the VPC's, as sources) and kept (destinations \
             that keep the pod's address)",
            snat_ranges.clone(),
        );
        Self {
            registry,
            cni_requests,
            cni_duration,
            allocations,
            releases,
            answers,
            restores,
            patches,
            allocated,
            pool,
            maps_recreated,
            datapath,
            cni_conflist,
            snat_ranges,
        }
    }

    /// Where the conflist stands: `state` 1, every other state 0.
    pub fn cni_conflist(&self, state: &'static str) {
        for known in crate::cni_conf_plan::STATES {
            self.cni_conflist
                .get_or_create(&State { state: known })
                .set(i64::from(*known == state));
        }
    }

    pub fn snat_ranges(&self, masqueraded: usize, kept: usize) {
        for (kind, count) in [("masqueraded", masqueraded), ("kept", kept)] {
            self.snat_ranges
                .get_or_create(&RangeKind { kind })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn cni_request(&self, command: &'static str, result: &'static str, took: Duration) {
        self.cni_requests
            .get_or_create(&CommandResult { command, result })
            .inc();
        self.cni_duration
            .get_or_create(&Command { command })
            .observe(took.as_secs_f64());
    }

    pub fn allocated(&self) {
        self.allocations.inc();
    }

    pub fn released(&self, reason: &'static str, count: usize) {
        self.releases
            .get_or_create(&Reason { reason })
            .inc_by(count as u64);
    }

    pub fn answered(&self, answer: &str) {
        self.answers
            .get_or_create(&Answer {
                answer: answer.to_string(),
            })
            .inc();
    }

    pub fn restored(&self, outcome: &'static str, count: usize) {
        self.restores
            .get_or_create(&Outcome { outcome })
            .inc_by(count as u64);
    }

    pub fn patched(&self, result: &'static str) {
        self.patches.get_or_create(&Result_ { result }).inc();
    }

    pub fn maps_recreated(&self, count: usize) {
        self.maps_recreated.inc_by(count as u64);
    }

    /// From now on every scrape reads the datapath's counters from `source`
    /// (the first one set stays).
    pub fn datapath_loaded(&self, source: Arc<dyn DatapathTotals>) {
        let _ = self.datapath.source.set(source);
    }

    pub fn sizes(&self, allocated: usize, pool: usize) {
        self.allocated
            .set(i64::try_from(allocated).unwrap_or(i64::MAX));
        self.pool.set(i64::try_from(pool).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_datapath::Verdict;

    struct Fixed(Result<EndpointCounters, String>);

    impl DatapathTotals for Fixed {
        fn totals(&self) -> Result<EndpointCounters, String> {
            self.0.clone()
        }
    }

    fn page(metrics: &AgentMetrics) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, metrics.registry()).unwrap();
        text
    }

    #[test]
    fn datapath_counters_are_read_at_scrape_time_once_loaded() {
        let metrics = AgentMetrics::new();
        let before = page(&metrics);
        assert!(!before.contains("datapath_packets"), "{before}");
        assert!(
            before.contains("ipam_agent_datapath_maps_recreated_total 0"),
            "{before}"
        );

        let mut totals = EndpointCounters::ZERO;
        totals.record(Verdict::Pass, 100);
        totals.record(Verdict::Pass, 60);
        totals.record(Verdict::Drop(DropReason::UnknownSource), 60);
        metrics.datapath_loaded(Arc::new(Fixed(Ok(totals))));
        metrics.maps_recreated(1);
        let after = page(&metrics);
        for line in [
            "ipam_agent_datapath_packets_total 2",
            "ipam_agent_datapath_bytes_total 160",
            r#"ipam_agent_datapath_drops_total{reason="unknown_source"} 1"#,
            r#"ipam_agent_datapath_drops_total{reason="malformed"} 0"#,
            "ipam_agent_datapath_maps_recreated_total 1",
        ] {
            assert!(after.lines().any(|l| l == line), "{line} in\n{after}");
        }

        let failing = AgentMetrics::new();
        failing.datapath_loaded(Arc::new(Fixed(Err("map gone".into()))));
        let text = page(&failing);
        assert!(
            !text.contains("datapath_packets") && text.contains("ipam_agent_allocations_total"),
            "a failed read leaves the datapath out, the rest in: {text}"
        );
    }
}
