//! The network configuration a runtime (through the main plugin) gives on
//! stdin, parsed for one command.
//!
//! What is read: `cniVersion` (checked first, before anything else of the
//! configuration is trusted), the `ipam` section (`socket`, `timeoutSeconds`),
//! `prevResult` for CHECK and `cni.dev/valid-attachments` for GC. Every other
//! field (`name`, `type`, `runtimeConfig`, the main plugin's own) is ignored,
//! as the spec allows.

use crate::env::Command;
use crate::names::{ContainerId, IfName};
use crate::protocol::Attachment;
use crate::result::{code, CniError};
use crate::version::CniVersion;
use ipnet::IpNet;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::time::Duration;

/// Where the agent listens unless `ipam.socket` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/ipam-agent/agent.sock";
/// How long the plugin waits for the agent unless `ipam.timeoutSeconds` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest `ipam.timeoutSeconds` accepted: runtimes give up well before.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("the network configuration is not a JSON object: {0}")]
    NotJson(serde_json::Error),
    #[error("the network configuration has no cniVersion string")]
    NoVersion,
    #[error("cniVersion {0:?} is not supported; this plugin speaks 1.0.0 and 1.1.0")]
    UnsupportedVersion(String),
    #[error("{command} needs cniVersion 1.1.0 or later, the configuration says {version}")]
    CommandTooNew {
        command: Command,
        version: CniVersion,
    },
    #[error("the network configuration has no ipam section")]
    NoIpam,
    #[error("{field} cannot be decoded: {source}")]
    Field {
        field: &'static str,
        source: serde_json::Error,
    },
    #[error("ipam.socket {0:?} is not an absolute path")]
    RelativeSocket(PathBuf),
    #[error("ipam.timeoutSeconds {0} is not between 1 and {max}", max = MAX_TIMEOUT.as_secs())]
    Timeout(u64),
    #[error("CHECK needs a prevResult")]
    NoPrevResult,
    #[error("GC needs cni.dev/valid-attachments")]
    NoValidAttachments,
    #[error(
        "the datapath step (ipam-cni without an ipam section) needs a prevResult for {0}: \
         place it after the main plugin in a conflist"
    )]
    DatapathNeedsPrevResult(Command),
    #[error("prevResult has no host-side interface (one without a sandbox) to attach to")]
    NoHostInterface,
    #[error("prevResult has no address for the pod")]
    NoPodAddress,
}

impl ConfigError {
    pub fn cni_error(&self) -> CniError {
        let (code, msg) = match self {
            ConfigError::NotJson(_) | ConfigError::Field { .. } => (
                code::DECODE_FAILURE,
                "cannot decode the network configuration",
            ),
            ConfigError::UnsupportedVersion(_) | ConfigError::CommandTooNew { .. } => {
                (code::INCOMPATIBLE_VERSION, "incompatible CNI version")
            }
            ConfigError::NoVersion
            | ConfigError::NoIpam
            | ConfigError::RelativeSocket(_)
            | ConfigError::Timeout(_)
            | ConfigError::NoPrevResult
            | ConfigError::NoValidAttachments
            | ConfigError::DatapathNeedsPrevResult(_)
            | ConfigError::NoHostInterface
            | ConfigError::NoPodAddress => (
                code::INVALID_NETWORK_CONFIG,
                "invalid network configuration",
            ),
        };
        CniError::new(code, msg, self.to_string())
    }
}

/// The `ipam` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpamConfig {
    pub socket: PathBuf,
    pub timeout: Duration,
}

/// What the configuration says, for one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkConfig {
    pub cni_version: CniVersion,
    pub ipam: IpamConfig,
    /// The addresses of `prevResult.ips`; read for CHECK only, where it is required.
    pub prev_result_ips: Option<Vec<IpNet>>,
    /// `cni.dev/valid-attachments`; read for GC only, where it is required
    /// (a missing list would otherwise mean "release everything"). `null`
    /// is the empty list, as libcni sends it when no container remains.
    pub valid_attachments: Option<Vec<Attachment>>,
}

#[derive(Deserialize)]
pub(crate) struct RawIpam {
    socket: Option<PathBuf>,
    #[serde(rename = "timeoutSeconds")]
    timeout_seconds: Option<u64>,
}

#[derive(Deserialize)]
struct RawPrevResult {
    #[serde(default)]
    ips: Vec<RawIp>,
}

#[derive(Deserialize)]
struct RawIp {
    address: IpNet,
}

#[derive(Deserialize)]
struct RawAttachment {
    #[serde(rename = "containerID")]
    container_id: ContainerId,
    ifname: IfName,
}

/// The `cniVersion` of a configuration, if it has a supported one: the
/// version to print an error in, whatever else is wrong.
pub fn peek_version(stdin: &[u8]) -> Option<CniVersion> {
    let top: Map<String, Value> = serde_json::from_slice(stdin).ok()?;
    CniVersion::parse(top.get("cniVersion")?.as_str()?)
}

