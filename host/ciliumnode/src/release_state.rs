//! The states of an address in status.ipam.release-ips, the excess-IP
//! release handshake between the operator and the agent (Cilium's
//! pkg/ipam/types): the operator marks, the agent answers, the operator
//! releases.

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ReleaseState {
    /// The operator wants the address back (`marked-for-release`).
    MarkedForRelease,
    /// The agent agrees: nothing uses it (`ready-for-release`).
    ReadyForRelease,
    /// The agent refuses: a pod took it meanwhile (`do-not-release`).
    DoNotRelease,
    /// The operator released it from the cloud (`released`).
    Released,
    /// A value neither side of this version knows; kept as written, so a
    /// newer agent's answer is never lost by a round trip.
    Other(String),
}

impl ReleaseState {
    pub fn as_str(&self) -> &str {
        match self {
            ReleaseState::MarkedForRelease => "marked-for-release",
            ReleaseState::ReadyForRelease => "ready-for-release",
            ReleaseState::DoNotRelease => "do-not-release",
            ReleaseState::Released => "released",
            ReleaseState::Other(other) => other,
        }
    }
}

impl From<String> for ReleaseState {
    fn from(value: String) -> Self {
        match value.as_str() {
            "marked-for-release" => ReleaseState::MarkedForRelease,
            "ready-for-release" => ReleaseState::ReadyForRelease,
            "do-not-release" => ReleaseState::DoNotRelease,
            "released" => ReleaseState::Released,
            _ => ReleaseState::Other(value),
        }
    }
}

impl From<ReleaseState> for String {
    fn from(state: ReleaseState) -> Self {
        match state {
            ReleaseState::Other(other) => other,
            known => known.as_str().to_string(),
        }
    }
}

impl fmt::Display for ReleaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_spellings_round_trip_and_unknown_values_are_kept() {
        for state in [
            ReleaseState::MarkedForRelease,
            ReleaseState::ReadyForRelease,
            ReleaseState::DoNotRelease,
            ReleaseState::Released,
            ReleaseState::Other("pondering".into()),
        ] {
            let json = serde_json::to_string(&state).unwrap();
            assert_eq!(json, format!("\"{state}\""));
            assert_eq!(serde_json::from_str::<ReleaseState>(&json).unwrap(), state);
        }
        assert_eq!(
            serde_json::from_str::<ReleaseState>("\"ready-for-release\"").unwrap(),
            ReleaseState::ReadyForRelease
        );
    }
}
