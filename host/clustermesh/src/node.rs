//! The value at `cilium/state/nodes/v1/<cluster>/<name>`, as the agents
//! write it: Cilium's `nodeTypes.Node` through Go's `encoding/json` with no
//! JSON tags, so the field names are Go's (`Name`, `IPv4AllocCIDR`, ...),
//! IPs are strings (`""` when unset), nil maps and slices are `null`, and a
//! CIDR is a `net.IPNet`: `{"IP": "10.0.1.0", "Mask": "<base64 bytes>"}`.
//!
//! The operator only reads these (to report what it deletes), so the value
//! is parsed once, here, into [`AgentNode`]; a field that is not what the
//! agents write is a [`NodeValueError`] naming the key and the field.
//! Fields not listed here are ignored.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use base64::Engine;
use serde_json::{Map, Value};

/// A node's address and its kind (`InternalIP`, `ExternalIP`,
/// `CiliumInternalIP`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddress {
    pub kind: String,
    pub ip: IpAddr,
}

/// An address block: what a Go `net.IPNet` holds, as address and prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// What an agent registered for its node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentNode {
    pub name: String,
    pub cluster: String,
    pub addresses: Vec<NodeAddress>,
    pub ipv4_alloc_cidr: Option<Cidr>,
    pub ipv4_secondary_alloc_cidrs: Vec<Cidr>,
    pub ipv6_alloc_cidr: Option<Cidr>,
    pub ipv6_secondary_alloc_cidrs: Vec<Cidr>,
    pub ipv4_health_ip: Option<IpAddr>,
    pub ipv6_health_ip: Option<IpAddr>,
    pub ipv4_ingress_ip: Option<IpAddr>,
    pub ipv6_ingress_ip: Option<IpAddr>,
    pub cluster_id: u32,
    /// Where the agent learnt its node (`local`, `kvstore`, ...).
    pub source: String,
    pub encryption_key: u8,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub node_identity: u32,
    pub wireguard_pub_key: String,
    pub boot_id: String,
}

/// A node value that is not what the agents write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeValueError {
    #[error("node key {key}: not a JSON object: {problem}")]
    NotAnObject { key: String, problem: String },
    #[error("node key {key}: field {field}: {problem}")]
    Field {
        key: String,
        field: &'static str,
        problem: String,
    },
}

