//! `ipam-cni` as a chained plugin after the main plugin (the "datapath
//! step"): the IPAM step runs inside the main plugin, before the pod's
//! host-side veth exists, so the agent cannot put its datapath program on
//! the veth then. Placed after `ptp` in a conflist, `ipam-cni` sees `ptp`'s
//! result in `prevResult` and tells the agent which host interface and
//! address the attachment has.
//!
//! The role is read from the configuration: one with an `ipam` section is
//! the IPAM step (the main plugin passes its own configuration, `ipam`
//! included); one without is the datapath step, whose `socket` and
//! `timeoutSeconds` are top-level fields.

use serde::Deserialize;
use serde_json::{Map, Value};
use std::net::IpAddr;

use crate::config::{field, ipam_config, object_and_version, ConfigError, IpamConfig, RawIpam};
use crate::env::{Command, Invocation};
use crate::names::IfName;
use crate::plugin::out_of_protocol;
use crate::protocol::{AgentRequest, AgentResponse, Attachment};
use crate::result::CniError;
use crate::version::CniVersion;

/// Which step a configuration makes the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Run by the main plugin for its `ipam` section.
    Ipam,
    /// Chained after the main plugin.
    Datapath,
}

/// The role of a configuration: the IPAM step when it has an `ipam` key,
/// the datapath step otherwise. A configuration that is not a JSON object
/// is left to the IPAM step's parser, which names what is wrong.
pub fn role(stdin: &[u8]) -> Role {
    match serde_json::from_slice::<Map<String, Value>>(stdin) {
        Ok(top) if !top.contains_key("ipam") => Role::Datapath,
        _ => Role::Ipam,
    }
}

/// What the datapath step reads of its configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct DatapathConfig {
    pub cni_version: CniVersion,
    /// The agent's socket and timeout (top-level `socket`, `timeoutSeconds`).
    pub agent: IpamConfig,
    /// The main plugin's result, printed unchanged on ADD.
    pub prev_result: Option<Value>,
    /// The host-side interface and the pod's address in `prevResult`.
    pub endpoint: Option<(IfName, IpAddr)>,
}

#[derive(Deserialize)]
struct RawPrevResult {
    #[serde(default)]
    interfaces: Vec<RawInterface>,
    #[serde(default)]
    ips: Vec<RawIp>,
}

#[derive(Deserialize)]
struct RawInterface {
    name: IfName,
    #[serde(default)]
    sandbox: Option<String>,
}

#[derive(Deserialize)]
struct RawIp {
    address: ipnet::IpNet,
    #[serde(default)]
    interface: Option<usize>,
}

/// Parses the datapath step's configuration for `command`. ADD and CHECK
/// need a `prevResult` with a host-side interface (one without a sandbox)
/// and an address; DEL reads none.
pub fn parse(stdin: &[u8], command: Command) -> Result<DatapathConfig, ConfigError> {
    let (mut top, cni_version) = object_and_version(stdin, command)?;
    let raw_prev: Option<Value> = field(&mut top, "prevResult")?;
    let agent_fields =
        RawIpam::deserialize(Value::Object(top)).map_err(|source| ConfigError::Field {
            field: "socket/timeoutSeconds",
            source,
        })?;
    let agent = ipam_config(agent_fields)?;
    let needs_prev = matches!(command, Command::Add | Command::Check);
    let endpoint = match (&raw_prev, needs_prev) {
        (Some(prev), true) => Some(endpoint_of(prev)?),
        (None, true) => return Err(ConfigError::DatapathNeedsPrevResult(command)),
        (_, false) => None,
    };
    Ok(DatapathConfig {
        cni_version,
        agent,
        prev_result: raw_prev,
        endpoint,
    })
}

