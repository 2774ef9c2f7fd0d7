//! The per-call budget of what a guest writes to the host's log through the
//! `host.log` import: at most [`LINES_PER_CALL`] lines and
//! [`BYTES_PER_CALL`] bytes a call, each line cut at [`LINE_BYTES`]. What
//! is over is dropped and counted, and the call's end writes one line with
//! the count (and tells the provider's [`crate::BudgetSink`]), so a guest
//! cannot fill the host's disk or hold its log writer.

use std::borrow::Cow;

use crate::guest_text;

/// Lines one call may log.
pub const LINES_PER_CALL: u32 = 256;
/// Bytes (of lines as cut) one call may log.
pub const BYTES_PER_CALL: usize = 256 * 1024;
/// The most of one line that is logged.
pub const LINE_BYTES: usize = 4 * 1024;

/// What the current call has logged so far, and dropped.
#[derive(Debug, Default)]
pub struct LogBudget {
    lines: u32,
    bytes: usize,
    dropped: u64,
}

impl LogBudget {
    /// The line to log, cut, or `None` once the call's budget is spent (the
    /// line is then counted as dropped).
    pub fn admit<'a>(&mut self, line: &'a str) -> Option<Cow<'a, str>> {
        let line = guest_text::cut(line, LINE_BYTES);
        if self.lines >= LINES_PER_CALL || self.bytes + line.len() > BYTES_PER_CALL {
            self.dropped += 1;
            return None;
        }
        self.lines += 1;
        self.bytes += line.len();
        Some(line)
    }

    /// The call ended: how many of its lines were dropped; the next call
    /// starts with the whole budget.
    pub fn end_call(&mut self) -> u64 {
        std::mem::take(self).dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_past_the_count_are_dropped_and_counted_until_the_call_ends() {
        let mut budget = LogBudget::default();
        for _ in 0..LINES_PER_CALL {
            assert_eq!(budget.admit("a line").as_deref(), Some("a line"));
        }
        assert_eq!(budget.admit("one too many"), None);
        assert_eq!(budget.admit("two"), None);
        assert_eq!(budget.end_call(), 2);
        assert!(budget.admit("the next call logs again").is_some());
        assert_eq!(budget.end_call(), 0);
    }

    #[test]
    fn long_lines_are_cut_and_count_as_cut_against_the_bytes() {
        let mut budget = LogBudget::default();
        let long = "x".repeat(1 << 20);
        let per_line = budget.admit(&long).expect("the first line is logged").len();
        assert!(per_line < LINE_BYTES + 32, "{per_line}");
        let mut logged = 1;
        while budget.admit(&long).is_some() {
            logged += 1;
        }
        assert_eq!(logged, BYTES_PER_CALL / per_line);
        assert_eq!(budget.end_call(), 1);
    }
}
