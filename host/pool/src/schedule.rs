//! Which node the engine works on next, as plain data: nodes in deficit
//! first, the largest deficit first (ties by name, so runs repeat); a node is
//! never worked on twice at once (a change while it runs queues it again);
//! nodes can be put off until a time (release delay, a blocked node); a node
//! whose pass failed is held until its backoff ends, whatever marks it
//! meanwhile (a watch event, its own publish), and queued then. Requests for
//! a node that come while it waits are folded into its next run, which says
//! how many it answers and how long the first waited (Cilium's trigger
//! metrics). Time is a parameter: the engine passes its clock's instants
//! (tokio's, paused in simulations).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet};

use std::time::Instant;

#[derive(Debug, Default)]
pub struct Schedule {
    /// Ready now, best first.
    queue: BTreeSet<(Reverse<u32>, String)>,
    /// The deficit each known node was queued with.
    deficit: HashMap<String, u32>,
    running: HashSet<String>,
    /// Changed while running: queue again when done.
    again: HashSet<String>,
    timers: BTreeSet<(Instant, String)>,
    timer_of: HashMap<String, Instant>,
    /// Backing off after a failure: not queued before this instant.
    holds: BTreeSet<(Instant, String)>,
    hold_of: HashMap<String, Instant>,
    /// Requests not yet answered by a run, per node.
    requests: HashMap<String, Requests>,
    /// Every request made so far.
    requests_made: u64,
}

/// The requests one run of a node answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requests {
    /// How many were folded into the run.
    pub count: u32,
    /// When the first of them was made.
    pub first: Instant,
}

impl Schedule {
    pub fn new() -> Self {
        Self::default()
    }

    /// The node changed (or must be looked at): queue it with its deficit,
    /// once its backoff (if any) is over.
    pub fn mark(&mut self, name: &str, deficit: u32) {
        if let Some(old) = self.deficit.insert(name.to_string(), deficit) {
            self.queue.remove(&(Reverse(old), name.to_string()));
        }
        // A held node is queued when its hold ends, with the deficit it has
        // then.
        if self.hold_of.contains_key(name) {
            return;
        }
        if self.running.contains(name) {
            self.again.insert(name.to_string());
        } else {
            self.queue.insert((Reverse(deficit), name.to_string()));
        }
    }

    /// [`Schedule::mark`], counted as a request made at `at`: folded with
    /// the others not yet answered into the node's next run.
    pub fn request(&mut self, name: &str, deficit: u32, at: Instant) {
        self.requests_made += 1;
        self.requests
            .entry(name.to_string())
            .and_modify(|r| {
                r.count = r.count.saturating_add(1);
                r.first = r.first.min(at);
            })
            .or_insert(Requests {
                count: 1,
                first: at,
            });
        self.mark(name, deficit);
    }

    /// The requests the run of `name` just started answers (taken: the
    /// next run answers the requests made from now on). None for a run
    /// queued by [`Schedule::mark`] alone.
    pub fn take_requests(&mut self, name: &str) -> Option<Requests> {
        self.requests.remove(name)
    }

    /// Requests made since the schedule was created.
    pub fn requests_made(&self) -> u64 {
        self.requests_made
    }

    /// A pass of the node failed: hold it until `until` (a later hold
    /// replaces an earlier one), then queue it.
    pub fn back_off(&mut self, name: &str, until: Instant) {
        if let Some(old) = self.hold_of.insert(name.to_string(), until) {
            self.holds.remove(&(old, name.to_string()));
        }
        self.holds.insert((until, name.to_string()));
        self.again.remove(name);
        if let Some(&deficit) = self.deficit.get(name) {
            self.queue.remove(&(Reverse(deficit), name.to_string()));
        }
    }

