//! Throttling told at info level without flooding the log: per operation,
//! the first throttled call is told at once, then at most one line a
//! [`PERIOD`] sums up the throttled calls since the last line and the time
//! waited after them ("throttled 12 times in the last 60 s, waited 9.4 s").
//! Plain data; the caller passes the time and logs the lines.

use std::collections::BTreeMap;
use std::time::Duration;

use ipam_cloud::Operation;
use tokio::time::Instant;

/// The least time between two lines of one operation.
pub const PERIOD: Duration = Duration::from_secs(60);

/// One line to log.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub operation: Operation,
    /// Throttled calls since the last line.
    pub count: u64,
    /// Backoff slept after them before retrying.
    pub waited: Duration,
    /// From the first of them to now.
    pub over: Duration,
}

impl Summary {
    pub fn message(&self) -> String {
        let times = match self.count {
            1 => "once".to_string(),
            n => format!("{n} times"),
        };
        format!(
            "throttled {times} in the last {} s, waited {:.1} s",
            self.over.as_secs().max(1),
            self.waited.as_secs_f64()
        )
    }
}

#[derive(Debug, Default)]
struct Pending {
    count: u64,
    waited: Duration,
    first: Option<Instant>,
    last_line: Option<Instant>,
}

#[derive(Debug, Default)]
pub struct ThrottleLog(BTreeMap<Operation, Pending>);

impl ThrottleLog {
    /// A call of `operation` was throttled at `now`, and `waited` is slept
    /// before it is retried (zero when it is not); the line to log, if one
    /// is due.
    pub fn throttled(
        &mut self,
        operation: Operation,
        waited: Duration,
        now: Instant,
    ) -> Option<Summary> {
        let pending = self.0.entry(operation).or_default();
        pending.count += 1;
        pending.waited += waited;
        pending.first.get_or_insert(now);
        Self::due(operation, pending, now)
    }

    /// A call of `operation` ended otherwise at `now`: the line summing up
    /// its throttling, if one is due.
    pub fn settled(&mut self, operation: Operation, now: Instant) -> Option<Summary> {
        let pending = self.0.get_mut(&operation)?;
        Self::due(operation, pending, now)
    }

    fn due(operation: Operation, pending: &mut Pending, now: Instant) -> Option<Summary> {
        let quiet = pending
            .last_line
            .is_none_or(|at| now.saturating_duration_since(at) >= PERIOD);
        if pending.count == 0 || !quiet {
            return None;
        }
        let summary = Summary {
            operation,
            count: pending.count,
            waited: pending.waited,
            over: pending
                .first
                .map_or(Duration::ZERO, |first| now.saturating_duration_since(first)),
        };
        *pending = Pending {
            last_line: Some(now),
            ..Pending::default()
        };
        Some(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn the_first_is_told_at_once_then_one_line_a_minute_sums_up_the_rest() {
        let mut log = ThrottleLog::default();
        let t0 = Instant::now();
        let op = Operation::AssignIps;
        let first = log.throttled(op, S, t0).expect("told at once");
        assert_eq!(
            first.message(),
            "throttled once in the last 1 s, waited 1.0 s"
        );
        for n in 1..=11 {
            assert_eq!(
                log.throttled(op, S / 2, t0 + S * n),
                None,
                "within the minute"
            );
        }
        assert_eq!(
            log.throttled(Operation::UnassignIps, S, t0 + S * 2)
                .map(|s| s.count),
            Some(1),
            "each operation has its own minute"
        );
        assert_eq!(log.settled(op, t0 + S * 30), None, "not a minute yet");
        let line = log
            .settled(op, t0 + S * 61)
            .expect("a minute after the first line");
        assert_eq!(
            line,
            Summary {
                operation: op,
                count: 11,
                waited: S * 11 / 2,
                over: S * 60,
            }
        );
        assert_eq!(
            line.message(),
            "throttled 11 times in the last 60 s, waited 5.5 s"
        );
        assert_eq!(log.settled(op, t0 + S * 200), None, "nothing since");
        assert!(
            log.throttled(op, Duration::ZERO, t0 + S * 201).is_some(),
            "quiet for a minute: told at once again"
        );
    }
}