/// The configuration as a JSON object, and its `cniVersion` checked for
/// `command` before anything else of it is trusted.
pub(crate) fn object_and_version(
    stdin: &[u8],
    command: Command,
) -> Result<(Map<String, Value>, CniVersion), ConfigError> {
    let top: Map<String, Value> = serde_json::from_slice(stdin).map_err(ConfigError::NotJson)?;
    let version_text = top
        .get("cniVersion")
        .and_then(Value::as_str)
        .ok_or(ConfigError::NoVersion)?;
    let cni_version = CniVersion::parse(version_text)
        .ok_or_else(|| ConfigError::UnsupportedVersion(version_text.to_owned()))?;
    if matches!(command, Command::Status | Command::Gc) && cni_version < CniVersion::V1_1_0 {
        return Err(ConfigError::CommandTooNew {
            command,
            version: cni_version,
        });
    }
    Ok((top, cni_version))
}

/// Parses the configuration for `command` (not VERSION, which reads none).
pub fn parse(stdin: &[u8], command: Command) -> Result<NetworkConfig, ConfigError> {
    let (mut top, cni_version) = object_and_version(stdin, command)?;
    let raw_ipam: RawIpam = field(&mut top, "ipam")?.ok_or(ConfigError::NoIpam)?;
    let ipam = ipam_config(raw_ipam)?;
    let prev_result_ips = match command {
        Command::Check => {
            let prev: RawPrevResult =
                field(&mut top, "prevResult")?.ok_or(ConfigError::NoPrevResult)?;
            Some(prev.ips.into_iter().map(|ip| ip.address).collect())
        }
        _ => None,
    };
    let valid_attachments = match command {
        Command::Gc => {
            let present = top.contains_key("cni.dev/valid-attachments");
            let list: Option<Vec<RawAttachment>> = field(&mut top, "cni.dev/valid-attachments")?;
            if !present {
                return Err(ConfigError::NoValidAttachments);
            }
            let attachments = list.unwrap_or_default().into_iter();
            Some(
                attachments
                    .map(|a| Attachment {
                        container_id: a.container_id,
                        ifname: a.ifname,
                    })
                    .collect(),
            )
        }
        _ => None,
    };
    Ok(NetworkConfig {
        cni_version,
        ipam,
        prev_result_ips,
        valid_attachments,
    })
}

/// Decodes one top-level field; absent and `null` are `None`.
pub(crate) fn field<T: for<'de> Deserialize<'de>>(
    top: &mut Map<String, Value>,
    name: &'static str,
) -> Result<Option<T>, ConfigError> {
    match top.remove(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => {
            serde_json::from_value(value)
                .map(Some)
                .map_err(|source| ConfigError::Field {
                    field: name,
                    source,
                })
        }
    }
}