/// Reads one object's fields, naming the key and field in every error.
struct Fields<'a> {
    key: &'a str,
    map: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    fn error(&self, field: &'static str, problem: impl Into<String>) -> NodeValueError {
        NodeValueError::Field {
            key: self.key.to_string(),
            field,
            problem: problem.into(),
        }
    }

    /// The field, with `null` and absence both as `None`.
    fn get(&self, field: &'static str) -> Option<&'a Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    fn string(&self, field: &'static str) -> Result<String, NodeValueError> {
        match self.get(field) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(self.error(field, format!("not a string: {other}"))),
        }
    }

    fn uint<T: TryFrom<u64> + Default>(&self, field: &'static str) -> Result<T, NodeValueError> {
        match self.get(field) {
            None => Ok(T::default()),
            Some(value) => value
                .as_u64()
                .and_then(|n| T::try_from(n).ok())
                .ok_or_else(|| self.error(field, format!("not an integer in range: {value}"))),
        }
    }

    fn ip(&self, field: &'static str) -> Result<Option<IpAddr>, NodeValueError> {
        match self.get(field) {
            None => Ok(None),
            Some(value) => parse_ip(value).map_err(|problem| self.error(field, problem)),
        }
    }

    fn cidr(&self, field: &'static str) -> Result<Option<Cidr>, NodeValueError> {
        match self.get(field) {
            None => Ok(None),
            Some(value) => parse_ipnet(value)
                .map(Some)
                .map_err(|problem| self.error(field, problem)),
        }
    }

    fn cidrs(&self, field: &'static str) -> Result<Vec<Cidr>, NodeValueError> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .filter(|(_, v)| !v.is_null())
                .map(|(i, v)| parse_ipnet(v).map_err(|p| self.error(field, format!("[{i}]: {p}"))))
                .collect(),
            Some(other) => Err(self.error(field, format!("not a list: {other}"))),
        }
    }

    fn string_map(&self, field: &'static str) -> Result<BTreeMap<String, String>, NodeValueError> {
        match self.get(field) {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    other => Err(self.error(field, format!("{k}: not a string: {other}"))),
                })
                .collect(),
            Some(other) => Err(self.error(field, format!("not an object: {other}"))),
        }
    }

    fn addresses(&self, field: &'static str) -> Result<Vec<NodeAddress>, NodeValueError> {
        let items = match self.get(field) {
            None => return Ok(Vec::new()),
            Some(Value::Array(items)) => items,
            Some(other) => return Err(self.error(field, format!("not a list: {other}"))),
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let fail = |p: String| self.error(field, format!("[{i}]: {p}"));
                let Value::Object(address) = item else {
                    return Err(fail(format!("not an object: {item}")));
                };
                let kind = match address.get("Type") {
                    Some(Value::String(s)) => s.clone(),
                    None | Some(Value::Null) => String::new(),
                    Some(other) => return Err(fail(format!("Type: not a string: {other}"))),
                };
                let ip = address
                    .get("IP")
                    .map(parse_ip)
                    .transpose()
                    .map_err(|p| fail(format!("IP: {p}")))?
                    .flatten()
                    .ok_or_else(|| fail("IP: missing".to_string()))?;
                Ok(NodeAddress { kind, ip })
            })
            .collect()
    }
}

/// A Go `net.IP` as JSON: its text form, `""` for a nil IP.
fn parse_ip(value: &Value) -> Result<Option<IpAddr>, String> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => s
            .parse()
            .map(Some)
            .map_err(|_| format!("not an IP address: {s:?}")),
        other => Err(format!("not a string: {other}")),
    }
}

/// A Go `net.IPNet` as JSON: `{"IP": "<address>", "Mask": "<base64>"}`.
/// The mask is 4 bytes for IPv4 and 16 for IPv6; Go also allows a 16-byte
/// mask on an IPv4 address, whose first 12 bytes are then all ones.
fn parse_ipnet(value: &Value) -> Result<Cidr, String> {
    let Value::Object(net) = value else {
        return Err(format!("not an IPNet object: {value}"));
    };
    let addr = net
        .get("IP")
        .map(parse_ip)
        .transpose()
        .map_err(|p| format!("IP: {p}"))?
        .flatten()
        .ok_or("IP: missing")?;
    let mask = match net.get("Mask") {
        Some(Value::String(s)) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|e| format!("Mask: not base64 ({e}): {s:?}"))?,
        Some(other) => return Err(format!("Mask: not a string: {other}")),
        None => return Err("Mask: missing".into()),
    };
    let mask = match (addr, mask.len()) {
        (IpAddr::V4(_), 4) | (IpAddr::V6(_), 16) => &mask[..],
        (IpAddr::V4(_), 16) if mask[..12].iter().all(|b| *b == 0xff) => &mask[12..],
        (_, n) => return Err(format!("Mask: {n} bytes for {addr}")),
    };
    let prefix = prefix_of(mask).ok_or_else(|| format!("Mask: not contiguous: {mask:?}"))?;
    Ok(Cidr { addr, prefix })
}

/// The prefix length of a mask of leading ones, if it is one.
fn prefix_of(mask: &[u8]) -> Option<u8> {
    let ones: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let contiguous = mask.iter().enumerate().all(|(i, b)| {
        let bit = i as u32 * 8;
        let expected = match ones.saturating_sub(bit) {
            0 => 0u8,
            n if n >= 8 => 0xff,
            n => 0xffu8 << (8 - n),
        };
        *b == expected
    });
    contiguous.then(|| u8::try_from(ones).ok()).flatten()
}

