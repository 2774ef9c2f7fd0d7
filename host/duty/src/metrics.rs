//! Each duty's rounds as Prometheus metrics, labelled by duty.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DutyLabel {
    /// `heartbeat`, `lock-sweeper`, `identity-gc`, `services-store`,
    /// `nodes-store`, `endpoint-gc`.
    pub duty: &'static str,
}

type HistogramFamily = Family<DutyLabel, Histogram, fn() -> Histogram>;

fn round_seconds() -> Histogram {
    // 1 ms .. ~65 s: a heartbeat write up to a GC round over 100,000 keys.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// `cilium_operator_duty_*`: rounds run, failed, what they deleted, and how
/// long they took.
pub struct DutyMetrics {
    runs: Family<DutyLabel, Counter>,
    failures: Family<DutyLabel, Counter>,
    deletions: Family<DutyLabel, Counter>,
    duration: HistogramFamily,
}

impl Default for DutyMetrics {
    fn default() -> Self {
        Self {
            runs: Family::default(),
            failures: Family::default(),
            deletions: Family::default(),
            duration: Family::new_with_constructor(round_seconds),
        }
    }
}

impl DutyMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add the families to `registry` (prefix `cilium_operator_duty`).
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("cilium_operator_duty");
        registry.register(
            "runs",
            "Rounds of each duty, failed or not",
            self.runs.clone(),
        );
        registry.register(
            "failures",
            "Rounds of each duty that failed",
            self.failures.clone(),
        );
        registry.register(
            "deletions",
            "Keys or objects each duty deleted",
            self.deletions.clone(),
        );
        registry.register(
            "duration_seconds",
            "How long each round of each duty took",
            self.duration.clone(),
        );
    }

    /// One round of `duty`: how long it took, what it deleted, whether it
    /// failed.
    pub fn round(&self, duty: &'static str, took: Duration, deletions: u64, failed: bool) {
        let label = DutyLabel { duty };
        self.runs.get_or_create(&label).inc();
        if failed {
            self.failures.get_or_create(&label).inc();
        }
        self.deletions.get_or_create(&label).inc_by(deletions);
        self.duration
            .get_or_create(&label)
            .observe(took.as_secs_f64());
    }

    pub fn runs(&self, duty: &'static str) -> u64 {
        self.runs.get_or_create(&DutyLabel { duty }).get()
    }

    pub fn failures(&self, duty: &'static str) -> u64 {
        self.failures.get_or_create(&DutyLabel { duty }).get()
    }

    pub fn deletions(&self, duty: &'static str) -> u64 {
        self.deletions.get_or_create(&DutyLabel { duty }).get()
    }
}