pub(crate) fn ipam_config(raw: RawIpam) -> Result<IpamConfig, ConfigError> {
    let socket = raw.socket.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET));
    if !socket.is_absolute() {
        return Err(ConfigError::RelativeSocket(socket));
    }
    let timeout = match raw.timeout_seconds {
        None => DEFAULT_TIMEOUT,
        Some(secs) if (1..=MAX_TIMEOUT.as_secs()).contains(&secs) => Duration::from_secs(secs),
        Some(secs) => return Err(ConfigError::Timeout(secs)),
    };
    Ok(IpamConfig { socket, timeout })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(extra: Value) -> Vec<u8> {
        let mut base = json!({
            "cniVersion": "1.1.0",
            "name": "pods",
            "type": "ptp",
            "ipam": {"type": "ipam-cni"},
            "runtimeConfig": {"portMappings": []},
            "someFutureField": {"x": 1}
        });
        if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
            base.extend(extra);
        }
        serde_json::to_vec(&base).unwrap()
    }

    fn code_of(stdin: &[u8], command: Command) -> Result<NetworkConfig, u32> {
        parse(stdin, command).map_err(|e| e.cni_error().code)
    }

    #[test]
    fn defaults_and_ignored_fields() {
        let got = parse(&config(json!({})), Command::Add).unwrap();
        assert_eq!(
            got,
            NetworkConfig {
                cni_version: CniVersion::V1_1_0,
                ipam: IpamConfig {
                    socket: DEFAULT_SOCKET.into(),
                    timeout: DEFAULT_TIMEOUT
                },
                prev_result_ips: None,
                valid_attachments: None,
            }
        );
    }

    #[test]
    fn ipam_section() {
        let got = parse(
            &config(
                json!({"ipam": {"type": "ipam-cni", "socket": "/tmp/a.sock", "timeoutSeconds": 3}}),
            ),
            Command::Del,
        )
        .unwrap();
        assert_eq!(
            got.ipam,
            IpamConfig {
                socket: "/tmp/a.sock".into(),
                timeout: Duration::from_secs(3)
            }
        );
    }

    #[test]
    fn errors_and_their_codes() {
        let table: Vec<(Vec<u8>, Command, u32)> = vec![
            (b"".to_vec(), Command::Add, 6),
            (b"{not json".to_vec(), Command::Add, 6),
            (b"[1,2]".to_vec(), Command::Add, 6),
            (config(json!({"cniVersion": null})), Command::Add, 7),
            (config(json!({"cniVersion": 1})), Command::Add, 7),
            (config(json!({"cniVersion": "0.4.0"})), Command::Add, 1),
            (config(json!({"cniVersion": "1.2.0"})), Command::Del, 1),
            // a broken ipam section under an unsupported version is a version error
            (
                config(json!({"cniVersion": "0.3.1", "ipam": 5})),
                Command::Add,
                1,
            ),
            (config(json!({"cniVersion": "1.0.0"})), Command::Status, 1),
            (
                config(json!({"cniVersion": "1.0.0", "cni.dev/valid-attachments": []})),
                Command::Gc,
                1,
            ),
            (config(json!({"ipam": null})), Command::Add, 7),
            (config(json!({"ipam": "ipam-cni"})), Command::Add, 6),
            (config(json!({"ipam": {"socket": 7}})), Command::Add, 6),
            (
                config(json!({"ipam": {"socket": "agent.sock"}})),
                Command::Add,
                7,
            ),
            (
                config(json!({"ipam": {"timeoutSeconds": 0}})),
                Command::Add,
                7,
            ),
            (
                config(json!({"ipam": {"timeoutSeconds": 301}})),
                Command::Add,
                7,
            ),
            (
                config(json!({"ipam": {"timeoutSeconds": -1}})),
                Command::Add,
                6,
            ),
            (config(json!({})), Command::Check, 7),
            (
                config(json!({"prevResult": {"ips": [{"address": "10.0.1.5"}]}})),
                Command::Check,
                6,
            ),
            (config(json!({})), Command::Gc, 7),
            (
                config(json!({"cni.dev/valid-attachments": [{"containerID": "c1"}]})),
                Command::Gc,
                6,
            ),
            (
                config(
                    json!({"cni.dev/valid-attachments": [{"containerID": "-c1", "ifname": "eth0"}]}),
                ),
                Command::Gc,
                6,
            ),
        ];
        for (stdin, command, want) in table {
            assert_eq!(
                code_of(&stdin, command).err(),
                Some(want),
                "{} {command}",
                String::from_utf8_lossy(&stdin)
            );
        }
    }

    #[test]
    fn both_versions_for_add_del_check() {
        for version in ["1.0.0", "1.1.0"] {
            for command in [Command::Add, Command::Del] {
                let got = parse(&config(json!({"cniVersion": version})), command).unwrap();
                assert_eq!(got.cni_version.as_str(), version);
            }
        }
    }

    #[test]
    fn prev_result_for_check() {
        let prev = json!({"prevResult": {
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0", "sandbox": "/run/netns/c1"}],
            "ips": [{"address": "10.0.1.5/32", "gateway": "169.254.1.1", "interface": 0}],
            "routes": [{"dst": "0.0.0.0/0"}]
        }});
        let got = parse(&config(prev.clone()), Command::Check).unwrap();
        assert_eq!(
            got.prev_result_ips,
            Some(vec!["10.0.1.5/32".parse().unwrap()])
        );
        // DEL neither needs nor reads it
        assert_eq!(
            parse(&config(prev), Command::Del).unwrap().prev_result_ips,
            None
        );
    }

    #[test]
    fn valid_attachments_for_gc() {
        let got = parse(
            &config(json!({"cni.dev/valid-attachments": [
                {"containerID": "c1", "ifname": "eth0"},
                {"containerID": "c2", "ifname": "net1"}
            ]})),
            Command::Gc,
        )
        .unwrap();
        let ids: Vec<_> = got
            .valid_attachments
            .unwrap()
            .into_iter()
            .map(|a| format!("{}/{}", a.container_id, a.ifname))
            .collect();
        assert_eq!(ids, ["c1/eth0", "c2/net1"]);
        let none = parse(
            &config(json!({"cni.dev/valid-attachments": null})),
            Command::Gc,
        )
        .unwrap();
        assert_eq!(none.valid_attachments, Some(vec![]));
    }

    #[test]
    fn peek_version_is_best_effort() {
        assert_eq!(
            peek_version(&config(json!({"cniVersion": "1.0.0"}))),
            Some(CniVersion::V1_0_0)
        );
        assert_eq!(peek_version(&config(json!({"cniVersion": "0.4.0"}))), None);
        assert_eq!(peek_version(b"garbage"), None);
    }
}
