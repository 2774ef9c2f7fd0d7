//! A process's start-up as plain data: each step of a process's own enum
//! has a state (waiting, with what it is doing; done; off; failed, with
//! the error). `/readyz` names the steps still waited for and those that
//! failed; a gauge per step and state shows the same on `/metrics`. The
//! start-up sets the states at its edges, around each slow piece of work.

use std::fmt::{self, Display};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The steps of one process's start-up (an enum of its own).
pub trait Step: Copy + Eq + fmt::Debug + Send + Sync + 'static {
    /// Every step, in start-up order.
    const ALL: &'static [Self];
    /// The step as `/readyz` and the metric's `step` label name it.
    fn name(self) -> &'static str;
}

/// Where one step stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepState {
    /// Not done yet; what it is doing, once it has begun.
    Waiting(Option<String>),
    Done,
    /// Not needed with this configuration (no etcd given, say).
    Off,
    /// Failed, with the error: the process is about to exit.
    Failed(String),
}

impl StepState {
    /// The metric's `state` label.
    pub fn label(&self) -> &'static str {
        match self {
            StepState::Waiting(_) => "waiting",
            StepState::Done => "done",
            StepState::Off => "off",
            StepState::Failed(_) => "failed",
        }
    }

    const LABELS: [&'static str; 4] = ["waiting", "done", "off", "failed"];
}

/// Every step's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartupReport<S: Step> {
    states: Vec<(S, StepState)>,
}

impl<S: Step> Default for StartupReport<S> {
    fn default() -> Self {
        Self {
            states: S::ALL
                .iter()
                .map(|&step| (step, StepState::Waiting(None)))
                .collect(),
        }
    }
}

impl<S: Step> StartupReport<S> {
    pub fn set(&mut self, step: S, state: StepState) {
        match self.states.iter_mut().find(|(s, _)| *s == step) {
            Some((_, slot)) => *slot = state,
            None => self.states.push((step, state)),
        }
    }

    pub fn state(&self, step: S) -> Option<&StepState> {
        self.states
            .iter()
            .find(|(s, _)| *s == step)
            .map(|(_, state)| state)
    }

    /// Every step done or off.
    pub fn complete(&self) -> bool {
        self.states
            .iter()
            .all(|(_, state)| matches!(state, StepState::Done | StepState::Off))
    }

    /// None once complete; else the steps waited for and those that failed,
    /// in start-up order: `waiting: provider module (pulling oci://…),
    /// etcd; failed: -`.
    pub fn pending(&self) -> Option<String> {
        if self.complete() {
            return None;
        }
        let named = |step: S, detail: &Option<String>| match detail {
            Some(detail) => format!("{} ({detail})", step.name()),
            None => step.name().to_string(),
        };
        let waiting: Vec<String> = self
            .states
            .iter()
            .filter_map(|(step, state)| match state {
                StepState::Waiting(detail) => Some(named(*step, detail)),
                _ => None,
            })
            .collect();
        let failed: Vec<String> = self
            .states
            .iter()
            .filter_map(|(step, state)| match state {
                StepState::Failed(error) => Some(named(*step, &Some(error.clone()))),
                _ => None,
            })
            .collect();
        let list = |items: Vec<String>| match items.is_empty() {
            true => "-".to_string(),
            false => items.join(", "),
        };
        Some(format!(
            "waiting: {}; failed: {}",
            list(waiting),
            list(failed)
        ))
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    step: &'static str,
    state: &'static str,
}

/// The start-up report shared between the start-up, which sets it, and the
/// endpoints, which read it.
#[derive(Clone)]
pub struct Startup<S: Step> {
    report: Arc<Mutex<StartupReport<S>>>,
    gauge: Family<StepLabels, Gauge>,
}

impl<S: Step> Default for Startup<S> {
    fn default() -> Self {
        let startup = Self {
            report: Arc::new(Mutex::new(StartupReport::default())),
            gauge: Family::default(),
        };
        for &step in S::ALL {
            startup.show(step, &StepState::Waiting(None));
        }
        startup
    }
}

impl<S: Step> Startup<S> {
    /// Register the gauge as `name` (`name{step, state}`: 1 for the step's
    /// state, 0 for the others).
    pub fn register(&self, registry: &mut Registry, name: &str) {
        registry.register(
            name,
            "Start-up steps: 1 for the state each step is in (waiting, done, off, failed), 0 for the others",
            self.gauge.clone(),
        );
    }

    pub fn set(&self, step: S, state: StepState) {
        self.show(step, &state);
        match &state {
            StepState::Failed(error) => {
                tracing::debug!(step = step.name(), %error, "start-up step failed")
            }
            other => tracing::debug!(step = step.name(), state = other.label(), "start-up step"),
        }
        self.report
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set(step, state);
    }

