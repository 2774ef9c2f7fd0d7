//! How many addresses a node needs or has in excess, Cilium's formulas
//! (pkg/ipam/node.go) with one rule of this project's added: while a
//! node has not used up its initial min-allocate + max-above-watermark, its
//! pool is never released below that level (Cilium's older rule could release
//! a fresh node below min-allocate and then allocate again).

/// A node's pool settings (CiliumNode spec.ipam): pre-allocate,
/// min-allocate, max-allocate (0: no limit but the instance's), and
/// max-above-watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Watermarks {
    pub pre_allocate: u32,
    pub min_allocate: u32,
    pub max_allocate: u32,
    pub max_above_watermark: u32,
}

/// Addresses to allocate so that `pre_allocate` stay free, at least
/// `min_allocate` are available, and no more than `max_allocate` are.
pub fn needed(w: Watermarks, available: u32, used: u32) -> u32 {
    let (available, used) = (i64::from(available), i64::from(used));
    let mut needed = i64::from(w.pre_allocate) - (available - used);
    if w.min_allocate > 0 {
        needed = needed.max(i64::from(w.min_allocate) - available);
    }
    if w.max_allocate > 0 && available + needed > i64::from(w.max_allocate) {
        needed = i64::from(w.max_allocate) - available;
    }
    needed.max(0) as u32
}

/// Addresses that may be released.
pub fn excess(w: Watermarks, available: u32, used: u32) -> u32 {
    let floor = i64::from(w.min_allocate) + i64::from(w.max_above_watermark);
    let (available, used, pre) = (
        i64::from(available),
        i64::from(used),
        i64::from(w.pre_allocate),
    );
    if used <= floor {
        if available <= floor {
            return 0;
        }
        if used + pre <= floor {
            return (available - floor) as u32;
        }
    }
    (available - used - pre - i64::from(w.max_above_watermark)).max(0) as u32
}

/// How many to ask for in one allocation: the need plus max-above-watermark.
/// Pods pending on the node (the surge) are part of the need: the caller
/// counts them as used, so a burst of pods is served in one allocation and
/// max-allocate still caps it.
pub fn allocation_size(needed: u32, max_above_watermark: u32) -> u32 {
    needed.saturating_add(max_above_watermark)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(pre: u32, min: u32, max: u32, above: u32) -> Watermarks {
        Watermarks {
            pre_allocate: pre,
            min_allocate: min,
            max_allocate: max,
            max_above_watermark: above,
        }
    }

    #[test]
    fn needed_table() {
        // (watermarks, available, used, needed, why)
        let cases = [
            (w(8, 0, 0, 0), 0, 0, 8, "empty node gets pre-allocate"),
            (w(8, 0, 0, 0), 8, 0, 0, "pre-allocate free: nothing"),
            (w(8, 0, 0, 0), 8, 3, 3, "three used: refill to eight free"),
            (w(8, 0, 0, 0), 20, 3, 0, "more than enough free"),
            (
                w(8, 0, 20, 0),
                3,
                3,
                8,
                "max-allocate far off: the need stands",
            ),
            (
                w(8, 10, 0, 0),
                0,
                0,
                10,
                "min-allocate wins over pre-allocate",
            ),
            (w(8, 10, 0, 0), 10, 0, 0, "min reached and eight free"),
            (w(8, 10, 0, 0), 10, 5, 3, "pre-allocate wins once used"),
            (w(8, 0, 12, 0), 10, 6, 2, "max-allocate caps the need"),
            (w(8, 0, 12, 0), 12, 12, 0, "at max-allocate nothing more"),
            (
                w(8, 0, 12, 0),
                15,
                15,
                0,
                "above max-allocate floors at zero",
            ),
            (w(0, 0, 0, 0), 0, 0, 0, "no watermarks no need"),
            (
                w(16, 0, 0, 0),
                4,
                10,
                22,
                "used beyond available (stale status) still counts",
            ),
        ];
        for (marks, available, used, want, why) in cases {
            assert_eq!(
                needed(marks, available, used),
                want,
                "{why}: {marks:?} available {available} used {used}"
            );
        }
    }

    #[test]
    fn excess_table() {
        let cases = [
            (w(8, 0, 0, 0), 8, 0, 0, "exactly pre-allocate free"),
            (
                w(8, 0, 0, 0),
                20,
                2,
                10,
                "twenty, two used: keep eight free",
            ),
            (w(8, 0, 0, 2), 20, 2, 8, "max-above-watermark kept too"),
            (w(8, 10, 0, 0), 10, 0, 0, "bootstrap: at min, nothing"),
            (w(8, 10, 0, 0), 16, 0, 6, "bootstrap: never below min"),
            (
                w(8, 10, 0, 0),
                16,
                2,
                6,
                "bootstrap while used + pre <= min",
            ),
            (w(8, 10, 0, 0), 16, 5, 3, "past bootstrap: keep eight free"),
            (w(8, 10, 0, 0), 30, 20, 2, "well above min"),
            (
                w(8, 10, 0, 0),
                12,
                20,
                0,
                "more used than available: nothing",
            ),
            (w(0, 0, 0, 0), 5, 5, 0, "all used"),
        ];
        for (marks, available, used, want, why) in cases {
            assert_eq!(
                excess(marks, available, used),
                want,
                "{why}: {marks:?} available {available} used {used}"
            );
        }
    }

    #[test]
    fn needed_and_excess_never_both_positive() {
        for pre in [0, 1, 8, 16] {
            for min in [0, 4, 10] {
                for max in [0, 12, 40] {
                    for above in [0, 2, 8] {
                        let marks = w(pre, min, max, above);
                        for available in 0..45 {
                            for used in 0..=available {
                                let (n, e) = (
                                    needed(marks, available, used),
                                    excess(marks, available, used),
                                );
                                assert!(n == 0 || e == 0, "{marks:?} available {available} used {used}: need {n}, excess {e}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn allocation_size_adds_the_watermark() {
        assert_eq!(allocation_size(3, 0), 3);
        assert_eq!(allocation_size(3, 2), 5);
        assert_eq!(allocation_size(u32::MAX, 1), u32::MAX);
    }

    #[test]
    fn demand_above_the_pool_is_allocated_within_max_allocate() {
        // The caller counts pending pods into the demand (allocation::needed,
        // whose table has the surge row): 10 available, a demand of 15.
        let wm = w(8, 0, 0, 0);
        assert_eq!(needed(wm, 10, 15), 13);
        let capped = w(8, 0, 20, 0);
        assert_eq!(needed(capped, 10, 15), 10, "never above max-allocate");
    }
}
