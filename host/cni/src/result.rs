//! What the plugin prints on stdout: the CNI 1.x IPAM result of ADD, the
//! error JSON of any failed command, and VERSION's answer.
//!
//! An IPAM plugin's result carries `ips`, `routes` and `dns` and no
//! `interfaces` (the main plugin adds those), so `ips[].interface` is never
//! set. The 1.0.0 and 1.1.0 layouts of these fields are the same; only
//! `cniVersion` differs.

use crate::protocol::{Allocation, Route};
use crate::version::{CniVersion, SUPPORTED};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// The error codes of the CNI specification, and this plugin's own (100+).
pub mod code {
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const UNSUPPORTED_FIELD: u32 = 2;
    pub const CONTAINER_UNKNOWN: u32 = 3;
    pub const INVALID_ENVIRONMENT: u32 = 4;
    pub const IO_FAILURE: u32 = 5;
    pub const DECODE_FAILURE: u32 = 6;
    pub const INVALID_NETWORK_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
    /// The agent answered something this plugin cannot read, or an answer
    /// that does not fit the request (plugin and agent out of step).
    pub const AGENT_PROTOCOL: u32 = 100;
    /// CHECK: the prevResult does not hold the address the agent has for
    /// the attachment.
    pub const CHECK_MISMATCH: u32 = 101;
}

/// A CNI error: the body of the error JSON, and what the agent answers in
/// `AgentResponse::Failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniError {
    pub code: u32,
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    pub fn new(code: u32, msg: impl Into<String>, details: impl Into<String>) -> CniError {
        CniError {
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }
}

/// The error JSON: `{"cniVersion", "code", "msg", "details"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResult {
    #[serde(rename = "cniVersion")]
    pub cni_version: CniVersion,
    #[serde(flatten)]
    pub error: CniError,
}

/// One address of the result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// The address with its prefix length, "10.0.1.5/32".
    pub address: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
}

/// The result's DNS settings: the agent hands out none, so this is `{}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {}

/// The ADD result of an IPAM plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpamResult {
    #[serde(rename = "cniVersion")]
    pub cni_version: CniVersion,
    pub ips: Vec<IpConfig>,
    #[serde(default)]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub dns: Dns,
}

impl IpamResult {
    /// The result for the agent's allocation, in the configuration's version.
    pub fn from_allocation(cni_version: CniVersion, allocation: &Allocation) -> IpamResult {
        IpamResult {
            cni_version,
            ips: vec![IpConfig {
                address: allocation.address,
                gateway: allocation.gateway,
            }],
            routes: allocation.routes.clone(),
            dns: Dns {},
        }
    }
}

/// VERSION's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionResult {
    #[serde(rename = "cniVersion")]
    pub cni_version: CniVersion,
    #[serde(rename = "supportedVersions")]
    pub supported_versions: Vec<CniVersion>,
}

impl VersionResult {
    pub fn this_plugin() -> VersionResult {
        VersionResult {
            cni_version: CniVersion::LATEST,
            supported_versions: SUPPORTED.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn allocation() -> Allocation {
        Allocation {
            address: "10.0.1.5/32".parse().unwrap(),
            gateway: Some("169.254.1.1".parse().unwrap()),
            routes: vec![
                Route {
                    dst: "0.0.0.0/0".parse().unwrap(),
                    gw: Some("169.254.1.1".parse().unwrap()),
                },
                Route {
                    dst: "10.0.0.0/8".parse().unwrap(),
                    gw: None,
                },
            ],
        }
    }

    #[test]
    fn ipam_result_shape_in_each_version() {
        for (version, text) in [(CniVersion::V1_0_0, "1.0.0"), (CniVersion::V1_1_0, "1.1.0")] {
            let got =
                serde_json::to_value(IpamResult::from_allocation(version, &allocation())).unwrap();
            assert_eq!(
                got,
                json!({
                    "cniVersion": text,
                    "ips": [{"address": "10.0.1.5/32", "gateway": "169.254.1.1"}],
                    "routes": [{"dst": "0.0.0.0/0", "gw": "169.254.1.1"}, {"dst": "10.0.0.0/8"}],
                    "dns": {}
                })
            );
        }
    }

    #[test]
    fn ipv6_without_gateway_leaves_it_out() {
        let alloc = Allocation {
            address: "fd00::5/128".parse().unwrap(),
            gateway: None,
            routes: vec![],
        };
        let got =
            serde_json::to_value(IpamResult::from_allocation(CniVersion::V1_1_0, &alloc)).unwrap();
        assert_eq!(got["ips"], json!([{"address": "fd00::5/128"}]));
        assert_eq!(got["routes"], json!([]));
    }

    #[test]
    fn error_json() {
        let table = [
            (
                CniError::new(11, "try again later", "agent socket missing"),
                json!({"cniVersion": "1.1.0", "code": 11, "msg": "try again later", "details": "agent socket missing"}),
            ),
            (
                CniError::new(3, "container unknown", ""),
                json!({"cniVersion": "1.1.0", "code": 3, "msg": "container unknown"}),
            ),
        ];
        for (error, want) in table {
            let result = ErrorResult {
                cni_version: CniVersion::V1_1_0,
                error,
            };
            assert_eq!(serde_json::to_value(&result).unwrap(), want);
            let back: ErrorResult = serde_json::from_value(want).unwrap();
            assert_eq!(back, result);
        }
    }

    #[test]
    fn version_json() {
        assert_eq!(
            serde_json::to_value(VersionResult::this_plugin()).unwrap(),
            json!({"cniVersion": "1.1.0", "supportedVersions": ["1.0.0", "1.1.0"]})
        );
    }
}
