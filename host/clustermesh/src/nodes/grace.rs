//! The grace a stale node key is given before the sweep deletes it: a key
//! an agent has just written may be seconds ahead of its CiliumNode (the
//! agent writes both at start), so a sweep deletes a key only once sweeps
//! have found it stale, at the same revision, for the whole grace
//! (cilium-operator waits a minute after it sees a key written).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// Stale keys with the revision they were found at and since when.
#[derive(Debug, Default)]
pub(crate) struct Waiting(BTreeMap<String, (i64, Instant)>);

impl Waiting {
    /// Of this sweep's stale keys (with their revisions), those found stale
    /// at that revision for at least `grace`; they stay here until
    /// [`Waiting::forget`]. A key found for the first time, or written
    /// again since, waits from `now`. Keys no longer stale are dropped.
    pub fn ripe(
        &mut self,
        stale: Vec<(String, i64)>,
        now: Instant,
        grace: Duration,
    ) -> Vec<(String, i64)> {
        let mut waiting = BTreeMap::new();
        let mut ripe = Vec::new();
        for (key, revision) in stale {
            let since = match self.0.get(&key) {
                Some((seen, since)) if *seen == revision => *since,
                _ => now,
            };
            if now.saturating_duration_since(since) >= grace {
                ripe.push((key.clone(), revision));
            }
            waiting.insert(key, (revision, since));
        }
        self.0 = waiting;
        ripe
    }

    /// `key` may not go before a full grace from `now` (its agent runs).
    pub fn hold(&mut self, key: String, revision: i64, now: Instant) {
        self.0.insert(key, (revision, now));
    }

    /// `key` was deleted, or written again.
    pub fn forget(&mut self, key: &str) {
        self.0.remove(key);
    }

    /// When the first waiting key's grace ends: a sweep is due then.
    pub fn due(&self, grace: Duration) -> Option<Instant> {
        self.0.values().map(|(_, since)| *since + grace).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(60);

    /// Keys with their revisions.
    type Found<'a> = &'a [(&'a str, i64)];

    fn keys(list: Found) -> Vec<(String, i64)> {
        list.iter().map(|(k, r)| (k.to_string(), *r)).collect()
    }

    #[test]
    fn a_key_goes_once_stale_at_one_revision_for_the_whole_grace() {
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        let mut waiting = Waiting::default();
        // (sweep time, stale keys found, ripe ones)
        let table: &[(u64, Found, Found)] = &[
            (0, &[("a", 1), ("b", 1)], &[]),
            (30, &[("a", 1), ("b", 2)], &[]),
            // a: stale since 0 at revision 1; b was written again at 30.
            (60, &[("a", 1), ("b", 2)], &[("a", 1)]),
            // b is not stale any more (its CiliumNode came), then is again:
            // it starts over.
            (70, &[("a", 1)], &[("a", 1)]),
            (90, &[("a", 1), ("b", 2)], &[("a", 1)]),
            (149, &[("b", 2)], &[]),
            (150, &[("b", 2)], &[("b", 2)]),
        ];
        for (time, stale, ripe) in table {
            assert_eq!(
                waiting.ripe(keys(stale), at(*time), GRACE),
                keys(ripe),
                "sweep at {time} s"
            );
        }
    }

    #[test]
    fn no_grace_deletes_at_the_first_sweep() {
        let mut waiting = Waiting::default();
        let now = Instant::now();
        assert_eq!(
            waiting.ripe(keys(&[("a", 1)]), now, Duration::ZERO),
            keys(&[("a", 1)])
        );
    }

    #[test]
    fn the_next_sweep_is_due_when_the_first_grace_ends() {
        let start = Instant::now();
        let mut waiting = Waiting::default();
        assert_eq!(waiting.due(GRACE), None);
        waiting.ripe(keys(&[("a", 1)]), start, GRACE);
        waiting.hold("b".into(), 4, start + Duration::from_secs(10));
        assert_eq!(waiting.due(GRACE), Some(start + GRACE));
        waiting.forget("a");
        assert_eq!(waiting.due(GRACE), Some(start + Duration::from_secs(70)));
        // A held key restarts its grace.
        waiting.hold("b".into(), 4, start + Duration::from_secs(20));
        assert_eq!(waiting.due(GRACE), Some(start + Duration::from_secs(80)));
    }
}
