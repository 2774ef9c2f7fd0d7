//! [`CloudProblems`]: the cloud calls that failed with [`Trouble`] and have
//! not succeeded since, for `/readyz`. Kept by operation: a later success of
//! the same operation clears its problems (a permission granted again, a
//! provider healthy again); one not seen again for [`CloudProblems::WINDOW`]
//! is dropped (the node it hit may be gone). Fed by `LimitedCloud` with
//! each call's final outcome, retries done.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use ipam_cloud::{CloudError, Operation};
use tokio::time::Instant;

use crate::trouble::Trouble;

/// One current problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub trouble: Trouble,
    pub operation: Operation,
    /// Failures since it was first seen (or last cleared).
    pub count: u64,
    /// How long ago the last one was.
    pub ago: Duration,
    /// The last error, as logged.
    pub message: String,
}

impl Problem {
    /// The `/readyz` line: `CloudUnauthorized: assign-ips failed 3 times,
    /// last 12s ago: <error>`.
    pub fn line(&self) -> String {
        let times = match self.count {
            1 => "once".to_string(),
            n => format!("{n} times"),
        };
        format!(
            "{}: {} failed {times}, last {}s ago: {}",
            self.trouble.reason(),
            self.operation,
            self.ago.as_secs(),
            self.message
        )
    }
}

#[derive(Debug, Clone)]
struct Seen {
    count: u64,
    last: Instant,
    message: String,
}

#[derive(Debug, Default)]
pub struct CloudProblems(Mutex<BTreeMap<(Trouble, Operation), Seen>>);

impl CloudProblems {
    /// How long a problem not seen again stays current.
    pub const WINDOW: Duration = Duration::from_secs(600);

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(Trouble, Operation), Seen>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A call of `operation` ended with `error` at `now`.
    pub fn failed(&self, operation: Operation, error: &CloudError, now: Instant) {
        let Some(trouble) = Trouble::of(error) else {
            return;
        };
        let mut seen = self.lock();
        let entry = seen.entry((trouble, operation)).or_insert(Seen {
            count: 0,
            last: now,
            message: String::new(),
        });
        entry.count += 1;
        entry.last = now;
        entry.message = error.to_string();
    }

    /// A call of `operation` succeeded: its problems are over.
    pub fn succeeded(&self, operation: Operation) {
        let mut seen = self.lock();
        if !seen.is_empty() {
            seen.retain(|(_, op), _| *op != operation);
        }
    }

    /// The problems current at `now`, by trouble then operation.
    pub fn current(&self, now: Instant) -> Vec<Problem> {
        let mut seen = self.lock();
        seen.retain(|_, s| now.saturating_duration_since(s.last) < Self::WINDOW);
        seen.iter()
            .map(|(&(trouble, operation), s)| Problem {
                trouble,
                operation,
                count: s.count,
                ago: now.saturating_duration_since(s.last),
                message: s.message.clone(),
            })
            .collect()
    }

    /// The current problems as `/readyz` lines.
    pub fn lines(&self, now: Instant) -> Vec<String> {
        self.current(now).iter().map(Problem::line).collect()
    }

    /// The cloud refuses the credentials: why, if it does now.
    pub fn unauthorized(&self, now: Instant) -> Option<String> {
        self.current(now)
            .into_iter()
            .find(|p| p.trouble == Trouble::Unauthorized)
            .map(|p| p.line())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_cloud::ProviderError;

    fn error(e: ProviderError) -> CloudError {
        CloudError::Provider {
            provider: "aws".into(),
            error: e,
        }
    }

    #[test]
    fn a_problem_lasts_until_its_operation_succeeds_or_it_is_not_seen_again() {
        let problems = CloudProblems::default();
        let t0 = Instant::now();
        let denied = error(ProviderError::Unauthorized("not allowed".into()));
        problems.failed(Operation::AssignIps, &denied, t0);
        problems.failed(Operation::AssignIps, &denied, t0 + Duration::from_secs(5));
        problems.failed(
            Operation::UnassignIps,
            &error(ProviderError::Throttled(Duration::from_secs(1))),
            t0,
        );
        problems.failed(
            Operation::GetVpcs,
            &error(ProviderError::SubnetFull("s".into())),
            t0,
        );
        let now = t0 + Duration::from_secs(17);
        assert_eq!(
            problems.lines(now),
            [
                "CloudUnauthorized: assign-ips failed 2 times, last 12s ago: \
                 provider aws: unauthorized: not allowed",
                "Throttled: unassign-ips failed once, last 17s ago: \
                 provider aws: throttled (retry after 1s)",
            ],
            "a full subnet is no problem of the set-up"
        );
        assert!(problems.unauthorized(now).is_some());
        problems.succeeded(Operation::GetVpcs);
        assert_eq!(
            problems.current(now).len(),
            2,
            "another operation's success"
        );
        problems.succeeded(Operation::AssignIps);
        assert_eq!(problems.unauthorized(now), None, "granted again");
        assert_eq!(problems.current(now).len(), 1);
        assert!(
            problems.current(t0 + CloudProblems::WINDOW).is_empty(),
            "not seen again for the window"
        );
    }
}
