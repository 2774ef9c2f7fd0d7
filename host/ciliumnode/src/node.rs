//! The IPAM fields of a CiliumNode (cilium.io/v2), named as in the CRD, so
//! that the Kubernetes store maps them one to one. Only what the engine reads
//! or writes is modelled; the Kubernetes store keeps every other field.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::release_state::ReleaseState;

/// Cilium's default `pre-allocate` for ENI and Azure IPAM.
pub const DEFAULT_PRE_ALLOCATE: u32 = 8;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CiliumNode {
    /// metadata.name
    pub name: String,
    #[serde(default)]
    pub spec: NodeSpec,
    #[serde(default)]
    pub status: NodeStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NodeSpec {
    #[serde(default)]
    pub instance_id: String,
    #[serde(default)]
    pub ipam: IpamSpec,
    /// spec.eni: read in ENI mode.
    #[serde(default)]
    pub eni: EniSpec,
    /// spec.azure: read in Azure mode. Cilium's Go agent writes it, as it
    /// writes spec.eni, in every mode (an empty object when unused), so its
    /// presence says nothing of the mode: that is the operator's setting.
    #[serde(default)]
    pub azure: AzureSpec,
}

/// spec.azure, as far as the operator reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AzureSpec {
    /// The only interface addresses are assigned on (the NIC's resource
    /// name); empty: any of the node's interfaces.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interface_name: String,
}

/// An address and what it belongs to (`spec.ipam.pool`, `status.ipam.used`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AllocationIp {
    /// The pod or endpoint using it (status.ipam.used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The interface it is on (spec.ipam.pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
}

/// spec.ipam: the pool the operator publishes and the node's watermarks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct IpamSpec {
    #[serde(default)]
    pub pool: BTreeMap<String, AllocationIp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_allocate: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_allocate: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_allocate: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_above_watermark: Option<u32>,
}

/// spec.eni: what the agent registered about its instance and how it wants
/// interfaces made.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EniSpec {
    #[serde(default)]
    pub instance_type: String,
    #[serde(default)]
    pub availability_zone: String,
    #[serde(default)]
    pub vpc_id: String,
    #[serde(default)]
    pub node_subnet_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_interface_index: Option<u32>,
    #[serde(default)]
    pub subnet_ids: Vec<String>,
    #[serde(default)]
    pub subnet_tags: BTreeMap<String, String>,
    #[serde(default)]
    pub security_groups: Vec<String>,
    #[serde(default)]
    pub security_group_tags: BTreeMap<String, String>,
    #[serde(default)]
    pub exclude_interface_tags: BTreeMap<String, String>,
    #[serde(default)]
    pub use_primary_address: bool,
    #[serde(default)]
    pub disable_prefix_delegation: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NodeStatus {
    #[serde(default)]
    pub ipam: IpamStatus,
    #[serde(default)]
    pub eni: EniStatus,
    #[serde(default)]
    pub azure: AzureStatus,
}

/// status.azure: the node's interfaces, as Cilium's Azure IPAM mode has them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AzureStatus {
    #[serde(default)]
    pub interfaces: Vec<AzureInterface>,
}

/// An interface of status.azure.interfaces. On the wire, field names are the
/// current CRD's (`cidr`, `gateway`), plus the obsolete `GatewayIP` that
/// older agents read; the older `CIDR` and `GatewayIP` are read too.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "AzureInterfaceFields", into = "AzureInterfaceFields")]
pub struct AzureInterface {
    pub id: String,
    pub name: String,
    pub mac: String,
    pub state: String,
    pub addresses: Vec<AzureAddress>,
    pub security_group: String,
    /// The subnet's default route (`gateway`, and `GatewayIP`).
    pub gateway_ip: String,
    /// The subnet's range (`cidr`).
    pub cidr: String,
}

/// [`AzureInterface`] as the CRD names its fields, old names included.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct AzureInterfaceFields {
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    mac: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    state: String,
    #[serde(default)]
    addresses: Vec<AzureAddress>,
    #[serde(default)]
    security_group: String,
    #[serde(default)]
    cidr: String,
    /// Written by operators before the CRD named it `cidr`; a current API
    /// server prunes it, so it is read only.
    #[serde(rename = "CIDR", default, skip_serializing)]
    obsolete_cidr: String,
    #[serde(default)]
    gateway: String,
    /// Obsolete in the CRD, still read by older cilium-agents.
    #[serde(rename = "GatewayIP", default)]
    obsolete_gateway_ip: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The first non-empty of a current and an obsolete field.
