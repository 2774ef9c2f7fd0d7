//! The CNI specification versions this plugin speaks: 1.0.0 and 1.1.0, no
//! others (the 0.x result layouts differ and no runtime we target sends them).

use serde::{Deserialize, Serialize};
use std::fmt;

/// One supported CNI specification version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CniVersion {
    #[serde(rename = "1.0.0")]
    V1_0_0,
    #[serde(rename = "1.1.0")]
    V1_1_0,
}

/// Every version the plugin accepts in a configuration, oldest first, as
/// VERSION reports them.
pub const SUPPORTED: [CniVersion; 2] = [CniVersion::V1_0_0, CniVersion::V1_1_0];

impl CniVersion {
    /// The newest supported version: VERSION's own `cniVersion`, and the
    /// version of an error printed before the configuration was read.
    pub const LATEST: CniVersion = CniVersion::V1_1_0;

    /// The version a `cniVersion` string names, if it is one we speak.
    pub fn parse(text: &str) -> Option<CniVersion> {
        SUPPORTED.into_iter().find(|v| v.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CniVersion::V1_0_0 => "1.0.0",
            CniVersion::V1_1_0 => "1.1.0",
        }
    }
}

impl fmt::Display for CniVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_exactly_the_supported_versions() {
        let table = [
            ("1.0.0", Some(CniVersion::V1_0_0)),
            ("1.1.0", Some(CniVersion::V1_1_0)),
            ("0.4.0", None),
            ("0.3.1", None),
            ("1.2.0", None),
            ("1.0", None),
            ("", None),
        ];
        for (text, want) in table {
            assert_eq!(CniVersion::parse(text), want, "{text:?}");
        }
    }

    #[test]
    fn serde_uses_the_dotted_strings() {
        assert_eq!(
            serde_json::to_string(&CniVersion::V1_0_0).unwrap(),
            "\"1.0.0\""
        );
        let back: CniVersion = serde_json::from_str("\"1.1.0\"").unwrap();
        assert_eq!(back, CniVersion::V1_1_0);
    }
}
