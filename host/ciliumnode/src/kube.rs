//! CiliumNode (cilium.io/v2, cluster-scoped) as the API server has it: a
//! `DynamicObject`, so that every field this operator does not model is kept
//! as it is; the engine's [`CiliumNode`] is read out of it.

use kube_core::{ApiResource, DynamicObject};
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

#[cfg(test)]
mod tests {
    use super::*;

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