    pub fn waiting(&self, step: S, doing: impl Into<String>) {
        self.set(step, StepState::Waiting(Some(doing.into())));
    }

    pub fn done(&self, step: S) {
        self.set(step, StepState::Done);
    }

    pub fn off(&self, step: S) {
        self.set(step, StepState::Off);
    }

    /// `work` as `step`, doing `doing`: done on success, failed with the
    /// error's whole chain (`{:#}`) otherwise.
    pub async fn run<T, E: Display>(
        &self,
        step: S,
        doing: impl Into<String>,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        self.waiting(step, doing);
        let result = work.await;
        match &result {
            Ok(_) => self.done(step),
            Err(error) => self.set(step, StepState::Failed(format!("{error:#}"))),
        }
        result
    }

    pub fn report(&self) -> StartupReport<S> {
        self.report
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn show(&self, step: S, state: &StepState) {
        for label in StepState::LABELS {
            let labels = StepLabels {
                step: step.name(),
                state: label,
            };
            self.gauge
                .get_or_create(&labels)
                .set(i64::from(label == state.label()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Demo {
        Module,
        Credentials,
        Etcd,
    }

    impl Step for Demo {
        const ALL: &'static [Self] = &[Demo::Module, Demo::Credentials, Demo::Etcd];
        fn name(self) -> &'static str {
            match self {
                Demo::Module => "provider module",
                Demo::Credentials => "credentials",
                Demo::Etcd => "etcd",
            }
        }
    }

    fn waiting(doing: &str) -> StepState {
        StepState::Waiting(Some(doing.into()))
    }

    #[test]
    fn the_text_names_what_is_waited_for_and_what_failed() {
        use StepState::*;
        let cases: [(&str, [StepState; 3], Option<&str>); 6] = [
            (
                "nothing begun",
                [Waiting(None), Waiting(None), Waiting(None)],
                Some("waiting: provider module, credentials, etcd; failed: -"),
            ),
            (
                "pulling",
                [waiting("pulling oci://r/p@sha256:ab"), Waiting(None), Waiting(None)],
                Some("waiting: provider module (pulling oci://r/p@sha256:ab), credentials, etcd; failed: -"),
            ),
            (
                "etcd off, credentials done",
                [waiting("loading"), Done, Off],
                Some("waiting: provider module (loading); failed: -"),
            ),
            (
                "etcd failed",
                [Done, Done, Failed("connect timed out".into())],
                Some("waiting: -; failed: etcd (connect timed out)"),
            ),
            (
                "both",
                [Done, Waiting(None), Failed("refused".into())],
                Some("waiting: credentials; failed: etcd (refused)"),
            ),
            ("all done or off", [Done, Done, Off], None),
        ];
        for (case, states, want) in cases {
            let mut report = StartupReport::<Demo>::default();
            for (&step, state) in Demo::ALL.iter().zip(states) {
                report.set(step, state);
            }
            assert_eq!(report.pending().as_deref(), want, "{case}");
            assert_eq!(report.complete(), want.is_none(), "{case}");
        }
    }

    #[tokio::test]
    async fn run_marks_the_step_done_or_failed_and_the_gauge_follows() {
        let startup = Startup::<Demo>::default();
        let mut registry = Registry::default();
        startup.register(&mut registry, "demo_startup_step");
        let ok: Result<u8, String> = startup.run(Demo::Module, "loading", async { Ok(1) }).await;
        assert_eq!(ok, Ok(1));
        let failed: Result<(), String> = startup
            .run(Demo::Etcd, "connecting", async {
                Err("refused".to_string())
            })
            .await;
        assert!(failed.is_err());
        let report = startup.report();
        assert_eq!(report.state(Demo::Module), Some(&StepState::Done));
        assert_eq!(
            report.state(Demo::Etcd),
            Some(&StepState::Failed("refused".into()))
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode_registry(&mut text, &registry).unwrap();
        for (line, value) in [
            (
                "demo_startup_step{step=\"provider module\",state=\"done\"}",
                1,
            ),
            (
                "demo_startup_step{step=\"provider module\",state=\"waiting\"}",
                0,
            ),
            (
                "demo_startup_step{step=\"credentials\",state=\"waiting\"}",
                1,
            ),
            ("demo_startup_step{step=\"etcd\",state=\"failed\"}", 1),
        ] {
            assert!(
                text.contains(&format!("{line} {value}\n")),
                "{line}: {text}"
            );
        }
    }
}