    /// Look at the node again at `at` (the earlier of two requests wins).
    pub fn revisit(&mut self, name: &str, at: Instant) {
        if let Some(&old) = self.timer_of.get(name) {
            if old <= at {
                return;
            }
            self.timers.remove(&(old, name.to_string()));
        }
        self.timer_of.insert(name.to_string(), at);
        self.timers.insert((at, name.to_string()));
    }

    /// Queue every node whose time has come.
    pub fn due(&mut self, now: Instant) {
        while let Some((until, name)) = self.holds.first().cloned() {
            if until > now {
                break;
            }
            self.holds.pop_first();
            self.hold_of.remove(&name);
            let deficit = self.deficit.get(&name).copied().unwrap_or(0);
            self.request(&name, deficit, until);
        }
        while let Some((at, name)) = self.timers.first().cloned() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            self.timer_of.remove(&name);
            let deficit = self.deficit.get(&name).copied().unwrap_or(0);
            self.request(&name, deficit, at);
        }
    }

    /// When the next put-off or held node is due.
    pub fn next_timer(&self) -> Option<Instant> {
        let timer = self.timers.first().map(|(at, _)| *at);
        let hold = self.holds.first().map(|(until, _)| *until);
        timer.into_iter().chain(hold).min()
    }

    /// The next node to work on, now counted as running.
    pub fn start_next(&mut self) -> Option<String> {
        let (_, name) = self.queue.pop_first()?;
        self.running.insert(name.clone());
        Some(name)
    }

    /// Work on the node ended; `deficit` is what it still needs.
    pub fn done(&mut self, name: &str, deficit: u32) {
        self.running.remove(name);
        if self.again.remove(name) {
            self.mark(name, deficit);
        } else {
            self.deficit.insert(name.to_string(), deficit);
        }
    }

    /// The node is gone.
    pub fn forget(&mut self, name: &str) {
        if let Some(d) = self.deficit.remove(name) {
            self.queue.remove(&(Reverse(d), name.to_string()));
        }
        if let Some(at) = self.timer_of.remove(name) {
            self.timers.remove(&(at, name.to_string()));
        }
        if let Some(until) = self.hold_of.remove(name) {
            self.holds.remove(&(until, name.to_string()));
        }
        self.again.remove(name);
        self.requests.remove(name);
    }

    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn largest_deficit_first_ties_by_name() {
        let mut s = Schedule::new();
        s.mark("b", 3);
        s.mark("a", 3);
        s.mark("c", 10);
        s.mark("d", 0);
        let order: Vec<String> = std::iter::from_fn(|| s.start_next()).collect();
        assert_eq!(order, ["c", "a", "b", "d"]);
    }

    #[test]
    fn a_node_changed_while_running_runs_again_after() {
        let mut s = Schedule::new();
        s.mark("a", 5);
        assert_eq!(s.start_next().as_deref(), Some("a"));
        s.mark("a", 5);
        assert_eq!(s.start_next(), None, "never twice at once");
        s.done("a", 1);
        assert_eq!(s.start_next().as_deref(), Some("a"));
        s.done("a", 0);
        assert_eq!(s.start_next(), None);
    }

    #[test]
    fn remarking_moves_a_node_to_its_new_place() {
        let mut s = Schedule::new();
        s.mark("a", 1);
        s.mark("b", 2);
        s.mark("a", 9);
        assert_eq!(s.queued(), 2);
        assert_eq!(s.start_next().as_deref(), Some("a"));
    }

    #[test]
    fn a_timer_is_due_at_its_own_instant_and_running_nodes_are_counted() {
        let mut s = Schedule::new();
        let t0 = Instant::now();
        s.revisit("a", t0);
        s.due(t0);
        assert_eq!(s.queued(), 1, "due at exactly its time");
        assert_eq!(s.running(), 0);
        assert_eq!(s.start_next().as_deref(), Some("a"));
        s.mark("b", 1);
        assert_eq!(s.start_next().as_deref(), Some("b"));
        assert_eq!(s.running(), 2);
        s.done("a", 0);
        assert_eq!(s.running(), 1);
    }

    #[test]
    fn a_backed_off_node_waits_out_its_hold_whatever_marks_it() {
        let mut s = Schedule::new();
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(4);
        s.mark("a", 5);
        assert_eq!(s.start_next().as_deref(), Some("a"));
        // Its own publish is seen while the failing pass runs.
        s.mark("a", 5);
        s.done("a", 5);
        s.back_off("a", until);
        assert_eq!(s.start_next(), None, "not again at once");
        // A watch event, a release recheck due early: still held.
        s.mark("a", 7);
        s.revisit("a", t0 + Duration::from_secs(1));
        s.due(t0 + Duration::from_secs(1));
        assert_eq!(s.start_next(), None, "held until its backoff ends");
        assert_eq!(s.next_timer(), Some(until));
        s.due(until);
        assert_eq!(s.start_next().as_deref(), Some("a"), "queued when it ends");
        s.done("a", 0);
        s.mark("a", 1);
        assert_eq!(s.start_next().as_deref(), Some("a"), "a success clears it");
    }

    #[test]
    fn a_forgotten_node_loses_its_hold() {
        let mut s = Schedule::new();
        let t0 = Instant::now();
        s.mark("a", 1);
        s.back_off("a", t0 + Duration::from_secs(2));
        s.forget("a");
        s.due(t0 + Duration::from_secs(3));
        assert_eq!(s.start_next(), None);
        assert_eq!(s.next_timer(), None);
    }

    #[test]
    fn timers_queue_nodes_when_due_earliest_request_wins() {
        let mut s = Schedule::new();
        let t0 = Instant::now();
        s.revisit("a", t0 + Duration::from_secs(10));
        s.revisit("a", t0 + Duration::from_secs(30));
        s.revisit("b", t0 + Duration::from_secs(20));
        assert_eq!(s.next_timer(), Some(t0 + Duration::from_secs(10)));
        s.due(t0 + Duration::from_secs(15));
        assert_eq!(s.start_next().as_deref(), Some("a"));
        assert_eq!(s.start_next(), None);
        s.forget("b");
        s.due(t0 + Duration::from_secs(60));
        assert_eq!(s.start_next(), None, "forgotten nodes never come back");
    }

    #[test]
    fn requests_made_while_a_node_waits_or_runs_fold_into_its_next_run() {
        let mut s = Schedule::new();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        s.request("a", 5, t1);
        s.request("a", 6, t0);
        assert_eq!(s.start_next().as_deref(), Some("a"));
        assert_eq!(
            s.take_requests("a"),
            Some(Requests {
                count: 2,
                first: t0
            }),
            "two requests, waiting since the earlier"
        );
        assert_eq!(s.take_requests("a"), None, "taken once");
        // Requested again while running: answered by the run after.
        let t2 = t0 + Duration::from_secs(2);
        s.request("a", 3, t2);
        s.done("a", 3);
        assert_eq!(s.start_next().as_deref(), Some("a"));
        assert_eq!(
            s.take_requests("a"),
            Some(Requests {
                count: 1,
                first: t2
            })
        );
        s.done("a", 0);
        // A timer coming due is a request made at its own instant.
        let t9 = t0 + Duration::from_secs(9);
        s.revisit("a", t9);
        s.due(t9 + Duration::from_secs(1));
        assert_eq!(s.start_next().as_deref(), Some("a"));
        assert_eq!(
            s.take_requests("a"),
            Some(Requests {
                count: 1,
                first: t9
            })
        );
        // A plain mark is no request.
        s.done("a", 0);
        s.mark("a", 9);
        assert_eq!(s.start_next().as_deref(), Some("a"));
        assert_eq!(s.take_requests("a"), None);
        s.request("b", 1, t9);
        s.forget("b");
        assert_eq!(s.take_requests("b"), None, "a forgotten node's requests go");
        assert_eq!(s.requests_made(), 5);
    }
}
