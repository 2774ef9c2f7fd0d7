//! The excess-IP release handshake of CiliumNode status.ipam.release-ips, as
//! one pure step (Cilium's pkg/ipam/node.go handleIPRelease):
//! - the operator marks an address that has been excess and unused for the
//!   release delay: `marked-for-release`;
//! - the agent answers `ready-for-release` or `do-not-release`;
//! - the operator unassigns ready addresses from the cloud and sets `released`;
//!   the agent then drops the entry once the address left its pool;
//! - an address that stops being excess is unmarked (from any state but
//!   `released`), and `do-not-release` forgets the address, so that it must
//!   wait out the delay again before it is marked again;
//! - a `released` address back in the pool (the cloud handed it out again
//!   before the agent dropped the entry) is unmarked: that release is over,
//!   and the address is a new one for pods. Left in place, the entry would
//!   keep the agent from using it and the operator from releasing it, for
//!   ever.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ipam_ciliumnode::{AllocationIp, ReleaseState};

#[derive(Debug, Clone, Copy)]
pub struct HandshakeInput<'a> {
    /// Excess, unused addresses chosen for release this round.
    pub candidates: &'a BTreeSet<String>,
    /// status.ipam.release-ips as the CiliumNode has it now.
    pub status: &'a BTreeMap<String, ReleaseState>,
    /// The node's pool as the cloud gives it now.
    pub pool: &'a BTreeMap<String, AllocationIp>,
    /// When the operator first saw each candidate as excess.
    pub first_seen: &'a BTreeMap<String, Instant>,
    pub now: Instant,
    /// How long an address must stay excess before it is marked.
    pub delay: Duration,
}

/// What to do this round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandshakeStep {
    /// The operator's memory of first-seen times for the next round.
    pub first_seen: BTreeMap<String, Instant>,
    /// Entries to set to `marked-for-release`.
    pub mark: Vec<String>,
    /// Entries to remove (cancelled, or refused by the agent).
    pub unmark: Vec<String>,
    /// Addresses the agent released: unassign them from the cloud, then set
    /// `released`.
    pub unassign: Vec<String>,
}

