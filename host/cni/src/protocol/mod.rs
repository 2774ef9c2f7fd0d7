//! The plugin<->agent protocol, shared by `ipam-cni` (client) and the node
//! agent (server).
//!
//! One unix-socket connection carries one exchange: the client writes one
//! JSON [`AgentRequest`] and shuts down its write half; the server reads to
//! EOF, writes one JSON [`AgentResponse`] and closes. Either message is at
//! most [`MAX_MESSAGE_BYTES`].
//!
//! Both enums are internally tagged: a request names its operation in `"op"`
//! (`add`, `del`, `check`, `gc`, `status`, `attach`, `detach`), a response its outcome in
//! `"outcome"` (`allocated`, `done`, `failed`), beside the variant's fields:
//!
//! ```json
//! {"op":"add","attachment":{"container_id":"c1","ifname":"eth0"},"netns":"/run/netns/c1","pod":{"namespace":"default","name":"web-0"}}
//! {"outcome":"allocated","address":"10.0.1.5/24","gateway":"10.0.1.1","routes":[{"dst":"0.0.0.0/0"}]}
//! {"outcome":"failed","code":11,"msg":"pool empty","details":"waiting for the operator"}
//! ```
//!
//! Unknown fields are ignored, so either side may add optional fields
//! without breaking the other. What the agent answers:
//! - ADD: `allocated` with the pod's address (the same one again for an
//!   attachment it already serves), or `failed`.
//! - DEL: `done`, also for an attachment it does not know (DEL is idempotent).
//! - CHECK: `allocated` with the attachment's current allocation, or
//!   `failed` with code 3 when it has none.
//! - GC: `done` after releasing every attachment not in `valid`.
//! - STATUS: `done` when it can serve ADDs, else `failed` (code 50 or 51).
//! - `attach` (the chained datapath step's ADD, after the main plugin made
//!   the pod's host-side veth): `done` once the datapath program runs on
//!   `host_ifname` and holds the attachment to `address`; `failed` when the
//!   address is not the attachment's. An agent without a datapath answers
//!   `done` at once.
//! - `detach` (the datapath step's DEL): `done`, also when nothing is
//!   attached (idempotent).

mod client;

pub use client::{ask, AskError};

use crate::names::{ContainerId, IfName};
use crate::result::CniError;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// The most bytes either side reads of one message.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// One attachment of a container to the network: the key of an allocation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Attachment {
    pub container_id: ContainerId,
    pub ifname: IfName,
}

impl Attachment {
    /// The attachment of an invocation's container and interface.
    pub fn of(container_id: &ContainerId, ifname: &IfName) -> Self {
        Self {
            container_id: container_id.clone(),
            ifname: ifname.clone(),
        }
    }
}

/// The Kubernetes pod a container belongs to, from CNI_ARGS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

/// A route the pod should get.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub dst: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
}

/// What the agent gave an attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The pod's address with the prefix length the main plugin configures
    /// on the interface: a host prefix (/32, /128) by design, but `ptp` of
    /// containernetworking-plugins 1.1.1 fails on a /32 (it deletes the
    /// subnet route a /32 never gets); with it, use a prefix that holds the
    /// gateway. The plugin passes the address on unchanged.
    pub address: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    #[serde(default)]
    pub routes: Vec<Route>,
}

/// What the plugin asks the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AgentRequest {
    Add {
        attachment: Attachment,
        netns: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pod: Option<PodRef>,
    },
    Del {
        attachment: Attachment,
    },
    Check {
        attachment: Attachment,
    },
    Gc {
        valid: Vec<Attachment>,
    },
    Status,
    Attach {
        attachment: Attachment,
        /// The pod's host-side interface, made by the main plugin.
        host_ifname: IfName,
        /// The pod's address, as the main plugin configured it.
        address: IpAddr,
    },
    Detach {
        attachment: Attachment,
    },
}

/// What the agent answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum AgentResponse {
    Allocated(Allocation),
    Done,
    Failed(CniError),
}

/// A message that is not one of the protocol's.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("message is {0} bytes, more than the {MAX_MESSAGE_BYTES} allowed")]
    TooLarge(usize),
    #[error("message is not a valid {what}: {source}")]
    Json {
        what: &'static str,
        source: serde_json::Error,
    },
}

fn decode<T: for<'de> Deserialize<'de>>(
    bytes: &[u8],
    what: &'static str,
) -> Result<T, DecodeError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(DecodeError::TooLarge(bytes.len()));
    }
    serde_json::from_slice(bytes).map_err(|source| DecodeError::Json { what, source })
}

fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    // These types hold only strings, numbers, sequences and string-keyed
    // structs, which serde_json always serialises.
    serde_json::to_vec(message).expect("protocol messages always serialise")
}

/// Server side: the request read from a connection.
pub fn decode_request(bytes: &[u8]) -> Result<AgentRequest, DecodeError> {
    decode(bytes, "agent request")
}

/// Server side: the bytes to write back.
pub fn encode_response(response: &AgentResponse) -> Vec<u8> {
    encode(response)
}

/// Client side: the bytes of a request.
pub fn encode_request(request: &AgentRequest) -> Vec<u8> {
    encode(request)
}

