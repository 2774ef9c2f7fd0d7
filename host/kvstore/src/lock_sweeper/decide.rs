//! What one sweep deletes, from what the previous sweep saw: pure, so every
//! case is a row of a table.

use std::collections::HashMap;

use crate::layout::lock_path_of;
use crate::KeyValue;

/// The key holding one lock path, as a sweep saw it. Two sweeps seeing an
/// equal holder means nobody released, re-took or rewrote the lock in
/// between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub key: String,
    pub mod_revision: i64,
    pub lease: i64,
}

/// The holders of the previous sweep, by lock path.
pub type Holders = HashMap<String, Holder>;

/// What a sweep does with one listing.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SweepPlan {
    /// Holders seen unchanged by the previous sweep too: stale, to delete
    /// (if still unchanged when deleted).
    pub delete: Vec<Holder>,
    /// Holders seen for the first time (or changed): for the next sweep to
    /// compare with.
    pub remember: Holders,
}

/// Plan a sweep over `listing` (every key under the locks prefix), given
/// the `previous` sweep's holders.
///
/// Per lock path, only the holder (smallest create revision; etcd gives
/// every create its own revision, the key breaks the tie of keys created in
/// one transaction) is considered: a waiter is a live contender queued
/// behind the holder, and goes ahead once the holder is deleted. A holder
/// the previous sweep saw identical has held the lock for a whole lease TTL
/// at least, longer than any critical section of the allocator: its owner
/// forgot it.
pub fn plan_sweep(previous: &Holders, listing: &[KeyValue]) -> SweepPlan {
    let mut holders: HashMap<&str, &KeyValue> = HashMap::new();
    for kv in listing {
        let Some(path) = lock_path_of(&kv.key) else {
            continue;
        };
        holders
            .entry(path)
            .and_modify(|first| {
                if (kv.create_revision, &kv.key) < (first.create_revision, &first.key) {
                    *first = kv;
                }
            })
            .or_insert(kv);
    }
    let mut plan = SweepPlan::default();
    for (path, kv) in holders {
        let holder = Holder {
            key: kv.key.clone(),
            mod_revision: kv.mod_revision,
            lease: kv.lease,
        };
        if previous.get(path) == Some(&holder) {
            plan.delete.push(holder);
        } else {
            plan.remember.insert(path.to_string(), holder);
        }
    }
    // Deterministic order: deletions in key order, as listed.
    plan.delete.sort_by(|a, b| a.key.cmp(&b.key));
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "cilium/state/identities/v1/locks/id/";

    fn kv(key: &str, create_revision: i64, mod_revision: i64, lease: i64) -> KeyValue {
        KeyValue {
            key: format!("{P}{key}"),
            value: Vec::new(),
            create_revision,
            mod_revision,
            lease,
        }
    }

    fn holder(key: &str, mod_revision: i64, lease: i64) -> Holder {
        Holder {
            key: format!("{P}{key}"),
            mod_revision,
            lease,
        }
    }

    fn remembered(holders: &[(&str, Holder)]) -> Holders {
        holders
            .iter()
            .map(|(path, h)| (format!("{P}{path}"), h.clone()))
            .collect()
    }

    #[test]
    fn table() {
        struct Row {
            name: &'static str,
            previous: Holders,
            listing: Vec<KeyValue>,
            delete: Vec<Holder>,
            remember: Holders,
        }
        let rows = [
            Row {
                name: "first sight: remembered, not deleted",
                previous: Holders::new(),
                listing: vec![kv("1.lock/a", 10, 10, 0xa)],
                delete: vec![],
                remember: remembered(&[("1.lock", holder("1.lock/a", 10, 0xa))]),
            },
            Row {
                name: "unchanged since the previous sweep: deleted, forgotten",
                previous: remembered(&[("1.lock", holder("1.lock/a", 10, 0xa))]),
                listing: vec![kv("1.lock/a", 10, 10, 0xa)],
                delete: vec![holder("1.lock/a", 10, 0xa)],
                remember: Holders::new(),
            },
            Row {
                name: "rewritten (new mod revision): spared, remembered anew",
                previous: remembered(&[("1.lock", holder("1.lock/a", 10, 0xa))]),
                listing: vec![kv("1.lock/a", 10, 12, 0xa)],
                delete: vec![],
                remember: remembered(&[("1.lock", holder("1.lock/a", 12, 0xa))]),
            },
            Row {
                name: "same key on another lease: spared",
                previous: remembered(&[("1.lock", holder("1.lock/a", 10, 0xa))]),
                listing: vec![kv("1.lock/a", 10, 10, 0xb)],
                delete: vec![],
                remember: remembered(&[("1.lock", holder("1.lock/a", 10, 0xb))]),
            },
            Row {
                name: "released and re-taken by another: spared",
                previous: remembered(&[("1.lock", holder("1.lock/a", 10, 0xa))]),
                listing: vec![kv("1.lock/b", 20, 20, 0xb)],
                delete: vec![],
                remember: remembered(&[("1.lock", holder("1.lock/b", 20, 0xb))]),
            },
            Row {
                name: "a waiter is never deleted, only the holder",
                previous: remembered(&[("1.lock", holder("1.lock/a", 10, 0xa))]),
                // Listed in key order: the waiter `0` sorts before the holder.
                listing: vec![kv("1.lock/0", 11, 11, 0x0), kv("1.lock/a", 10, 10, 0xa)],
                delete: vec![holder("1.lock/a", 10, 0xa)],
                remember: Holders::new(),
            },
            Row {
                name: "the previous holder is now a waiter: nothing to do",
                previous: remembered(&[("1.lock", holder("1.lock/b", 20, 0xb))]),
                listing: vec![kv("1.lock/a", 10, 10, 0xa), kv("1.lock/b", 20, 20, 0xb)],
                delete: vec![],
                remember: remembered(&[("1.lock", holder("1.lock/a", 10, 0xa))]),
            },
            Row {
                name: "create revisions tie (one transaction): the smaller key holds",
                previous: Holders::new(),
                listing: vec![kv("1.lock/b", 10, 10, 0xb), kv("1.lock/a", 10, 10, 0xa)],
                delete: vec![],
                remember: remembered(&[("1.lock", holder("1.lock/a", 10, 0xa))]),
            },
            Row {
                name: "paths apart: a path that is a prefix of another is its own lock",
                previous: remembered(&[
                    ("1.lock", holder("1.lock/a", 10, 0xa)),
                    ("1.lock/x", holder("1.lock/x/c", 30, 0xc)),
                ]),
                listing: vec![
                    kv("1.lock/a", 10, 10, 0xa),
                    kv("1.lock/x/c", 30, 30, 0xc),
                    kv("2.lock/d", 5, 5, 0xd),
                ],
                delete: vec![holder("1.lock/a", 10, 0xa), holder("1.lock/x/c", 30, 0xc)],
                remember: remembered(&[("2.lock", holder("2.lock/d", 5, 0xd))]),
            },
            Row {
                name: "a lock gone since: forgotten",
                previous: remembered(&[("1.lock", holder("1.lock/a", 10, 0xa))]),
                listing: vec![],
                delete: vec![],
                remember: Holders::new(),
            },
        ];
        for row in rows {
            let plan = plan_sweep(&row.previous, &row.listing);
            assert_eq!(plan.delete, row.delete, "{}", row.name);
            assert_eq!(plan.remember, row.remember, "{}", row.name);
        }
    }
}