pub fn step(input: HandshakeInput<'_>) -> HandshakeStep {
    let mut out = HandshakeStep::default();
    let mut refused = BTreeSet::new();
    for (ip, state) in input.status {
        let still_excess = input.candidates.contains(ip);
        match state {
            ReleaseState::Released if input.pool.contains_key(ip) => out.unmark.push(ip.clone()),
            ReleaseState::Released => {}
            _ if !still_excess => out.unmark.push(ip.clone()),
            ReleaseState::ReadyForRelease => out.unassign.push(ip.clone()),
            ReleaseState::DoNotRelease => {
                out.unmark.push(ip.clone());
                refused.insert(ip);
            }
            // marked-for-release, or a value this operator does not know:
            // wait for the agent.
            _ => {}
        }
    }
    for ip in input.candidates {
        if refused.contains(ip) {
            continue;
        }
        let seen = input.first_seen.get(ip).copied().unwrap_or(input.now);
        out.first_seen.insert(ip.clone(), seen);
        let waited = input.now.saturating_duration_since(seen) >= input.delay;
        if waited && !input.status.contains_key(ip) {
            out.mark.push(ip.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ips: &[&str]) -> BTreeSet<String> {
        ips.iter().map(|s| s.to_string()).collect()
    }

    const MARKED_FOR_RELEASE: &str = "marked-for-release";
    const READY_FOR_RELEASE: &str = "ready-for-release";
    const DO_NOT_RELEASE: &str = "do-not-release";
    const RELEASED: &str = "released";

    /// release-ips as an agent writes it (the CRD's spellings).
    fn status(entries: &[(&str, &str)]) -> BTreeMap<String, ReleaseState> {
        entries
            .iter()
            .map(|(ip, s)| (ip.to_string(), ReleaseState::from(s.to_string())))
            .collect()
    }

    fn pool(ips: &[&str]) -> BTreeMap<String, AllocationIp> {
        ips.iter()
            .map(|ip| (ip.to_string(), AllocationIp::default()))
            .collect()
    }

    fn strings(ips: &[&str]) -> Vec<String> {
        ips.iter().map(|s| s.to_string()).collect()
    }

    const DELAY: Duration = Duration::from_secs(180);

    #[test]
    fn an_address_is_marked_only_after_the_delay() {
        let t0 = Instant::now();
        let candidates = set(&["10.0.0.5"]);
        let empty = BTreeMap::new();
        let in_pool = pool(&["10.0.0.5"]);
        let first = step(HandshakeInput {
            candidates: &candidates,
            status: &empty,
            pool: &in_pool,
            first_seen: &BTreeMap::new(),
            now: t0,
            delay: DELAY,
        });
        assert!(first.mark.is_empty());
        assert_eq!(first.first_seen["10.0.0.5"], t0);
        let early = HandshakeInput {
            candidates: &candidates,
            status: &empty,
            pool: &in_pool,
            first_seen: &first.first_seen,
            now: t0 + DELAY / 2,
            delay: DELAY,
        };
        assert!(step(early).mark.is_empty());
        let late = HandshakeInput {
            now: t0 + DELAY,
            ..early
        };
        assert_eq!(step(late).mark, strings(&["10.0.0.5"]));
    }

    #[test]
    fn handshake_table() {
        let t0 = Instant::now();
        let now = t0 + DELAY * 2;
        let seen: BTreeMap<String, Instant> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|ip| (ip.to_string(), t0))
            .collect();
        struct Case {
            candidates: &'static [&'static str],
            status: &'static [(&'static str, &'static str)],
            mark: &'static [&'static str],
            unmark: &'static [&'static str],
            unassign: &'static [&'static str],
            why: &'static str,
        }
        let case = |candidates, status, mark, unmark, unassign, why| Case {
            candidates,
            status,
            mark,
            unmark,
            unassign,
            why,
        };
        let cases = [
            case(
                &["a"],
                &[("a", MARKED_FOR_RELEASE)],
                &[],
                &[],
                &[],
                "marked: wait for the agent",
            ),
            case(
                &["a"],
                &[("a", READY_FOR_RELEASE)],
                &[],
                &[],
                &["a"],
                "ready: unassign",
            ),
            case(
                &["a"],
                &[("a", DO_NOT_RELEASE)],
                &[],
                &["a"],
                &[],
                "refused: unmark, not re-marked this round",
            ),
            case(
                &["a"],
                &[("a", RELEASED)],
                &[],
                &["a"],
                &[],
                "released and back in the pool: the release is over",
            ),
            case(
                &[],
                &[("a", MARKED_FOR_RELEASE)],
                &[],
                &["a"],
                &[],
                "no longer excess: cancelled",
            ),
            case(
                &[],
                &[("a", READY_FOR_RELEASE)],
                &[],
                &["a"],
                &[],
                "ready but no longer excess: cancelled, not released",
            ),
            case(
                &[],
                &[("a", RELEASED)],
                &[],
                &[],
                &[],
                "released and gone from the pool: the agent removes it",
            ),
            case(
                &["a", "b"],
                &[("a", READY_FOR_RELEASE)],
                &["b"],
                &[],
                &["a"],
                "new candidate past the delay is marked",
            ),
            case(
                &["a"],
                &[("a", "something-new")],
                &[],
                &[],
                &[],
                "an unknown state is left alone",
            ),
        ];
        for c in cases {
            let (candidates, current) = (set(c.candidates), status(c.status));
            // The candidates are in the pool; so is every marked address
            // but a released one no longer a candidate.
            let mut in_pool = pool(c.candidates);
            for (ip, state) in c.status {
                if *state != RELEASED {
                    in_pool.insert(ip.to_string(), AllocationIp::default());
                }
            }
            let out = step(HandshakeInput {
                candidates: &candidates,
                status: &current,
                pool: &in_pool,
                first_seen: &seen,
                now,
                delay: DELAY,
            });
            assert_eq!(out.mark, strings(c.mark), "{}: mark", c.why);
            assert_eq!(out.unmark, strings(c.unmark), "{}: unmark", c.why);
            assert_eq!(out.unassign, strings(c.unassign), "{}: unassign", c.why);
        }
    }

    #[test]
    fn a_refused_address_waits_the_delay_again() {
        let t0 = Instant::now();
        let candidates = set(&["a"]);
        let seen: BTreeMap<String, Instant> = [("a".to_string(), t0)].into();
        let refused = status(&[("a", DO_NOT_RELEASE)]);
        let in_pool = pool(&["a"]);
        let now = t0 + DELAY * 2;
        let out = step(HandshakeInput {
            candidates: &candidates,
            status: &refused,
            pool: &in_pool,
            first_seen: &seen,
            now,
            delay: DELAY,
        });
        assert!(!out.first_seen.contains_key("a"), "forgotten");
        let next = step(HandshakeInput {
            candidates: &candidates,
            status: &BTreeMap::new(),
            pool: &in_pool,
            first_seen: &out.first_seen,
            now,
            delay: DELAY,
        });
        assert!(next.mark.is_empty(), "seen anew: the delay starts over");
        assert_eq!(next.first_seen["a"], now);
    }
}
