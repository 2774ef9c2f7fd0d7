//! CiliumNodes exactly as Cilium 1.16's Go code writes them, for tests: the
//! JSON in `fixtures/` (where each field's presence and form comes from:
//! `fixtures/README.md`). Go's encoding/json never omits a struct value, so
//! every node carries `spec.eni`, `spec.azure` and `spec.alibaba-cloud` (and
//! `health`, `ingress`, `encryption`, `ipam.pools`, `status.ipam.operator-status`)
//! as objects, empty ones included, whatever the IPAM mode. Tests that build
//! nodes start from these, so that nothing passes only for nodes shaped like
//! this project's own model.

use serde_json::Value;

use crate::CiliumNode;

/// An ENI-mode node as cilium-agent registers it.
pub const ENI_AGENT_REGISTERED: &str = include_str!("../fixtures/eni-agent-registered.json");
/// That node after Cilium's operator wrote its pool and status.eni.enis.
pub const ENI_OPERATOR_WRITTEN: &str = include_str!("../fixtures/eni-operator-written.json");
/// An Azure-mode node as cilium-agent registers it.
pub const AZURE_AGENT_REGISTERED: &str = include_str!("../fixtures/azure-agent-registered.json");
/// That node after Cilium's operator wrote its pool and
/// status.azure.interfaces.
pub const AZURE_OPERATOR_WRITTEN: &str = include_str!("../fixtures/azure-operator-written.json");

/// A fixture as a Kubernetes object, renamed to `name` (metadata, the owner
/// reference, the hostname label) and given `instance_id`.
pub fn object(fixture: &str, name: &str, instance_id: &str) -> Value {
    let mut object: Value = serde_json::from_str(fixture).expect("a fixture is JSON");
    object["metadata"]["name"] = name.into();
    if let Some(owner) = object["metadata"]["ownerReferences"].get_mut(0) {
        owner["name"] = name.into();
    }
    if let Some(labels) = object["metadata"]["labels"].as_object_mut() {
        labels.insert("kubernetes.io/hostname".into(), name.into());
    }
    object["spec"]["instance-id"] = instance_id.into();
    object
}

/// A Kubernetes object as the operator's model reads it.
pub fn node_of(object: &Value) -> CiliumNode {
    let mut node = CiliumNode {
        name: object["metadata"]["name"]
            .as_str()
            .expect("a named object")
            .to_string(),
        ..Default::default()
    };
    node.spec = serde_json::from_value(object["spec"].clone()).expect("a fixture's spec");
    node.status = serde_json::from_value(object["status"].clone()).expect("a fixture's status");
    node
}

/// A node of `instance_id` as cilium-agent in ENI mode registers it.
pub fn eni_node(name: &str, instance_id: &str) -> CiliumNode {
    node_of(&object(ENI_AGENT_REGISTERED, name, instance_id))
}

/// A node of `instance_id` as cilium-agent in Azure mode registers it.
pub fn azure_node(name: &str, instance_id: &str) -> CiliumNode {
    node_of(&object(AZURE_AGENT_REGISTERED, name, instance_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fixture_reads_and_carries_both_clouds_specs() {
        for fixture in [
            ENI_AGENT_REGISTERED,
            ENI_OPERATOR_WRITTEN,
            AZURE_AGENT_REGISTERED,
            AZURE_OPERATOR_WRITTEN,
        ] {
            let object = object(fixture, "n1", "i-1");
            for field in ["eni", "azure", "alibaba-cloud"] {
                assert!(
                    object["spec"][field].is_object(),
                    "spec.{field} in {fixture}"
                );
            }
            let node = node_of(&object);
            assert_eq!(
                (node.name.as_str(), node.spec.instance_id.as_str()),
                ("n1", "i-1")
            );
        }
    }

    #[test]
    fn an_eni_node_reads_its_eni_spec_and_an_empty_azure_one() {
        let node = eni_node("n1", "i-1");
        assert_eq!(node.spec.eni.instance_type, "m5.large");
        assert_eq!(node.spec.azure, Default::default());
        let azure = azure_node("n2", "vm-2");
        assert_eq!(azure.spec.eni, Default::default());
    }
}
