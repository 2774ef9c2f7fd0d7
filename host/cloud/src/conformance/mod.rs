//! The conformance suite: checks any [`CloudApi`] (a provider component, or
//! anything else behind the trait) against the contract in
//! `wit/0.2.0/provider.wit`: the shapes and invariants of every answer
//! (the boundary checks of `crate::answer` among them), a whole rate model,
//! idempotence where the WIT promises it, and typed errors for impossible
//! requests. Mutating checks run only for the capabilities a provider declares,
//! on one instance with room for an interface, and undo what they create; a
//! check of a declared capability that cannot run (nothing to run it on, or
//! an earlier step failed) is listed as not run, with the reason.

mod mutating;
mod reading;

use std::fmt;

use crate::CloudApi;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail(String),
    /// The check does not apply: the provider does not declare its
    /// capability.
    NotApplicable(String),
    /// The check belongs to a declared capability but could not run (nothing
    /// to run it on, or an earlier step failed): the capability is untested.
    NotRun(String),
}

#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Default)]
pub struct Report {
    pub provider: String,
    pub checks: Vec<Check>,
}

impl Report {
    pub fn count(&self, pred: impl Fn(&Outcome) -> bool) -> usize {
        self.checks.iter().filter(|c| pred(&c.outcome)).count()
    }

    pub fn passed(&self) -> usize {
        self.count(|o| *o == Outcome::Pass)
    }

    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Fail(_)))
    }

    pub fn not_applicable(&self) -> usize {
        self.count(|o| matches!(o, Outcome::NotApplicable(_)))
    }

    pub fn not_run(&self) -> usize {
        self.count(|o| matches!(o, Outcome::NotRun(_)))
    }

    pub fn failures(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.checks.iter().filter_map(|c| match &c.outcome {
            Outcome::Fail(why) => Some((c.name, why.as_str())),
            _ => None,
        })
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Pass => write!(f, "  pass  {}", self.name),
            Outcome::Fail(why) => write!(f, "  FAIL  {}: {why}", self.name),
            Outcome::NotApplicable(why) => write!(f, "  n/a   {}: {why}", self.name),
            Outcome::NotRun(why) => write!(f, "  NOT RUN {}: {why}", self.name),
        }
    }
}

/// Collects outcomes and shows each as it comes, so a slow provider shows
/// progress.
pub(crate) struct Recorder<'a> {
    report: Report,
    progress: &'a mut dyn FnMut(&Check),
}

impl Recorder<'_> {
    pub fn record(&mut self, name: &'static str, result: Result<(), String>) {
        let outcome = match result {
            Ok(()) => Outcome::Pass,
            Err(why) => Outcome::Fail(why),
        };
        self.push(Check { name, outcome });
    }

    pub fn not_applicable(&mut self, name: &'static str, why: impl Into<String>) {
        self.push(Check {
            name,
            outcome: Outcome::NotApplicable(why.into()),
        });
    }

    pub fn not_run(&mut self, name: &'static str, why: impl Into<String>) {
        self.push(Check {
            name,
            outcome: Outcome::NotRun(why.into()),
        });
    }

    fn push(&mut self, check: Check) {
        (self.progress)(&check);
        self.report.checks.push(check);
    }
}

/// Run every check against `cloud`; `progress` sees each outcome as it lands.
pub async fn run(cloud: &dyn CloudApi, progress: &mut dyn FnMut(&Check)) -> Report {
    let provider = cloud.info().name.clone();
    let mut recorder = Recorder {
        report: Report {
            provider,
            checks: Vec::new(),
        },
        progress,
    };
    let snapshot = reading::run(cloud, &mut recorder).await;
    match snapshot {
        Some(snapshot) => mutating::run(cloud, &snapshot, &mut recorder).await,
        None => {
            let caps = cloud.info().capabilities;
            for name in mutating::declared_checks(caps) {
                recorder.not_run(name, "the read checks could not list the cloud");
            }
        }
    }
    recorder.report
}