/// Client side: the response read from the agent.
pub fn decode_response(bytes: &[u8]) -> Result<AgentResponse, DecodeError> {
    decode(bytes, "agent response")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attachment(id: &str, ifname: &str) -> Attachment {
        Attachment {
            container_id: ContainerId::try_from(id.to_owned()).unwrap(),
            ifname: IfName::try_from(ifname.to_owned()).unwrap(),
        }
    }

    #[test]
    fn requests_round_trip_in_the_documented_shape() {
        let table = [
            (
                AgentRequest::Add {
                    attachment: attachment("c1", "eth0"),
                    netns: "/run/netns/c1".into(),
                    pod: Some(PodRef {
                        namespace: "default".into(),
                        name: "web-0".into(),
                    }),
                },
                json!({"op": "add", "attachment": {"container_id": "c1", "ifname": "eth0"},
                       "netns": "/run/netns/c1", "pod": {"namespace": "default", "name": "web-0"}}),
            ),
            (
                AgentRequest::Add {
                    attachment: attachment("c1", "eth0"),
                    netns: "/proc/1/ns/net".into(),
                    pod: None,
                },
                json!({"op": "add", "attachment": {"container_id": "c1", "ifname": "eth0"}, "netns": "/proc/1/ns/net"}),
            ),
            (
                AgentRequest::Del {
                    attachment: attachment("c2", "net1"),
                },
                json!({"op": "del", "attachment": {"container_id": "c2", "ifname": "net1"}}),
            ),
            (
                AgentRequest::Check {
                    attachment: attachment("c3", "eth0"),
                },
                json!({"op": "check", "attachment": {"container_id": "c3", "ifname": "eth0"}}),
            ),
            (
                AgentRequest::Gc {
                    valid: vec![attachment("c1", "eth0"), attachment("c2", "net1")],
                },
                json!({"op": "gc", "valid": [{"container_id": "c1", "ifname": "eth0"},
                                             {"container_id": "c2", "ifname": "net1"}]}),
            ),
            (AgentRequest::Status, json!({"op": "status"})),
            (
                AgentRequest::Attach {
                    attachment: attachment("c1", "eth0"),
                    host_ifname: IfName::try_from("veth1234".to_owned()).unwrap(),
                    address: "10.0.1.5".parse().unwrap(),
                },
                json!({"op": "attach", "attachment": {"container_id": "c1", "ifname": "eth0"},
                       "host_ifname": "veth1234", "address": "10.0.1.5"}),
            ),
            (
                AgentRequest::Detach {
                    attachment: attachment("c1", "eth0"),
                },
                json!({"op": "detach", "attachment": {"container_id": "c1", "ifname": "eth0"}}),
            ),
        ];
        for (request, want) in table {
            let bytes = encode_request(&request);
            assert_eq!(
                serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
                want
            );
            assert_eq!(decode_request(&bytes).unwrap(), request);
        }
    }

    #[test]
    fn responses_round_trip_in_the_documented_shape() {
        let table = [
            (
                AgentResponse::Allocated(Allocation {
                    address: "10.0.1.5/32".parse().unwrap(),
                    gateway: Some("169.254.1.1".parse().unwrap()),
                    routes: vec![Route {
                        dst: "0.0.0.0/0".parse().unwrap(),
                        gw: Some("169.254.1.1".parse().unwrap()),
                    }],
                }),
                json!({"outcome": "allocated", "address": "10.0.1.5/32", "gateway": "169.254.1.1",
                       "routes": [{"dst": "0.0.0.0/0", "gw": "169.254.1.1"}]}),
            ),
            (AgentResponse::Done, json!({"outcome": "done"})),
            (
                AgentResponse::Failed(CniError::new(
                    3,
                    "container unknown",
                    "no allocation for c1/eth0",
                )),
                json!({"outcome": "failed", "code": 3, "msg": "container unknown", "details": "no allocation for c1/eth0"}),
            ),
        ];
        for (response, want) in table {
            let bytes = encode_response(&response);
            assert_eq!(
                serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
                want
            );
            assert_eq!(decode_response(&bytes).unwrap(), response);
        }
    }

    #[test]
    fn bad_messages_are_refused() {
        let bad_requests: [&[u8]; 9] = [
            b"",
            b"not json",
            br#"{"op":"frob"}"#,
            br#"{"op":"del"}"#,
            br#"{"op":"del","attachment":{"container_id":"-x","ifname":"eth0"}}"#,
            br#"{"op":"del","attachment":{"container_id":"c1","ifname":"much-too-long-name"}}"#,
            br#"{"op":"add","attachment":{"container_id":"c1","ifname":"eth0"}}"#,
            br#"{"op":"attach","attachment":{"container_id":"c1","ifname":"eth0"},"host_ifname":"veth1","address":"10.0.1.5/24"}"#,
            br#"{"op":"attach","attachment":{"container_id":"c1","ifname":"eth0"},"host_ifname":"a/b","address":"10.0.1.5"}"#,
        ];
        for bytes in bad_requests {
            assert!(
                decode_request(bytes).is_err(),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        let bad_responses: [&[u8]; 3] = [
            br#"{"outcome":"allocated","address":"10.0.1.5"}"#,
            br#"{"outcome":"failed","msg":"no code"}"#,
            br#"{"done":true}"#,
        ];
        for bytes in bad_responses {
            assert!(
                decode_response(bytes).is_err(),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        let huge = vec![b' '; MAX_MESSAGE_BYTES + 1];
        assert!(matches!(
            decode_request(&huge),
            Err(DecodeError::TooLarge(_))
        ));
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let got = decode_request(br#"{"op":"status","since":"v2"}"#).unwrap();
        assert_eq!(got, AgentRequest::Status);
        let got = decode_response(br#"{"outcome":"done","note":"x"}"#).unwrap();
        assert_eq!(got, AgentResponse::Done);
    }
}
