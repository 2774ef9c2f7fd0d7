//! ARM's JSON, typed: the fields this provider reads or writes, from the
//! REST API reference (Microsoft.Network 2024-03-01, Microsoft.Compute
//! 2024-07-01, Resource SKUs 2021-07-01). A resource this provider GETs and
//! PUTs back (a NIC, a scale-set VM) keeps every field it does not model in
//! `rest`, so the PUT loses nothing of what ARM sent.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One page of a list, and the URL of the next.
#[derive(Debug, Deserialize)]
pub struct Page<T> {
    #[serde(default = "Vec::new")]
    pub value: Vec<T>,
    #[serde(rename = "nextLink", default)]
    pub next_link: Option<String>,
}

/// A reference to another resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubResource {
    pub id: String,
}

pub type Tags = BTreeMap<String, String>;

// ---- Microsoft.Network: virtual networks and NSGs (read only) ----

#[derive(Debug, Deserialize)]
pub struct VirtualNetwork {
    pub id: String,
    #[serde(default)]
    pub location: String,
    #[serde(default)]
    pub tags: Tags,
    #[serde(default)]
    pub properties: VirtualNetworkProperties,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualNetworkProperties {
    #[serde(default)]
    pub address_space: AddressSpace,
    #[serde(default)]
    pub subnets: Vec<SubnetResource>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressSpace {
    #[serde(default)]
    pub address_prefixes: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct SubnetResource {
    pub id: String,
    #[serde(default)]
    pub properties: SubnetProperties,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubnetProperties {
    #[serde(default)]
    pub address_prefix: Option<String>,
    /// Set instead of `addressPrefix` on a subnet of several prefixes.
    #[serde(default)]
    pub address_prefixes: Vec<String>,
    /// Every IP configuration in the subnet (references only).
    #[serde(default)]
    pub ip_configurations: Vec<SubResource>,
}

#[derive(Debug, Deserialize)]
pub struct NetworkSecurityGroup {
    pub id: String,
    #[serde(default)]
    pub tags: Tags,
    #[serde(default)]
    pub properties: NetworkSecurityGroupProperties,
}

#[derive(Debug, Default, Deserialize)]
pub struct NetworkSecurityGroupProperties {
    /// The subnets the NSG is associated with.
    #[serde(default)]
    pub subnets: Vec<SubResource>,
}

// ---- Microsoft.Network: network interfaces (read, and PUT back) ----

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Nic {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    #[serde(default, skip_serializing_if = "Tags::is_empty")]
    pub tags: Tags,
    #[serde(default)]
    pub properties: NicProperties,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NicProperties {
    #[serde(default)]
    pub ip_configurations: Vec<IpConfiguration>,
    /// `AA-BB-CC-DD-EE-FF`; absent until the VM first runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine: Option<SubResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_security_group: Option<SubResource>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IpConfiguration {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default)]
    pub properties: IpConfigurationProperties,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpConfigurationProperties {
    #[serde(
        rename = "privateIPAddress",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub private_ip_address: Option<String>,
    #[serde(
        rename = "privateIPAllocationMethod",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub private_ip_allocation_method: Option<String>,
    #[serde(
        rename = "privateIPAddressVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub private_ip_address_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<SubResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_security_groups: Option<Vec<SubResource>>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

// ---- Microsoft.Compute: VMs, scale sets, scale-set VMs ----

#[derive(Debug, Deserialize)]
pub struct VirtualMachine {
    pub id: String,
    #[serde(default)]
    pub location: String,
    #[serde(default)]
    pub tags: Tags,
    #[serde(default)]
    pub properties: VirtualMachineProperties,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineProperties {
    #[serde(default)]
    pub hardware_profile: HardwareProfile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HardwareProfile {
    #[serde(default)]
    pub vm_size: String,
}

#[derive(Debug, Deserialize)]
pub struct ScaleSet {
    pub name: String,
    #[serde(default)]
    pub tags: Tags,
}

/// A scale-set VM: listed for its size and location, and GET and PUT back
/// to change its NICs' IP configurations.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleSetVm {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<Sku>,
    #[serde(default)]
    pub location: String,
    #[serde(default)]
    pub properties: ScaleSetVmProperties,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sku {
    pub name: String,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSetVmProperties {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_profile: Option<StorageProfile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_profile_configuration: Option<NetworkProfileConfiguration>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageProfile {
    /// Cleared before a PUT: with a Compute Gallery image ARM refuses the
    /// update for a permission on the image (Cilium #19695, AKS #1819).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_reference: Option<Value>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkProfileConfiguration {
    #[serde(default)]
    pub network_interface_configurations: Vec<ScaleSetNicConfiguration>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// A NIC of the scale-set VM's model; the NIC ARM makes from it has its name.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleSetNicConfiguration {
    pub name: String,
    #[serde(default)]
    pub properties: ScaleSetNicProperties,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSetNicProperties {
    #[serde(default)]
    pub ip_configurations: Vec<ScaleSetIpConfiguration>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleSetIpConfiguration {
    pub name: String,
    #[serde(default)]
    pub properties: ScaleSetIpConfigurationProperties,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSetIpConfigurationProperties {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<SubResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<bool>,
    #[serde(
        rename = "privateIPAddressVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub private_ip_address_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_security_groups: Option<Vec<SubResource>>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

// ---- Resource SKUs ----

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSku {
    #[serde(default)]
    pub resource_type: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub capabilities: Vec<SkuCapability>,
}

#[derive(Debug, Deserialize)]
pub struct SkuCapability {
    pub name: String,
    pub value: String,
}

// ---- Long-running operations and errors ----

/// The body of an `Azure-AsyncOperation` URL.
#[derive(Debug, Deserialize)]
pub struct OperationStatus {
    pub status: String,
    #[serde(default)]
    pub error: Option<ErrorDetail>,
}

/// ARM's error body: `{"error": {"code": ..., "message": ...}}`.
#[derive(Debug, Deserialize)]
pub struct ErrorResponse {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ErrorDetail {
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nic_put_back_keeps_every_field_it_was_read_with() {
        let text = r#"{
            "name": "vm1-nic", "id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/vm1-nic",
            "etag": "W/\"1\"", "location": "eastus", "type": "Microsoft.Network/networkInterfaces",
            "properties": {
                "provisioningState": "Succeeded", "macAddress": "00-0D-3A-1B-C7-21", "primary": true,
                "enableAcceleratedNetworking": true,
                "virtualMachine": {"id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm1"},
                "ipConfigurations": [{
                    "name": "ipconfig1", "id": "x", "etag": "W/\"1\"",
                    "properties": {
                        "privateIPAddress": "10.0.0.4", "privateIPAllocationMethod": "Dynamic",
                        "subnet": {"id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/a"},
                        "primary": true, "privateIPAddressVersion": "IPv4", "provisioningState": "Succeeded",
                        "loadBalancerBackendAddressPools": [{"id": "pool"}]
                    }
                }]
            }
        }"#;
        let read: Value = serde_json::from_str(text).unwrap();
        let nic: Nic = serde_json::from_str(text).unwrap();
        assert_eq!(
            nic.properties.ip_configurations[0]
                .properties
                .private_ip_address
                .as_deref(),
            Some("10.0.0.4")
        );
        assert_eq!(serde_json::to_value(&nic).unwrap(), read);
    }

    #[test]
    fn a_scale_set_vm_put_back_keeps_every_field_it_was_read_with() {
        let text = r#"{
            "name": "pool_3", "id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/pool/virtualMachines/3",
            "instanceId": "3", "etag": "\"7\"", "location": "eastus", "zones": ["1"],
            "sku": {"name": "Standard_D2s_v3", "tier": "Standard"},
            "properties": {
                "latestModelApplied": true,
                "storageProfile": {"imageReference": {"id": "/gallery/image"}, "osDisk": {"osType": "Linux"}},
                "networkProfileConfiguration": {"networkInterfaceConfigurations": [{
                    "name": "pool-nic",
                    "properties": {"primary": true, "enableIPForwarding": true, "ipConfigurations": [{
                        "name": "ipconfig1",
                        "properties": {"subnet": {"id": "sub"}, "primary": true, "privateIPAddressVersion": "IPv4",
                                       "loadBalancerBackendAddressPools": []}
                    }]}
                }]}
            }
        }"#;
        let read: Value = serde_json::from_str(text).unwrap();
        let vm: ScaleSetVm = serde_json::from_str(text).unwrap();
        assert_eq!(
            vm.sku.as_ref().map(|s| s.name.as_str()),
            Some("Standard_D2s_v3")
        );
        assert_eq!(serde_json::to_value(&vm).unwrap(), read);
    }

    #[test]
    fn a_page_without_value_or_next_link_is_empty_and_last() {
        let page: Page<SubResource> = serde_json::from_str("{}").unwrap();
        assert!(page.value.is_empty());
        assert_eq!(page.next_link, None);
    }
}