/// The host-side interface (the first without a sandbox) and the pod's
/// address (the first one on a sandboxed interface, else the first one).
fn endpoint_of(prev: &Value) -> Result<(IfName, IpAddr), ConfigError> {
    let prev = RawPrevResult::deserialize(prev).map_err(|source| ConfigError::Field {
        field: "prevResult",
        source,
    })?;
    let in_sandbox = |index: usize| {
        prev.interfaces
            .get(index)
            .and_then(|i| i.sandbox.as_deref())
            .is_some_and(|sandbox| !sandbox.is_empty())
    };
    let host = prev
        .interfaces
        .iter()
        .find(|i| i.sandbox.as_deref().is_none_or(str::is_empty))
        .ok_or(ConfigError::NoHostInterface)?;
    let address = prev
        .ips
        .iter()
        .find(|ip| ip.interface.is_some_and(in_sandbox))
        .or(prev.ips.first())
        .ok_or(ConfigError::NoPodAddress)?;
    Ok((host.name.clone(), address.address.addr()))
}

/// The request the datapath step makes: `attach` for ADD, `detach` for DEL,
/// `status` for STATUS. CHECK and GC ask nothing (the `prevResult` was
/// checked in parsing; the IPAM step's GC frees, and the agent detaches
/// what it frees).
pub fn request_for(invocation: &Invocation, config: &DatapathConfig) -> Option<AgentRequest> {
    match invocation {
        Invocation::Add(attach) => {
            let (host_ifname, address) = config.endpoint.clone()?;
            Some(AgentRequest::Attach {
                attachment: Attachment::of(&attach.container_id, &attach.ifname),
                host_ifname,
                address,
            })
        }
        Invocation::Del(detach) => Some(AgentRequest::Detach {
            attachment: Attachment::of(&detach.container_id, &detach.ifname),
        }),
        Invocation::Status => Some(AgentRequest::Status),
        Invocation::Check(_) | Invocation::Gc | Invocation::Version => None,
    }
}