fn current_or_obsolete(current: String, obsolete: String) -> String {
    if current.is_empty() {
        obsolete
    } else {
        current
    }
}

impl From<AzureInterfaceFields> for AzureInterface {
    fn from(fields: AzureInterfaceFields) -> Self {
        Self {
            id: fields.id,
            name: fields.name,
            mac: fields.mac,
            state: fields.state,
            addresses: fields.addresses,
            security_group: fields.security_group,
            gateway_ip: current_or_obsolete(fields.gateway, fields.obsolete_gateway_ip),
            cidr: current_or_obsolete(fields.cidr, fields.obsolete_cidr),
        }
    }
}

impl From<AzureInterface> for AzureInterfaceFields {
    fn from(interface: AzureInterface) -> Self {
        Self {
            id: interface.id,
            name: interface.name,
            mac: interface.mac,
            state: interface.state,
            addresses: interface.addresses,
            security_group: interface.security_group,
            cidr: interface.cidr,
            obsolete_cidr: String::new(),
            gateway: interface.gateway_ip.clone(),
            obsolete_gateway_ip: interface.gateway_ip,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AzureAddress {
    #[serde(default)]
    pub ip: String,
    #[serde(default)]
    pub subnet: String,
    #[serde(default)]
    pub state: String,
}

/// status.ipam: `used` is the agent's; `release-ips` is shared by the release
/// handshake; `operator-status` is the operator's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct IpamStatus {
    #[serde(default)]
    pub used: BTreeMap<String, AllocationIp>,
    #[serde(default)]
    pub release_ips: BTreeMap<String, ReleaseState>,
    #[serde(default)]
    pub operator_status: OperatorStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct OperatorStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// status.eni: the node's interfaces as the operator last saw them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EniStatus {
    #[serde(default)]
    pub enis: BTreeMap<String, EniInterface>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EniInterface {
    pub id: String,
    /// The interface's primary address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip: String,
    #[serde(default)]
    pub mac: String,
    /// The zone of the interface (its instance's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub availability_zone: String,
    /// The cloud's description of the interface. The cloud model (WIT
    /// 0.2.0) carries none, so this operator leaves it as it was.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Device index (left out at 0, as Go's `omitempty` leaves it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub number: u32,
    #[serde(default)]
    pub subnet: EniSubnet,
    #[serde(default)]
    pub vpc: EniVpc,
    #[serde(default)]
    pub addresses: Vec<String>,
    #[serde(default)]
    pub prefixes: Vec<String>,
    #[serde(default)]
    pub security_groups: Vec<String>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EniSubnet {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub cidr: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EniVpc {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub primary_cidr: String,
    #[serde(default)]
    pub cidrs: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CiliumNode as an agent in ENI mode writes it (field names as in the CRD).
    const ENI_NODE: &str = r#"{
        "name": "ip-10-0-1-17",
        "spec": {
            "instance-id": "i-0001",
            "ipam": {"pre-allocate": 16, "min-allocate": 10, "max-above-watermark": 2,
                     "pool": {"10.0.1.20": {"resource": "eni-1"}}},
            "eni": {"instance-type": "m5.large", "availability-zone": "zone-a", "vpc-id": "vpc-1",
                    "first-interface-index": 1, "subnet-tags": {"tier": "pods"},
                    "security-group-tags": {"role": "nodes"}, "exclude-interface-tags": {"no-pods": "true"},
                    "use-primary-address": true, "delete-on-termination": false}
        },
        "status": {
            "ipam": {"used": {"10.0.1.20": {"owner": "default/web-1"}},
                     "release-ips": {"10.0.1.21": "ready-for-release"},
                     "operator-status": {"error": "subnet full"}},
            "eni": {"enis": {"eni-1": {"id": "eni-1", "number": 1, "subnet": {"id": "subnet-a", "cidr": "10.0.1.0/24"},
                                        "vpc": {"id": "vpc-1", "primary-cidr": "10.0.0.0/16"},
                                        "addresses": ["10.0.1.20", "10.0.1.21"]}}}
        }
    }"#;

    #[test]
    fn reads_the_crd_field_names() {
        let node: CiliumNode = serde_json::from_str(ENI_NODE).unwrap();
        assert_eq!(node.spec.instance_id, "i-0001");
        let ipam = &node.spec.ipam;
        assert_eq!(
            (
                ipam.pre_allocate,
                ipam.min_allocate,
                ipam.max_allocate,
                ipam.max_above_watermark
            ),
            (Some(16), Some(10), None, Some(2))
        );
        assert_eq!(node.spec.eni.first_interface_index, Some(1));
        assert_eq!(node.spec.eni.subnet_tags["tier"], "pods");
        assert!(node.spec.eni.use_primary_address);
        assert_eq!(node.spec.eni.delete_on_termination, Some(false));
        assert_eq!(
            node.status.ipam.used["10.0.1.20"].owner.as_deref(),
            Some("default/web-1")
        );
        assert_eq!(
            node.status.ipam.release_ips["10.0.1.21"],
            ReleaseState::ReadyForRelease
        );
        assert_eq!(node.status.ipam.operator_status.error, "subnet full");
        assert_eq!(node.status.eni.enis["eni-1"].subnet.cidr, "10.0.1.0/24");
    }

    #[test]
    fn reads_azure_nodes_by_current_and_obsolete_names() {
        let read = |fields: &str| -> AzureInterface {
            let node: CiliumNode = serde_json::from_str(&format!(
                r#"{{"name": "aks-1", "spec": {{"azure": {{"interface-name": "eth0"}}}},
                    "status": {{"azure": {{"interfaces": [{{"id": "/subscriptions/s/nic-1", "name": "nic-1",
                      "mac": "00-0D-3A", "state": "Succeeded", {fields},
                      "addresses": [{{"ip": "10.240.0.5", "subnet": "s1", "state": "Succeeded"}}]}}]}}}}}}"#
            ))
            .unwrap();
            assert_eq!(node.spec.azure.interface_name, "eth0");
            assert_eq!(
                node.status.azure.interfaces[0].addresses[0].ip,
                "10.240.0.5"
            );
            node.status.azure.interfaces[0].clone()
        };
        let table = [
            (
                r#""cidr": "10.240.0.0/16", "gateway": "10.240.0.1", "GatewayIP": "10.240.0.1""#,
                "current",
            ),
            (
                r#""CIDR": "10.240.0.0/16", "GatewayIP": "10.240.0.1""#,
                "obsolete",
            ),
            (
                r#""cidr": "10.240.0.0/16", "CIDR": "10.9.0.0/16", "gateway": "10.240.0.1", "GatewayIP": "10.9.0.1""#,
                "both: the current wins",
            ),
        ];
        for (fields, case) in table {
            let nic = read(fields);
            assert_eq!(
                (nic.gateway_ip.as_str(), nic.cidr.as_str()),
                ("10.240.0.1", "10.240.0.0/16"),
                "{case}"
            );
        }
    }

    #[test]
    fn writes_azure_interfaces_by_the_crd_names_and_the_obsolete_gateway() {
        let nic = AzureInterface {
            id: "nic-1".into(),
            gateway_ip: "10.240.0.1".into(),
            cidr: "10.240.0.0/16".into(),
            ..Default::default()
        };
        let json = serde_json::to_value(&nic).unwrap();
        assert_eq!(json["cidr"], "10.240.0.0/16");
        assert_eq!(json["gateway"], "10.240.0.1");
        assert_eq!(json["GatewayIP"], "10.240.0.1");
        assert!(json.get("CIDR").is_none(), "{json}");
        let again: AzureInterface = serde_json::from_value(json).unwrap();
        assert_eq!(again, nic);
    }

    #[test]
    fn eni_interfaces_carry_the_primary_address_and_zone() {
        let eni = EniInterface {
            id: "eni-1".into(),
            ip: "10.0.1.10".into(),
            availability_zone: "us-east-1a".into(),
            ..Default::default()
        };
        let json = serde_json::to_value(&eni).unwrap();
        assert_eq!(json["ip"], "10.0.1.10");
        assert_eq!(json["availability-zone"], "us-east-1a");
        assert!(
            json.get("description").is_none(),
            "none known, none written"
        );
        let described: EniInterface =
            serde_json::from_str(r#"{"id": "eni-1", "description": "Cilium-CNI (i-1)"}"#).unwrap();
        assert_eq!(described.description, "Cilium-CNI (i-1)");
    }

    #[test]
    fn round_trips_and_defaults() {
        let node: CiliumNode = serde_json::from_str(ENI_NODE).unwrap();
        let again: CiliumNode =
            serde_json::from_str(&serde_json::to_string(&node).unwrap()).unwrap();
        assert_eq!(node, again);
        let bare: CiliumNode = serde_json::from_str(r#"{"name": "n"}"#).unwrap();
        assert_eq!(bare.spec.ipam.pre_allocate, None);
        let json = serde_json::to_value(&bare).unwrap();
        assert!(
            json["spec"]["ipam"].get("pre-allocate").is_none(),
            "unset watermarks stay unset"
        );
    }
}
