//! The facts an Azure VM's node agent registers its CiliumNode with, read
//! from IMDS's instance document (`/metadata/instance`, api-version
//! 2021-02-01) and checked. Only the fields used here are read:
//! `compute.{resourceId, vmSize, location, zone, vmScaleSetName,
//! subscriptionId, resourceGroupName}` and, per entry of
//! `network.interface[]`, `macAddress` with
//! `ipv4.ipAddress[].privateIpAddress` and `ipv4.subnet[].{address, prefix}`.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Deserialize;

use super::vm_id::AzureVmId;
use crate::mac::MacAddress;

/// What IMDS told about the VM, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzureInstanceFacts {
    /// The id Cilium's Azure IPAM knows the VM by (see [`AzureVmId`]): the
    /// lower-cased `compute.resourceId`.
    pub instance_id: String,
    pub vm: AzureVmId,
    /// `compute.vmSize`, e.g. `Standard_D4s_v3`.
    pub vm_size: String,
    /// `compute.location`, e.g. `westeurope`.
    pub location: String,
    /// `compute.zone`; none when the VM is in no availability zone.
    pub zone: Option<String>,
    /// `compute.vmScaleSetName`; none for a VM outside a scale set.
    pub vm_scale_set_name: Option<String>,
    pub subscription_id: String,
    pub resource_group_name: String,
    /// `network.interface[0]`: IMDS lists the primary interface first.
    pub primary_interface: AzureInterface,
    /// The rest of `network.interface[]`, in IMDS's order.
    pub other_interfaces: Vec<AzureInterface>,
}

/// One network interface of the VM as IMDS lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzureInterface {
    pub mac: MacAddress,
    /// `ipv4.ipAddress[].privateIpAddress`
    pub private_ips: Vec<Ipv4Addr>,
    /// `ipv4.subnet[]`: `address`/`prefix`.
    pub subnets: Vec<Ipv4Net>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AzureInstanceFactsError {
    #[error("Azure IMDS: the answer is not the instance document (JSON): {0}")]
    Document(String),
    #[error("Azure IMDS: {field} is missing")]
    Missing { field: String },
    #[error("Azure IMDS: {field}: {value:?} is not {expected}")]
    Invalid {
        field: String,
        value: String,
        expected: String,
    },
}

