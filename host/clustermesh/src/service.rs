//! The value at `cilium/state/services/v1/<cluster>/<namespace>/<name>`:
//! Cilium's `ClusterService`, in the JSON its agents and clustermesh peers
//! decode (Go's `encoding/json` over the struct's tags).
//!
//! Maps are `BTreeMap`s so that one service always encodes to the same
//! bytes: the services store compares bytes to write only what changed.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use crate::cluster::keys;

/// A port of a frontend or backend. Go's `loadbalancer.L4Addr` has no JSON
/// tags, so the field names are Go's, capitalised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct L4Addr {
    /// `TCP`, `UDP` or `SCTP`.
    #[serde(rename = "Protocol")]
    pub protocol: String,
    #[serde(rename = "Port")]
    pub port: u16,
}

/// Port name (empty for a service's single unnamed port) -> port.
pub type PortConfiguration = BTreeMap<String, L4Addr>;

/// Where a backend runs, for topology-aware routing across clusters
/// (Cilium's `BackendZone`): its zone, and the zones its EndpointSlice
/// hints say should use it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BackendZone {
    pub zone: String,
    /// Go has no `omitempty` here: an empty list is written as `[]`.
    #[serde(rename = "forZones", default, deserialize_with = "null_as_default")]
    pub for_zones: Vec<ForZone>,
}

/// One zone a backend is meant for (shaped like the Kubernetes hint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForZone {
    pub name: String,
}

/// A global, shared service of one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClusterService {
    pub cluster: String,
    pub namespace: String,
    pub name: String,
    /// Frontend IP -> the service's ports.
    #[serde(default, deserialize_with = "null_as_default")]
    pub frontends: BTreeMap<String, PortConfiguration>,
    /// Backend IP -> the ports it serves.
    #[serde(default, deserialize_with = "null_as_default")]
    pub backends: BTreeMap<String, PortConfiguration>,
    /// Backend IP -> its hostname (Go: `omitempty`).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub hostnames: BTreeMap<String, String>,
    /// Backend IP -> its zone (Go: `omitempty`; a peer whose Cilium has
    /// no such field skips it, as Go's decoder skips unknown fields).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub zones: BTreeMap<String, BackendZone>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub selector: BTreeMap<String, String>,
    #[serde(rename = "includeExternal", default)]
    pub include_external: bool,
    #[serde(default)]
    pub shared: bool,
    #[serde(rename = "clusterID", default)]
    pub cluster_id: u32,
}

/// Go writes a nil map or slice as `null`; read it as empty.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

impl ClusterService {
    /// Its key; peers drop a value whose cluster, namespace or name differ
    /// from the key's, so the key is always made from the value.
    pub fn key(&self) -> String {
        keys::service(&self.cluster, &self.namespace, &self.name)
    }

    /// The JSON written to the kvstore.
    pub fn to_json(&self) -> Vec<u8> {
        // Strings, integers, booleans and string-keyed maps only: encoding
        // cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}
