//! The boundary: API objects read into the GC's plain data. What cannot be
//! read is an error naming the object, for the caller to log and skip: an
//! endpoint the GC cannot read is never deleted.

use kube::api::{ApiResource, DynamicObject};
use kube::core::{GroupVersionKind, ObjectMeta};

use super::decide::{Endpoint, Key, Owner};

pub const GROUP: &str = "cilium.io";
pub const VERSION: &str = "v2";
pub const KIND: &str = "CiliumEndpoint";
pub const PLURAL: &str = "ciliumendpoints";

/// cilium.io/v2 CiliumEndpoint, namespaced.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unreadable {
    #[error("a {0} without a name")]
    NoName(&'static str),
    #[error("{kind} {name} without a namespace")]
    NoNamespace { kind: &'static str, name: String },
    #[error("CiliumEndpoint {0} without a uid")]
    NoUid(String),
    #[error("CiliumEndpoint {0}: an owner reference without a kind or a name")]
    BadOwner(String),
}

fn present(field: Option<&String>) -> Option<&str> {
    field.map(String::as_str).filter(|s| !s.is_empty())
}

/// (namespace, name) of a namespaced object.
fn key(kind: &'static str, meta: &ObjectMeta) -> Result<Key, Unreadable> {
    let name = present(meta.name.as_ref()).ok_or(Unreadable::NoName(kind))?;
    let namespace = present(meta.namespace.as_ref()).ok_or_else(|| Unreadable::NoNamespace {
        kind,
        name: name.to_string(),
    })?;
    Ok((namespace.to_string(), name.to_string()))
}

pub fn endpoint(object: &DynamicObject) -> Result<Endpoint, Unreadable> {
    let (namespace, name) = key(KIND, &object.metadata)?;
    let path = format!("{namespace}/{name}");
    let uid = present(object.metadata.uid.as_ref())
        .ok_or_else(|| Unreadable::NoUid(path.clone()))?
        .to_string();
    let owners = object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|owner| {
            if owner.kind.is_empty() || owner.name.is_empty() {
                Err(Unreadable::BadOwner(path.clone()))
            } else {
                Ok(Owner {
                    kind: owner.kind.clone(),
                    name: owner.name.clone(),
                })
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(Endpoint {
        namespace,
        name,
        uid,
        owners,
    })
}

/// A pod's (namespace, name) and phase, if it reports one (a phase that is
/// not a string is none: the pod counts as live, keeping its endpoint).
pub fn pod(pod: &DynamicObject) -> Result<(Key, Option<String>), Unreadable> {
    let key = key("Pod", &pod.metadata)?;
    let phase = pod
        .data
        .pointer("/status/phase")
        .and_then(|p| p.as_str())
        .map(String::from);
    Ok((key, phase))
}

pub fn node(node: &DynamicObject) -> Result<String, Unreadable> {
    present(node.metadata.name.as_ref())
        .map(String::from)
        .ok_or(Unreadable::NoName("CiliumNode"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn an_endpoint_is_read_with_its_owners() {
        let cep = object(json!({
            "apiVersion": "cilium.io/v2", "kind": "CiliumEndpoint",
            "metadata": {"name": "web-1", "namespace": "default", "uid": "u1",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web-1", "uid": "p1"}]},
            "status": {"id": 1}
        }));
        assert_eq!(
            endpoint(&cep),
            Ok(Endpoint {
                namespace: "default".into(),
                name: "web-1".into(),
                uid: "u1".into(),
                owners: vec![Owner {
                    kind: "Pod".into(),
                    name: "web-1".into()
                }],
            })
        );
    }

    #[test]
    fn an_endpoint_missing_what_the_gc_needs_is_unreadable() {
        let cases = [
            (
                json!({"metadata": {"namespace": "default", "uid": "u1"}}),
                Unreadable::NoName(KIND),
            ),
            (
                json!({"metadata": {"name": "e", "uid": "u1"}}),
                Unreadable::NoNamespace {
                    kind: KIND,
                    name: "e".into(),
                },
            ),
            (
                json!({"metadata": {"name": "e", "namespace": "default"}}),
                Unreadable::NoUid("default/e".into()),
            ),
            (
                json!({"metadata": {"name": "e", "namespace": "default", "uid": ""}}),
                Unreadable::NoUid("default/e".into()),
            ),
            (
                json!({"metadata": {"name": "e", "namespace": "default", "uid": "u1",
                    "ownerReferences": [{"apiVersion": "v1", "kind": "", "name": "p", "uid": "p1"}]}}),
                Unreadable::BadOwner("default/e".into()),
            ),
        ];
        for (value, expected) in cases {
            assert_eq!(endpoint(&object(value.clone())), Err(expected), "{value}");
        }
    }

    #[test]
    fn pods_and_nodes_are_read_by_name() {
        let running = object(json!({
            "metadata": {"name": "web-1", "namespace": "default"},
            "status": {"phase": "Running"}
        }));
        assert_eq!(
            pod(&running),
            Ok((("default".into(), "web-1".into()), Some("Running".into())))
        );
        let fresh = object(json!({"metadata": {"name": "p", "namespace": "n"}}));
        assert_eq!(pod(&fresh), Ok((("n".into(), "p".into()), None)));
        let odd =
            object(json!({"metadata": {"name": "p", "namespace": "n"}, "status": {"phase": 3}}));
        assert_eq!(pod(&odd), Ok((("n".into(), "p".into()), None)));
        let nameless = object(json!({"metadata": {"namespace": "n"}}));
        assert_eq!(pod(&nameless), Err(Unreadable::NoName("Pod")));
        assert_eq!(
            node(&object(json!({"metadata": {"name": "n1"}}))),
            Ok("n1".to_string())
        );
        assert_eq!(
            node(&object(json!({"metadata": {}}))),
            Err(Unreadable::NoName("CiliumNode"))
        );
    }
}