// The document as IMDS writes it; every field optional so that a missing
// one is named by its path rather than by serde's bare field name.
#[derive(Deserialize)]
struct Document {
    compute: Option<Compute>,
    network: Option<Network>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Compute {
    resource_id: Option<String>,
    vm_size: Option<String>,
    location: Option<String>,
    zone: Option<String>,
    vm_scale_set_name: Option<String>,
    subscription_id: Option<String>,
    resource_group_name: Option<String>,
}

#[derive(Deserialize)]
struct Network {
    interface: Option<Vec<Interface>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Interface {
    mac_address: Option<String>,
    ipv4: Option<Ipv4>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Ipv4 {
    #[serde(default)]
    ip_address: Vec<IpAddress>,
    #[serde(default)]
    subnet: Vec<Subnet>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IpAddress {
    private_ip_address: Option<String>,
}

#[derive(Deserialize)]
struct Subnet {
    address: Option<String>,
    prefix: Option<String>,
}

fn missing(field: impl Into<String>) -> AzureInstanceFactsError {
    AzureInstanceFactsError::Missing {
        field: field.into(),
    }
}

fn invalid(
    field: impl Into<String>,
    value: &str,
    expected: impl Into<String>,
) -> AzureInstanceFactsError {
    AzureInstanceFactsError::Invalid {
        field: field.into(),
        value: value.to_string(),
        expected: expected.into(),
    }
}

/// A field that must be there and not blank.
fn required(field: &str, value: Option<String>) -> Result<String, AzureInstanceFactsError> {
    let value = value.ok_or_else(|| missing(field))?;
    if value.trim().is_empty() {
        return Err(invalid(field, &value, "a non-empty value"));
    }
    Ok(value)
}

/// A field IMDS leaves empty when it does not apply.
fn optional(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

impl AzureInstanceFacts {
    /// Read IMDS's instance document.
    pub fn from_json(body: &[u8]) -> Result<Self, AzureInstanceFactsError> {
        let document: Document = serde_json::from_slice(body)
            .map_err(|e| AzureInstanceFactsError::Document(e.to_string()))?;
        let compute = document.compute.ok_or_else(|| missing("compute"))?;
        let resource_id = required("compute.resourceId", compute.resource_id)?;
        let subscription_id = required("compute.subscriptionId", compute.subscription_id)?;
        let resource_group_name =
            required("compute.resourceGroupName", compute.resource_group_name)?;
        let vm_scale_set_name = optional(compute.vm_scale_set_name);
        let vm = AzureVmId::parse(&resource_id)
            .map_err(|e| invalid("compute.resourceId", &resource_id, e.to_string()))?;
        check_consistent(
            &vm,
            &resource_id,
            &subscription_id,
            &resource_group_name,
            vm_scale_set_name.as_deref(),
        )?;
        let interfaces = document
            .network
            .ok_or_else(|| missing("network"))?
            .interface
            .ok_or_else(|| missing("network.interface"))?;
        let mut interfaces = interfaces
            .into_iter()
            .enumerate()
            .map(|(index, interface)| {
                interface_facts(&format!("network.interface[{index}]"), interface)
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter();
        let primary_interface = interfaces.next().ok_or_else(|| {
            invalid(
                "network.interface",
                "[]",
                "a list of at least one interface",
            )
        })?;
        Ok(Self {
            instance_id: vm.instance_id(),
            vm,
            vm_size: required("compute.vmSize", compute.vm_size)?,
            location: required("compute.location", compute.location)?,
            zone: optional(compute.zone),
            vm_scale_set_name,
            subscription_id,
            resource_group_name,
            primary_interface,
            other_interfaces: interfaces.collect(),
        })
    }
}

/// The resource id must name a VM of the subscription, resource group and
/// (for a Uniform scale set VM) scale set the rest of `compute` names:
/// otherwise the document contradicts itself and the id is not trusted.
fn check_consistent(
    vm: &AzureVmId,
    resource_id: &str,
    subscription_id: &str,
    resource_group_name: &str,
    vm_scale_set_name: Option<&str>,
) -> Result<(), AzureInstanceFactsError> {
    let disagree = |other: &str| {
        invalid(
            "compute.resourceId",
            resource_id,
            format!("a VM of the same {other}"),
        )
    };
    if !vm.subscription().eq_ignore_ascii_case(subscription_id) {
        return Err(disagree("compute.subscriptionId"));
    }
    if !vm
        .resource_group()
        .eq_ignore_ascii_case(resource_group_name)
    {
        return Err(disagree("compute.resourceGroupName"));
    }
    if let AzureVmId::ScaleSetVm { scale_set, .. } = vm {
        if !vm_scale_set_name.is_some_and(|name| scale_set.eq_ignore_ascii_case(name)) {
            return Err(disagree("compute.vmScaleSetName"));
        }
    }
    Ok(())
}

fn interface_facts(
    path: &str,
    interface: Interface,
) -> Result<AzureInterface, AzureInstanceFactsError> {
    let field = format!("{path}.macAddress");
    let mac_text = interface.mac_address.ok_or_else(|| missing(&field))?;
    let mac =
        MacAddress::parse(&mac_text).map_err(|e| invalid(&field, &mac_text, e.to_string()))?;
    let ipv4 = interface
        .ipv4
        .ok_or_else(|| missing(format!("{path}.ipv4")))?;
    let private_ips = ipv4
        .ip_address
        .into_iter()
        .enumerate()
        .map(|(index, address)| {
            let field = format!("{path}.ipv4.ipAddress[{index}].privateIpAddress");
            let text = address.private_ip_address.ok_or_else(|| missing(&field))?;
            text.parse()
                .map_err(|_| invalid(&field, &text, "an IPv4 address"))
        })
        .collect::<Result<_, _>>()?;
    let subnets = ipv4
        .subnet
        .into_iter()
        .enumerate()
        .map(|(index, subnet)| {
            let field = format!("{path}.ipv4.subnet[{index}]");
            let address_field = format!("{field}.address");
            let prefix_field = format!("{field}.prefix");
            let address_text = subnet.address.ok_or_else(|| missing(&address_field))?;
            let prefix_text = subnet.prefix.ok_or_else(|| missing(&prefix_field))?;
            let address: Ipv4Addr = address_text
                .parse()
                .map_err(|_| invalid(&address_field, &address_text, "an IPv4 address"))?;
            let prefix = prefix_text
                .parse::<u8>()
                .ok()
                .and_then(|prefix| Ipv4Net::new(address, prefix).ok())
                .ok_or_else(|| invalid(&prefix_field, &prefix_text, "a prefix length (0-32)"))?;
            Ok(prefix)
        })
        .collect::<Result<_, _>>()?;
    Ok(AzureInterface {
        mac,
        private_ips,
        subnets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCALE_SET_VM: &str = include_str!("../../tests/fixtures/azure_scale_set_vm.json");
    const STANDALONE_VM: &str = include_str!("../../tests/fixtures/azure_standalone_vm.json");

    fn edited(json: &str, edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
        let mut document: serde_json::Value = serde_json::from_str(json).unwrap();
        edit(&mut document);
        serde_json::to_vec(&document).unwrap()
    }

    #[test]
    fn a_scale_set_vm_is_read() {
        let facts = AzureInstanceFacts::from_json(SCALE_SET_VM.as_bytes()).unwrap();
        assert_eq!(
            facts,
            AzureInstanceFacts {
                instance_id: "/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourcegroups/mc_rg-aks_aks-prod_westeurope/providers/microsoft.compute/virtualmachinescalesets/aks-nodepool1-10706209-vmss/virtualmachines/3".into(),
                vm: AzureVmId::ScaleSetVm {
                    subscription: "8d10da13-8125-4ba9-a717-bf7490507b3d".into(),
                    resource_group: "MC_rg-aks_aks-prod_westeurope".into(),
                    scale_set: "aks-nodepool1-10706209-vmss".into(),
                    instance: "3".into(),
                },
                vm_size: "Standard_D4s_v3".into(),
                location: "westeurope".into(),
                zone: Some("2".into()),
                vm_scale_set_name: Some("aks-nodepool1-10706209-vmss".into()),
                subscription_id: "8d10da13-8125-4ba9-a717-bf7490507b3d".into(),
                resource_group_name: "MC_rg-aks_aks-prod_westeurope".into(),
                primary_interface: AzureInterface {
                    mac: MacAddress::new([0x00, 0x0d, 0x3a, 0x1b, 0x2c, 0x3d]),
                    private_ips: vec![Ipv4Addr::new(10, 224, 0, 5), Ipv4Addr::new(10, 224, 0, 36)],
                    subnets: vec!["10.224.0.0/16".parse().unwrap()],
                },
                other_interfaces: vec![AzureInterface {
                    mac: MacAddress::new([0x00, 0x0d, 0x3a, 0xf0, 0xe1, 0xd2]),
                    private_ips: vec![Ipv4Addr::new(10, 225, 1, 4)],
                    subnets: vec!["10.225.1.0/24".parse().unwrap()],
                }],
            }
        );
        assert_eq!(facts.primary_interface.mac.to_string(), "00:0d:3a:1b:2c:3d");
    }

    #[test]
    fn a_standalone_vm_outside_zones_and_scale_sets_is_read() {
        let facts = AzureInstanceFacts::from_json(STANDALONE_VM.as_bytes()).unwrap();
        assert_eq!(
            facts.instance_id,
            "/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourcegroups/prod-rg/providers/microsoft.compute/virtualmachines/worker-1"
        );
        assert_eq!(facts.zone, None, "an empty zone is no zone");
        assert_eq!(facts.vm_scale_set_name, None);
        assert_eq!(
            (facts.vm_size.as_str(), facts.location.as_str()),
            ("Standard_B2s", "eastus")
        );
        assert_eq!(facts.primary_interface.mac.to_string(), "60:45:bd:8a:0b:1c");
        assert_eq!(
            facts.primary_interface.private_ips,
            vec![Ipv4Addr::new(10, 1, 0, 4)]
        );
        assert!(facts.other_interfaces.is_empty());
    }

    #[test]
    fn a_flexible_scale_set_vm_has_a_standalone_id_and_a_scale_set_name() {
        // Flexible orchestration: the VM is a plain VM named <vmss>_<guid>.
        let body = edited(STANDALONE_VM, |d| {
            d["compute"]["resourceId"] = "/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourceGroups/Prod-RG/providers/Microsoft.Compute/virtualMachines/flex_6f4b3b60".into();
            d["compute"]["vmScaleSetName"] = "flex".into();
        });
        let facts = AzureInstanceFacts::from_json(&body).unwrap();
        assert!(facts
            .instance_id
            .ends_with("/virtualmachines/flex_6f4b3b60"));
        assert_eq!(facts.vm_scale_set_name.as_deref(), Some("flex"));
    }

    #[test]
    fn each_bad_document_names_what_is_wrong() {
        type Edit = fn(&mut serde_json::Value);
        let missing_cases: &[(&str, Edit)] = &[
            ("compute", |d| {
                drop(d.as_object_mut().unwrap().remove("compute"))
            }),
            ("compute.resourceId", |d| {
                drop(d["compute"].as_object_mut().unwrap().remove("resourceId"))
            }),
            ("compute.vmSize", |d| {
                drop(d["compute"].as_object_mut().unwrap().remove("vmSize"))
            }),
            ("compute.location", |d| {
                drop(d["compute"].as_object_mut().unwrap().remove("location"))
            }),
            ("compute.subscriptionId", |d| {
                drop(
                    d["compute"]
                        .as_object_mut()
                        .unwrap()
                        .remove("subscriptionId"),
                )
            }),
            ("compute.resourceGroupName", |d| {
                drop(
                    d["compute"]
                        .as_object_mut()
                        .unwrap()
                        .remove("resourceGroupName"),
                )
            }),
            ("network", |d| {
                drop(d.as_object_mut().unwrap().remove("network"))
            }),
            ("network.interface", |d| {
                drop(d["network"].as_object_mut().unwrap().remove("interface"))
            }),
            ("network.interface[1].macAddress", |d| {
                drop(
                    d["network"]["interface"][1]
                        .as_object_mut()
                        .unwrap()
                        .remove("macAddress"),
                )
            }),
            ("network.interface[0].ipv4", |d| {
                drop(
                    d["network"]["interface"][0]
                        .as_object_mut()
                        .unwrap()
                        .remove("ipv4"),
                )
            }),
            (
                "network.interface[0].ipv4.ipAddress[1].privateIpAddress",
                |d| {
                    drop(
                        d["network"]["interface"][0]["ipv4"]["ipAddress"][1]
                            .as_object_mut()
                            .unwrap()
                            .remove("privateIpAddress"),
                    )
                },
            ),
            ("network.interface[0].ipv4.subnet[0].prefix", |d| {
                drop(
                    d["network"]["interface"][0]["ipv4"]["subnet"][0]
                        .as_object_mut()
                        .unwrap()
                        .remove("prefix"),
                )
            }),
        ];
        for (field, edit) in missing_cases {
            assert_eq!(
                AzureInstanceFacts::from_json(&edited(SCALE_SET_VM, edit)),
                Err(AzureInstanceFactsError::Missing {
                    field: field.to_string()
                }),
            );
        }
        let invalid_cases: &[(&str, Edit)] = &[
            ("compute.vmSize", |d| d["compute"]["vmSize"] = " ".into()),
            ("compute.resourceId", |d| {
                d["compute"]["resourceId"] = "/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourceGroups/MC_rg-aks_aks-prod_westeurope/providers/Microsoft.Network/networkInterfaces/nic".into()
            }),
            // The id must agree with the rest of `compute`.
            ("compute.resourceId", |d| {
                d["compute"]["subscriptionId"] = "00000000-0000-0000-0000-000000000000".into()
            }),
            ("compute.resourceId", |d| {
                d["compute"]["resourceGroupName"] = "other-rg".into()
            }),
            ("compute.resourceId", |d| {
                d["compute"]["vmScaleSetName"] = "other-vmss".into()
            }),
            ("compute.resourceId", |d| {
                d["compute"]["vmScaleSetName"] = "".into()
            }),
            ("network.interface", |d| {
                d["network"]["interface"] = serde_json::json!([])
            }),
            ("network.interface[0].macAddress", |d| {
                d["network"]["interface"][0]["macAddress"] = "00-0D-3A-1B-2C-3D".into()
            }),
            ("network.interface[1].macAddress", |d| {
                d["network"]["interface"][1]["macAddress"] = "".into()
            }),
            (
                "network.interface[0].ipv4.ipAddress[0].privateIpAddress",
                |d| {
                    d["network"]["interface"][0]["ipv4"]["ipAddress"][0]["privateIpAddress"] =
                        "10.224.0".into()
                },
            ),
            ("network.interface[1].ipv4.subnet[0].address", |d| {
                d["network"]["interface"][1]["ipv4"]["subnet"][0]["address"] = "fd00::".into()
            }),
            ("network.interface[0].ipv4.subnet[0].prefix", |d| {
                d["network"]["interface"][0]["ipv4"]["subnet"][0]["prefix"] = "33".into()
            }),
            ("network.interface[0].ipv4.subnet[0].prefix", |d| {
                d["network"]["interface"][0]["ipv4"]["subnet"][0]["prefix"] = "/16".into()
            }),
        ];
        for (field, edit) in invalid_cases {
            match AzureInstanceFacts::from_json(&edited(SCALE_SET_VM, edit)) {
                Err(AzureInstanceFactsError::Invalid { field: named, .. }) => {
                    assert_eq!(named, *field)
                }
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_answer_that_is_not_the_document_is_refused() {
        for body in [
            &b"<html>Bad Request</html>"[..],
            b"",
            b"[]",
            br#"{"compute": {"vmSize": 4}}"#,
        ] {
            assert!(
                matches!(
                    AzureInstanceFacts::from_json(body),
                    Err(AzureInstanceFactsError::Document(_))
                ),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
