//! Whether a pinned map can be reused: aya reopens a pin by name without
//! looking at it, so a map left by an older build with another key or value
//! size would be read and written with the wrong layout. The loader checks
//! each pin against what this build's program defines first.

use agent_ebpf_common::MapLayout;

/// What was found at a map's pin path, judged against the expected layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinCheck {
    /// Nothing pinned: the loader creates the map and pins it.
    Absent,
    /// Same type, key size, value size and max entries: reuse it, entries
    /// and all.
    Matches,
    /// Pinned with another layout: remove the pin so the map is re-created.
    Differs { found: MapLayout },
}

/// Judges a pin's layout (`None`: nothing pinned) against the expected one.
pub fn check_pin(expected: MapLayout, found: Option<MapLayout>) -> PinCheck {
    match found {
        None => PinCheck::Absent,
        Some(found) if found == expected => PinCheck::Matches,
        Some(found) => PinCheck::Differs { found },
    }
}

/// What happened to one map at load, for the caller's log line and metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapOutcome {
    /// No pin existed; the map was created empty and pinned.
    Created,
    /// The pinned map matched and was reused with its entries.
    Reused,
    /// A pin with another layout was removed and the map re-created empty.
    Recreated { found: MapLayout },
}

impl From<PinCheck> for MapOutcome {
    fn from(check: PinCheck) -> Self {
        match check {
            PinCheck::Absent => Self::Created,
            PinCheck::Matches => Self::Reused,
            PinCheck::Differs { found } => Self::Recreated { found },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_is_reused_only_when_every_field_matches() {
        let expected = MapLayout::ENDPOINTS;
        let cases = [
            ("nothing pinned", None, PinCheck::Absent),
            ("same", Some(expected), PinCheck::Matches),
            (
                "another value size",
                Some(MapLayout {
                    value_size: expected.value_size + 4,
                    ..expected
                }),
                PinCheck::Differs {
                    found: MapLayout {
                        value_size: expected.value_size + 4,
                        ..expected
                    },
                },
            ),
            (
                "another key size",
                Some(MapLayout {
                    key_size: 16,
                    ..expected
                }),
                PinCheck::Differs {
                    found: MapLayout {
                        key_size: 16,
                        ..expected
                    },
                },
            ),
            (
                "another type",
                Some(MapLayout::COUNTERS),
                PinCheck::Differs {
                    found: MapLayout::COUNTERS,
                },
            ),
            (
                "fewer entries",
                Some(MapLayout {
                    max_entries: 16,
                    ..expected
                }),
                PinCheck::Differs {
                    found: MapLayout {
                        max_entries: 16,
                        ..expected
                    },
                },
            ),
        ];
        for (name, found, want) in cases {
            assert_eq!(check_pin(expected, found), want, "{name}");
        }
    }
}
