//! Cilium's trigger metrics (`cilium_operator_ipam_<trigger>_{queued_total,
//! folds,duration_seconds,latency_seconds}`): Cilium's operator folds the
//! requests for a piece of work into one run of a trigger. The engine's
//! equivalents say what a request and a run are (docs/metrics.md).

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::CILIUM_BUCKETS;

/// One trigger's four figures; a figure the engine cannot give a true
/// meaning is left out rather than exported as a constant.
#[derive(Clone)]
pub struct TriggerMetrics {
    /// Requests made.
    pub queued: Counter,
    /// Requests the last run answered.
    pub folds: Option<Gauge>,
    /// How long runs took.
    pub duration_seconds: Histogram,
    /// How long a run's first request waited for the run to start.
    pub latency_seconds: Option<Histogram>,
}

/// Which of the optional figures a trigger has.
#[derive(Clone, Copy)]
pub(crate) struct Figures {
    pub folds: bool,
    pub latency: bool,
}

impl TriggerMetrics {
    pub(crate) fn new(figures: Figures) -> Self {
        let histogram = || Histogram::new(CILIUM_BUCKETS);
        Self {
            queued: Counter::default(),
            folds: figures.folds.then(Gauge::default),
            duration_seconds: histogram(),
            latency_seconds: figures.latency.then(histogram),
        }
    }

    /// Register as `<name>_queued_total`, `<name>_folds`,
    /// `<name>_duration_seconds`, `<name>_latency_seconds`.
    pub(crate) fn register(&self, registry: &mut Registry, name: &str) {
        registry.register(
            format!("{name}_queued"),
            "Number of queued triggers",
            self.queued.clone(),
        );
        if let Some(folds) = &self.folds {
            registry.register(
                format!("{name}_folds"),
                "Current level of folding",
                folds.clone(),
            );
        }
        registry.register(
            format!("{name}_duration_seconds"),
            "Duration of trigger runs",
            self.duration_seconds.clone(),
        );
        if let Some(latency) = &self.latency_seconds {
            registry.register(
                format!("{name}_latency_seconds"),
                "Latency between queue and trigger run",
                latency.clone(),
            );
        }
    }

    /// A run answering `folds` requests, the first of which waited
    /// `latency` for it, took `took`.
    pub fn ran(&self, took: Duration, latency: Duration, folds: u32) {
        self.duration_seconds.observe(took.as_secs_f64());
        if let Some(histogram) = &self.latency_seconds {
            histogram.observe(latency.as_secs_f64());
        }
        if let Some(gauge) = &self.folds {
            gauge.set(i64::from(folds));
        }
    }
}