/// What the agent's answer prints: the `prevResult` unchanged after an
/// `attach`, nothing otherwise, or the agent's error.
pub fn answer(
    request: &AgentRequest,
    config: &DatapathConfig,
    response: AgentResponse,
) -> Result<Option<Value>, CniError> {
    match (request, response) {
        (_, AgentResponse::Failed(error)) => Err(error),
        (AgentRequest::Attach { .. }, AgentResponse::Done) => Ok(config.prev_result.clone()),
        (AgentRequest::Detach { .. } | AgentRequest::Status, AgentResponse::Done) => Ok(None),
        (request, response) => Err(out_of_protocol(request, &response)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DEFAULT_SOCKET, DEFAULT_TIMEOUT};
    use crate::env::{Attach, CniArgs, Detach};
    use crate::result::code;
    use serde_json::json;

    fn ptp_result() -> Value {
        json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "veth1a2b3c4d", "mac": "aa:bb:cc:dd:ee:ff"},
                {"name": "eth0", "mac": "aa:bb:cc:dd:ee:00", "sandbox": "/run/netns/c1"}
            ],
            "ips": [{"address": "10.0.1.5/24", "gateway": "10.0.1.1", "interface": 1}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {}
        })
    }

    fn chained(extra: Value) -> Vec<u8> {
        let mut base = json!({"cniVersion": "1.0.0", "name": "pods", "type": "ipam-cni"});
        if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
            base.extend(extra);
        }
        serde_json::to_vec(&base).unwrap()
    }

    #[test]
    fn roles() {
        let table: [(&[u8], Role); 4] = [
            (
                br#"{"cniVersion":"1.0.0","type":"ptp","ipam":{"type":"ipam-cni"}}"#,
                Role::Ipam,
            ),
            (
                br#"{"cniVersion":"1.0.0","type":"ipam-cni","prevResult":{}}"#,
                Role::Datapath,
            ),
            (
                br#"{"cniVersion":"1.0.0","type":"ipam-cni"}"#,
                Role::Datapath,
            ),
            (b"not json", Role::Ipam),
        ];
        for (stdin, want) in table {
            assert_eq!(role(stdin), want, "{}", String::from_utf8_lossy(stdin));
        }
    }

    #[test]
    fn parses_the_endpoint_out_of_the_prev_result() {
        let got = parse(&chained(json!({"prevResult": ptp_result()})), Command::Add).unwrap();
        assert_eq!(
            got,
            DatapathConfig {
                cni_version: CniVersion::V1_0_0,
                agent: IpamConfig {
                    socket: DEFAULT_SOCKET.into(),
                    timeout: DEFAULT_TIMEOUT,
                },
                prev_result: Some(ptp_result()),
                endpoint: Some((
                    IfName::try_from("veth1a2b3c4d".to_owned()).unwrap(),
                    "10.0.1.5".parse().unwrap()
                )),
            }
        );
        let socket = parse(
            &chained(json!({"socket": "/tmp/a.sock", "timeoutSeconds": 2})),
            Command::Del,
        )
        .unwrap();
        assert_eq!(socket.agent.socket, std::path::Path::new("/tmp/a.sock"));
        assert_eq!(socket.endpoint, None, "DEL reads no prevResult");
    }

    #[test]
    fn errors_and_their_codes() {
        let only_sandboxed = json!({"interfaces": [{"name": "eth0", "sandbox": "/n"}],
                                    "ips": [{"address": "10.0.1.5/24"}]});
        let no_ips = json!({"interfaces": [{"name": "veth1"}], "ips": []});
        let table: Vec<(Vec<u8>, Command, u32)> = vec![
            (chained(json!({})), Command::Add, 7),
            (chained(json!({})), Command::Check, 7),
            (
                chained(json!({"prevResult": only_sandboxed})),
                Command::Add,
                7,
            ),
            (chained(json!({"prevResult": no_ips})), Command::Add, 7),
            (
                chained(json!({"prevResult": {"interfaces": [{"name": "a/b"}]}})),
                Command::Add,
                6,
            ),
            (
                chained(json!({"prevResult": ptp_result(), "socket": "rel.sock"})),
                Command::Add,
                7,
            ),
            (
                chained(json!({"prevResult": ptp_result(), "timeoutSeconds": 0})),
                Command::Add,
                7,
            ),
            (
                chained(json!({"cniVersion": "0.4.0", "prevResult": ptp_result()})),
                Command::Add,
                1,
            ),
        ];
        for (stdin, command, want) in table {
            assert_eq!(
                parse(&stdin, command).map_err(|e| e.cni_error().code).err(),
                Some(want),
                "{} {command}",
                String::from_utf8_lossy(&stdin)
            );
        }
    }

    #[test]
    fn requests_and_answers() {
        let config = parse(&chained(json!({"prevResult": ptp_result()})), Command::Add).unwrap();
        let attachment = Attachment {
            container_id: "c1".to_owned().try_into().unwrap(),
            ifname: "eth0".to_owned().try_into().unwrap(),
        };
        let add = Invocation::Add(Attach {
            container_id: attachment.container_id.clone(),
            netns: "/run/netns/c1".into(),
            ifname: attachment.ifname.clone(),
            args: CniArgs::default(),
        });
        let attach = request_for(&add, &config).unwrap();
        assert_eq!(
            attach,
            AgentRequest::Attach {
                attachment: attachment.clone(),
                host_ifname: "veth1a2b3c4d".to_owned().try_into().unwrap(),
                address: "10.0.1.5".parse().unwrap(),
            }
        );
        let del = Invocation::Del(Detach {
            container_id: attachment.container_id.clone(),
            netns: None,
            ifname: attachment.ifname.clone(),
            args: CniArgs::default(),
        });
        let detach = request_for(&del, &config).unwrap();
        assert_eq!(detach, AgentRequest::Detach { attachment });
        assert_eq!(request_for(&Invocation::Gc, &config), None);

        assert_eq!(
            answer(&attach, &config, AgentResponse::Done).unwrap(),
            Some(ptp_result()),
            "ADD prints the prevResult unchanged"
        );
        assert_eq!(answer(&detach, &config, AgentResponse::Done).unwrap(), None);
        let failed = AgentResponse::Failed(CniError::new(101, "not its address", ""));
        assert_eq!(answer(&attach, &config, failed).unwrap_err().code, 101);
        let allocated = crate::protocol::Allocation {
            address: "10.0.1.5/24".parse().unwrap(),
            gateway: None,
            routes: vec![],
        };
        assert_eq!(
            answer(&attach, &config, AgentResponse::Allocated(allocated))
                .unwrap_err()
                .code,
            code::AGENT_PROTOCOL
        );
    }
}
