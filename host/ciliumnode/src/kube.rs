//! CiliumNode (cilium.io/v2, cluster-scoped) as the API server has it: a
//! `DynamicObject`, so that every field this operator does not model is kept
//! as it is; the engine's [`CiliumNode`] is read out of it. A reader that
//! never writes the object back whole (the node agent's watch) reads
//! [`NodeObject`] instead, straight into the IPAM fields.

use std::borrow::Cow;

use kube_core::{ApiResource, ClusterResourceScope, DynamicObject, ObjectMeta, Resource};
use serde::Deserialize;

use crate::node::{CiliumNode, NodeSpec, NodeStatus};

pub const GROUP: &str = "cilium.io";
pub const VERSION: &str = "v2";
pub const KIND: &str = "CiliumNode";
pub const PLURAL: &str = "ciliumnodes";

pub fn api_resource() -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: KIND.into(),
        plural: PLURAL.into(),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("CiliumNode without a name")]
    NoName,
    #[error("CiliumNode {name}: {source}")]
    Fields {
        name: String,
        source: serde_json::Error,
    },
}

#[derive(Deserialize, Default)]
struct Fields {
    #[serde(default)]
    spec: NodeSpec,
    #[serde(default)]
    status: NodeStatus,
}

/// The engine's view of an object: its name and the IPAM fields.
pub fn from_object(object: &DynamicObject) -> Result<CiliumNode, ObjectError> {
    let name = object.metadata.name.clone().ok_or(ObjectError::NoName)?;
    // Read from the borrowed value: the object is not copied first (a
    // CiliumNode with a thousand addresses is a few hundred kilobytes).
    let fields = Fields::deserialize(&object.data).map_err(|source| ObjectError::Fields {
        name: name.clone(),
        source,
    })?;
    Ok(CiliumNode {
        name,
        spec: fields.spec,
        status: fields.status,
    })
}

/// A CiliumNode read straight into the IPAM fields: the fields this crate
/// does not model are skipped while parsing, where a `DynamicObject` first
/// keeps every one of them as an untyped tree (for a node with a thousand
/// addresses, hundreds of kilobytes to allocate and copy at every event).
/// Only for reading: writing it back whole would drop those fields. A
/// malformed IPAM field fails the object's decoding.
#[derive(Debug, Clone, Deserialize)]
pub struct NodeObject {
    pub metadata: ObjectMeta,
    #[serde(default)]
    spec: NodeSpec,
    #[serde(default)]
    status: NodeStatus,
}

impl NodeObject {
    /// The engine's view: its name and the IPAM fields.
    pub fn into_node(self) -> Result<CiliumNode, ObjectError> {
        Ok(CiliumNode {
            name: self.metadata.name.ok_or(ObjectError::NoName)?,
            spec: self.spec,
            status: self.status,
        })
    }
}

impl Resource for NodeObject {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_json() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "cilium.io/v2", "kind": "CiliumNode",
            "metadata": {"name": "ip-10-0-1-17", "resourceVersion": "7"},
            "spec": {"instance-id": "i-1", "addresses": [{"ip": "10.0.1.17", "type": "InternalIP"}],
                     "health": {"ipv4": "10.0.1.99"},
                     "ipam": {"pre-allocate": 4, "pool": {"10.0.1.20": {"resource": "eni-1"}}},
                     "eni": {"first-interface-index": 1, "vpc-id": "vpc-1"}},
            "status": {"ipam": {"used": {"10.0.1.20": {"owner": "default/web"}}}}
        })
    }

    #[test]
    fn the_typed_object_reads_what_the_dynamic_one_reads() {
        let text = node_json().to_string();
        let typed: NodeObject = serde_json::from_str(&text).unwrap();
        assert_eq!(typed.metadata.resource_version.as_deref(), Some("7"));
        let dynamic: DynamicObject = serde_json::from_str(&text).unwrap();
        assert_eq!(typed.into_node().unwrap(), from_object(&dynamic).unwrap());
    }

    #[test]
    fn the_typed_object_names_its_resource_and_refuses_bad_fields() {
        assert_eq!(
            NodeObject::url_path(&(), None),
            "/apis/cilium.io/v2/ciliumnodes"
        );
        assert_eq!(NodeObject::api_version(&()), "cilium.io/v2");
        let mut bad = node_json();
        bad["spec"]["ipam"]["pre-allocate"] = serde_json::json!("many");
        let error = serde_json::from_value::<NodeObject>(bad).unwrap_err();
        assert!(error.to_string().contains("many"), "{error}");
        let mut nameless = node_json();
        nameless["metadata"] = serde_json::json!({});
        let object: NodeObject = serde_json::from_value(nameless).unwrap();
        assert!(matches!(object.into_node(), Err(ObjectError::NoName)));
    }

    #[test]
    fn reads_the_ipam_fields_and_ignores_the_rest() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "cilium.io/v2", "kind": "CiliumNode",
            "metadata": {"name": "ip-10-0-1-17", "resourceVersion": "7"},
            "spec": {"instance-id": "i-1", "addresses": [{"ip": "10.0.1.17", "type": "InternalIP"}],
                     "health": {"ipv4": "10.0.1.99"},
                     "ipam": {"pre-allocate": 4, "pool": {"10.0.1.20": {"resource": "eni-1"}}},
                     "eni": {"first-interface-index": 1, "vpc-id": "vpc-1"}},
            "status": {"ipam": {"used": {"10.0.1.20": {"owner": "default/web"}}}}
        }))
        .unwrap();
        let node = from_object(&object).unwrap();
        assert_eq!(node.name, "ip-10-0-1-17");
        assert_eq!(node.spec.instance_id, "i-1");
        assert_eq!(node.spec.ipam.pre_allocate, Some(4));
        assert_eq!(node.spec.eni.first_interface_index, Some(1));
        assert_eq!(node.status.ipam.used.len(), 1);
    }

    #[test]
    fn a_malformed_field_is_an_error_naming_the_node() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "cilium.io/v2", "kind": "CiliumNode",
            "metadata": {"name": "bad"},
            "spec": {"ipam": {"pre-allocate": "many"}}
        }))
        .unwrap();
        let error = from_object(&object).unwrap_err().to_string();
        assert!(error.contains("bad"), "{error}");
    }
}
