//! What the agent registers in its CiliumNode, as plain data: the instance's
//! facts (from the cloud's metadata service or flags), the interface
//! selection and the watermarks the operator works to, and the owner
//! reference to the Node (so the CiliumNode goes when the Node does).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

/// The instance, as its metadata service (or the flags) describe it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub instance_id: String,
    pub instance_type: String,
    pub availability_zone: String,
    pub vpc_id: String,
    pub node_subnet_id: String,
    /// An Azure VM: the node carries spec.azure and no spec.eni. The
    /// operator's IPAM mode is its own setting; this only says which spec
    /// the facts belong in.
    pub azure: bool,
}

/// How the operator should make interfaces for this node (spec.eni).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceSelection {
    pub first_interface_index: Option<u32>,
    pub subnet_ids: Vec<String>,
    pub subnet_tags: BTreeMap<String, String>,
    pub security_group_ids: Vec<String>,
    pub security_group_tags: BTreeMap<String, String>,
}

/// spec.ipam's watermarks; unset ones are left to the operator's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Watermarks {
    pub pre_allocate: Option<u32>,
    pub min_allocate: Option<u32>,
    pub max_allocate: Option<u32>,
    pub max_above_watermark: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registration {
    pub facts: NodeFacts,
    pub interfaces: InterfaceSelection,
    pub watermarks: Watermarks,
}

fn insert_some(map: &mut Map<String, Value>, key: &str, value: Option<u32>) {
    if let Some(value) = value {
        map.insert(key.into(), json!(value));
    }
}

impl Registration {
    /// The CiliumNode's spec fields the agent owns, as a merge patch body
    /// (`{"spec": ...}`); fields it does not own are not named.
    pub fn spec(&self) -> Value {
        let mut ipam = Map::new();
        insert_some(&mut ipam, "pre-allocate", self.watermarks.pre_allocate);
        insert_some(&mut ipam, "min-allocate", self.watermarks.min_allocate);
        insert_some(&mut ipam, "max-allocate", self.watermarks.max_allocate);
        insert_some(
            &mut ipam,
            "max-above-watermark",
            self.watermarks.max_above_watermark,
        );
        let mut spec = Map::new();
        spec.insert("instance-id".into(), json!(self.facts.instance_id));
        if !ipam.is_empty() {
            spec.insert("ipam".into(), Value::Object(ipam));
        }
        if self.facts.azure {
            spec.insert("azure".into(), json!({}));
        } else {
            let mut eni = Map::new();
            // A fact not known (the metadata service gave none) is not
            // named, so it does not blank what an earlier run wrote.
            for (key, fact) in [
                ("instance-type", &self.facts.instance_type),
                ("availability-zone", &self.facts.availability_zone),
                ("vpc-id", &self.facts.vpc_id),
                ("node-subnet-id", &self.facts.node_subnet_id),
            ] {
                if !fact.is_empty() {
                    eni.insert(key.into(), json!(fact));
                }
            }
            insert_some(
                &mut eni,
                "first-interface-index",
                self.interfaces.first_interface_index,
            );
            eni.insert("subnet-ids".into(), json!(self.interfaces.subnet_ids));
            eni.insert("subnet-tags".into(), json!(self.interfaces.subnet_tags));
            eni.insert(
                "security-groups".into(),
                json!(self.interfaces.security_group_ids),
            );
            eni.insert(
                "security-group-tags".into(),
                json!(self.interfaces.security_group_tags),
            );
            spec.insert("eni".into(), Value::Object(eni));
        }
        json!({ "spec": spec })
    }
}

/// The owner reference to the Node the agent runs on.
pub fn node_owner(node: &str, uid: &str) -> Value {
    json!([{
        "apiVersion": "v1",
        "kind": "Node",
        "name": node,
        "uid": uid,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_ciliumnode::CiliumNode;

    fn aws() -> Registration {
        Registration {
            facts: NodeFacts {
                instance_id: "i-0123456789abcdef0".into(),
                instance_type: "m5.large".into(),
                availability_zone: "us-east-1a".into(),
                vpc_id: "vpc-1".into(),
                node_subnet_id: "subnet-1".into(),
                azure: false,
            },
            interfaces: InterfaceSelection {
                first_interface_index: Some(1),
                subnet_tags: BTreeMap::from([("cluster".into(), "a".into())]),
                security_group_ids: vec!["sg-1".into()],
                ..Default::default()
            },
            watermarks: Watermarks {
                pre_allocate: Some(4),
                max_above_watermark: Some(2),
                ..Default::default()
            },
        }
    }

    #[test]
    fn the_spec_reads_back_as_the_operator_reads_it() {
        let mut object = aws().spec();
        object["name"] = json!("n1");
        let node: CiliumNode = serde_json::from_value(object).unwrap();
        assert_eq!(node.spec.instance_id, "i-0123456789abcdef0");
        assert_eq!(node.spec.eni.instance_type, "m5.large");
        assert_eq!(node.spec.eni.availability_zone, "us-east-1a");
        assert_eq!(node.spec.eni.vpc_id, "vpc-1");
        assert_eq!(node.spec.eni.node_subnet_id, "subnet-1");
        assert_eq!(node.spec.eni.first_interface_index, Some(1));
        assert_eq!(node.spec.eni.subnet_tags["cluster"], "a");
        assert_eq!(node.spec.eni.security_groups, ["sg-1"]);
        assert_eq!(node.spec.ipam.pre_allocate, Some(4));
        assert_eq!(node.spec.ipam.min_allocate, None, "unset: not named");
        assert_eq!(node.spec.ipam.max_above_watermark, Some(2));
        assert_eq!(node.spec.azure, Default::default(), "no spec.azure");
    }

    #[test]
    fn facts_not_known_are_not_named() {
        let mut registration = aws();
        registration.facts.vpc_id.clear();
        registration.facts.node_subnet_id.clear();
        let spec = registration.spec();
        let eni = spec["spec"]["eni"].as_object().unwrap();
        assert!(!eni.contains_key("vpc-id") && !eni.contains_key("node-subnet-id"));
        assert_eq!(eni["instance-type"], "m5.large");
    }

    #[test]
    fn an_azure_node_carries_spec_azure_and_no_eni() {
        let mut registration = aws();
        registration.facts.azure = true;
        registration.watermarks = Watermarks::default();
        let spec = registration.spec();
        assert_eq!(spec["spec"]["azure"], json!({}));
        assert!(spec["spec"].get("eni").is_none());
        assert!(spec["spec"].get("ipam").is_none(), "no watermark set");
    }
}
