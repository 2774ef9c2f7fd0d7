//! CiliumNode (cilium.io/v2, cluster-scoped) as the API server has it: a
//! `DynamicObject`, so that every field this operator does not model is kept
//! as it is; the engine's [`CiliumNode`] is read out of it. A reader that
//! never writes the object back whole (the node agent's watch) reads
//! [`NodeObject`] instead, straight into the IPAM fields.

use std::borrow::Cow;

use kube_core::{ApiResource, ClusterResourceScope, DynamicObject, ObjectMeta, Resource};
use serde::Deserialize;
use serde_json::value::RawValue;

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

/// A CiliumNode read without an untyped copy of its fields: `spec` and
/// `status` are kept as their JSON text while the event or list is decoded
/// and read into the IPAM fields by [`NodeObject::into_node`], where a
/// `DynamicObject` first builds every field as a tree of values (for a node
/// with a thousand addresses, hundreds of kilobytes to allocate and copy at
/// every event). A malformed field fails `into_node`, with the node's name,
/// not the decoding of the watch event or list that carried it. Only for
/// reading: writing it back whole would drop the fields it does not model.
#[derive(Debug, Clone, Deserialize)]
pub struct NodeObject {
    pub metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<Box<RawValue>>,
    #[serde(default)]
    status: Option<Box<RawValue>>,
}

impl NodeObject {
    /// The engine's view: its name and the IPAM fields.
    pub fn into_node(self) -> Result<CiliumNode, ObjectError> {
        fn read<T: Default + serde::de::DeserializeOwned>(
            raw: Option<Box<RawValue>>,
        ) -> Result<T, serde_json::Error> {
            raw.map_or_else(|| Ok(T::default()), |raw| serde_json::from_str(raw.get()))
        }
        let name = self.metadata.name.ok_or(ObjectError::NoName)?;
        let fields = || Ok::<_, serde_json::Error>((read(self.spec)?, read(self.status)?));
        match fields() {
            Ok((spec, status)) => Ok(CiliumNode { name, spec, status }),
            Err(source) => Err(ObjectError::Fields { name, source }),
        }
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
    fn the_node_object_reads_what_the_dynamic_one_reads() {
        let text = node_json().to_string();
        let typed: NodeObject = serde_json::from_str(&text).unwrap();
        assert_eq!(typed.metadata.resource_version.as_deref(), Some("7"));
        let dynamic: DynamicObject = serde_json::from_str(&text).unwrap();
        assert_eq!(typed.into_node().unwrap(), from_object(&dynamic).unwrap());
        let bare: NodeObject =
            serde_json::from_str(r#"{"metadata": {"name": "n"}, "status": null}"#).unwrap();
        assert_eq!(bare.into_node().unwrap().name, "n");
        assert_eq!(
            NodeObject::url_path(&(), None),
            "/apis/cilium.io/v2/ciliumnodes"
        );
        assert_eq!(NodeObject::api_version(&()), "cilium.io/v2");
    }

    /// As the watch reads it: the event decodes, and the bad field is an
    /// error of that node naming it.
    #[test]
    fn a_malformed_field_fails_the_node_not_the_watch_event() {
        let mut bad = node_json();
        bad["spec"]["ipam"]["pre-allocate"] = serde_json::json!("many");
        // The type first, as the API server writes it.
        let line = format!(r#"{{"type":"MODIFIED","object":{bad}}}"#);
        let event: kube_core::WatchEvent<NodeObject> = serde_json::from_str(&line).unwrap();
        let kube_core::WatchEvent::Modified(object) = event else {
            panic!("not a modification: {event:?}");
        };
        let error = object.into_node().unwrap_err().to_string();
        assert!(
            error.contains("ip-10-0-1-17") && error.contains("many"),
            "{error}"
        );
        let mut nameless = node_json();
        nameless["metadata"] = serde_json::json!({});
        let object: NodeObject = serde_json::from_str(&nameless.to_string()).unwrap();
        assert!(matches!(object.into_node(), Err(ObjectError::NoName)));
    }

    #[test]
    fn reads_the_ipam_fields_and_ignores_the_rest() {
        let object: DynamicObject = serde_json::from_value(node_json()).unwrap();
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