impl AgentNode {
    /// Parse the value at `key`.
    pub fn parse(key: &str, value: &[u8]) -> Result<Self, NodeValueError> {
        let map: Map<String, Value> =
            serde_json::from_slice(value).map_err(|e| NodeValueError::NotAnObject {
                key: key.to_string(),
                problem: e.to_string(),
            })?;
        let f = Fields { key, map: &map };
        Ok(Self {
            name: f.string("Name")?,
            cluster: f.string("Cluster")?,
            addresses: f.addresses("IPAddresses")?,
            ipv4_alloc_cidr: f.cidr("IPv4AllocCIDR")?,
            ipv4_secondary_alloc_cidrs: f.cidrs("IPv4SecondaryAllocCIDRs")?,
            ipv6_alloc_cidr: f.cidr("IPv6AllocCIDR")?,
            ipv6_secondary_alloc_cidrs: f.cidrs("IPv6SecondaryAllocCIDRs")?,
            ipv4_health_ip: f.ip("IPv4HealthIP")?,
            ipv6_health_ip: f.ip("IPv6HealthIP")?,
            ipv4_ingress_ip: f.ip("IPv4IngressIP")?,
            ipv6_ingress_ip: f.ip("IPv6IngressIP")?,
            cluster_id: f.uint("ClusterID")?,
            source: f.string("Source")?,
            encryption_key: f.uint("EncryptionKey")?,
            labels: f.string_map("Labels")?,
            annotations: f.string_map("Annotations")?,
            node_identity: f.uint("NodeIdentity")?,
            wireguard_pub_key: f.string("WireguardPubKey")?,
            boot_id: f.string("BootID")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_of_masks() {
        assert_eq!(prefix_of(&[255, 255, 255, 0]), Some(24));
        assert_eq!(prefix_of(&[255, 255, 254, 0]), Some(23));
        assert_eq!(prefix_of(&[0, 0, 0, 0]), Some(0));
        assert_eq!(prefix_of(&[255; 16]), Some(128));
        assert_eq!(prefix_of(&[255, 0, 255, 0]), None);
        assert_eq!(prefix_of(&[255, 255, 0b1011_0000, 0]), None);
    }

    fn ipnet(json: Value) -> Result<Cidr, String> {
        parse_ipnet(&json)
    }

    #[test]
    fn go_ipnets() {
        let v4 = ipnet(serde_json::json!({"IP": "10.0.1.0", "Mask": "////AA=="})).unwrap();
        assert_eq!(v4.to_string(), "10.0.1.0/24");
        let v6 =
            ipnet(serde_json::json!({"IP": "fd00:10:0:1::", "Mask": "//////////8AAAAAAAAAAA=="}))
                .unwrap();
        assert_eq!(v6.to_string(), "fd00:10:0:1::/64");
        // An IPv4 network with Go's 16-byte mask form.
        let long = ipnet(serde_json::json!({"IP": "10.0.2.0", "Mask": "////////////////////AA=="}))
            .unwrap();
        assert_eq!(long.to_string(), "10.0.2.0/24");
        for (bad, expected) in [
            (
                serde_json::json!({"IP": "10.0.1.0", "Mask": "***"}),
                "not base64",
            ),
            (
                serde_json::json!({"IP": "10.0.1.0", "Mask": "//8A"}),
                "3 bytes",
            ),
            (
                serde_json::json!({"IP": "10.0.1.0", "Mask": "/wD/AA=="}),
                "not contiguous",
            ),
            (serde_json::json!({"IP": "10.0.1.0"}), "Mask: missing"),
            (
                serde_json::json!({"IP": "ten", "Mask": "////AA=="}),
                "not an IP",
            ),
            (serde_json::json!("10.0.1.0/24"), "not an IPNet"),
        ] {
            let error = ipnet(bad).unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
    }
}
