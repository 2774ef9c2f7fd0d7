//! Container ids and interface names, checked as the CNI specification
//! defines them, so the agent can key its allocations by them without
//! re-checking.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A name that breaks the specification's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error(
        "container id {0:?} must start with a letter or digit and hold only letters, digits, '_', '.' and '-'"
    )]
    ContainerId(String),
    #[error("interface name {0:?} must be 1 to 15 bytes, not '.' or '..', without '/', ':' or whitespace")]
    IfName(String),
}

/// The runtime's id of a container (CNI_CONTAINERID, `containerID`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ContainerId(String);

impl ContainerId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ContainerId {
    type Error = NameError;

    fn try_from(text: String) -> Result<Self, NameError> {
        let mut chars = text.chars();
        let starts_well = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
        let rest_well = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if starts_well && rest_well {
            Ok(ContainerId(text))
        } else {
            Err(NameError::ContainerId(text))
        }
    }
}

impl From<ContainerId> for String {
    fn from(id: ContainerId) -> String {
        id.0
    }
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The Linux name of the interface inside the container (CNI_IFNAME, `ifname`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IfName(String);

/// Linux's IFNAMSIZ less the terminating NUL.
const MAX_IFNAME_BYTES: usize = 15;

impl IfName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for IfName {
    type Error = NameError;

    fn try_from(text: String) -> Result<Self, NameError> {
        let well_formed = !text.is_empty()
            && text.len() <= MAX_IFNAME_BYTES
            && text != "."
            && text != ".."
            && !text
                .chars()
                .any(|c| c == '/' || c == ':' || c.is_whitespace());
        if well_formed {
            Ok(IfName(text))
        } else {
            Err(NameError::IfName(text))
        }
    }
}

impl From<IfName> for String {
    fn from(name: IfName) -> String {
        name.0
    }
}

impl fmt::Display for IfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids() {
        let table = [
            ("abc123", true),
            ("0f3e-cafe_1.2", true),
            ("a", true),
            ("", false),
            ("-abc", false),
            ("_abc", false),
            ("abc/def", false),
            ("abc def", false),
            ("abc;def", false),
        ];
        for (text, ok) in table {
            assert_eq!(
                ContainerId::try_from(text.to_owned()).is_ok(),
                ok,
                "{text:?}"
            );
        }
    }

    #[test]
    fn interface_names() {
        let table = [
            ("eth0", true),
            ("net1", true),
            ("a23456789012345", true),
            ("a234567890123456", false),
            ("", false),
            (".", false),
            ("..", false),
            ("...", true),
            ("eth/0", false),
            ("eth:0", false),
            ("eth 0", false),
            ("eth\t0", false),
        ];
        for (text, ok) in table {
            assert_eq!(IfName::try_from(text.to_owned()).is_ok(), ok, "{text:?}");
        }
    }

    #[test]
    fn serde_checks_names_on_the_way_in() {
        assert!(serde_json::from_str::<ContainerId>("\"ok-1\"").is_ok());
        assert!(serde_json::from_str::<ContainerId>("\"-bad\"").is_err());
        assert!(serde_json::from_str::<IfName>("\"eth0\"").is_ok());
        assert!(serde_json::from_str::<IfName>("\"a/b\"").is_err());
    }
}
