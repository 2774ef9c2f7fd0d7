//! ARM's listings as the WIT's values, in the forms Cilium's Azure operator
//! reports them: a subnet's free addresses are its size less Azure's 5
//! reserved and the IP configurations in it; an instance is a VM (its
//! lower-cased id, `resource_id::canonical`) with its NICs, the primary
//! first; MACs `AA-BB-...` become `AA:BB:...`, their case kept; only
//! Succeeded secondary addresses count. Every other id (NICs, subnets,
//! virtual networks, NSGs) is reported as ARM spells it, while the
//! comparisons made here across resources (a NIC's VM, the primary's
//! subnet, duplicate NICs) ignore case: ARM spells a resource group
//! differently in different answers.

use std::collections::BTreeMap;

use ipam_provider_sdk::net::parse_ipv4;
use ipam_provider_sdk::{
    Error, Instance, Ipv4, Ipv4Net, NetworkInterface, SecurityGroup, Subnet, Tag, Vpc,
};

use crate::models::{IpConfiguration, NetworkSecurityGroup, Nic, Tags, VirtualNetwork};
use crate::resource_id::{canonical, vnet_of_subnet};
use crate::settings::has_tags;

/// Addresses Azure keeps in every subnet: the network, the gateway, two
/// for DNS, and the broadcast address.
pub const AZURE_RESERVED: u64 = 5;

/// What a NIC's VM is, from the Compute listings.
#[derive(Debug, Clone, PartialEq)]
pub struct VmInfo {
    /// `resource_id::canonical` of the VM's id.
    pub id: String,
    pub size: String,
    pub location: String,
}

fn tags(tags: &Tags) -> Vec<Tag> {
    tags.iter()
        .map(|(key, value)| Tag {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

/// The IPv4 networks among ARM's prefixes (IPv6 ones are left out).
fn ipv4_nets(owner: &str, prefixes: &[String]) -> Result<Vec<Ipv4Net>, Error> {
    prefixes
        .iter()
        .filter(|p| !p.contains(':'))
        .map(|p| {
            p.parse::<Ipv4Net>()
                .map_err(|e| Error::Other(format!("{owner}: address prefix: {e}")))
        })
        .collect()
}

pub fn vpcs(vnets: &[VirtualNetwork]) -> Result<Vec<Vpc>, Error> {
    let mut vpcs = Vec::new();
    for vnet in vnets {
        let cidrs = ipv4_nets(&vnet.id, &vnet.properties.address_space.address_prefixes)?;
        if let Some(&primary_cidr) = cidrs.first() {
            vpcs.push(Vpc {
                id: vnet.id.clone(),
                primary_cidr,
                cidrs,
            });
        }
    }
    Ok(vpcs)
}

/// The subnets of the virtual networks carrying `wanted` tags (ARM has no
/// tags on subnets: a subnet answers with its network's), each in its
/// network's region (Azure subnets span a region's zones).
pub fn subnets(vnets: &[VirtualNetwork], wanted: &Tags) -> Result<Vec<Subnet>, Error> {
    let mut subnets = Vec::new();
    for vnet in vnets.iter().filter(|v| has_tags(&v.tags, wanted)) {
        for subnet in &vnet.properties.subnets {
            let props = &subnet.properties;
            let prefixes: Vec<String> = props
                .address_prefix
                .iter()
                .chain(&props.address_prefixes)
                .cloned()
                .collect();
            let Some(&cidr) = ipv4_nets(&subnet.id, &prefixes)?.first() else {
                continue;
            };
            let used = props.ip_configurations.len() as u64;
            let free = cidr.size().saturating_sub(AZURE_RESERVED + used);
            subnets.push(Subnet {
                id: subnet.id.clone(),
                cidr,
                availability_zone: vnet.location.clone(),
                vpc_id: vnet.id.clone(),
                available_addresses: u32::try_from(free).unwrap_or(u32::MAX),
                tags: tags(&vnet.tags),
            });
        }
    }
    Ok(subnets)
}

/// NSGs carrying `wanted` tags, each in the virtual network of the first
/// subnet it is associated with; one associated with no subnet belongs to
/// no network and is left out (the WIT's security group has one).
pub fn security_groups(nsgs: &[NetworkSecurityGroup], wanted: &Tags) -> Vec<SecurityGroup> {
    nsgs.iter()
        .filter(|nsg| has_tags(&nsg.tags, wanted))
        .filter_map(|nsg| {
            let vnet = nsg
                .properties
                .subnets
                .iter()
                .find_map(|s| vnet_of_subnet(&s.id))?;
            Some(SecurityGroup {
                id: nsg.id.clone(),
                vpc_id: vnet.to_string(),
                tags: tags(&nsg.tags),
            })
        })
        .collect()
}

/// `AA-BB-CC-DD-EE-FF` as `AA:BB:CC:DD:EE:FF`, ARM's case kept as Cilium
/// keeps it; an absent MAC (a VM that never ran) is empty.
pub fn mac(nic_id: &str, text: Option<&str>) -> Result<String, Error> {
    let Some(text) = text.filter(|t| !t.is_empty()) else {
        return Ok(String::new());
    };
    let octets: Vec<&str> = text.split(['-', ':']).collect();
    let valid = octets.len() == 6
        && octets
            .iter()
            .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()));
    if !valid {
        return Err(Error::Other(format!(
            "{nic_id}: MAC address {text:?} is not six octets"
        )));
    }
    Ok(octets.join(":"))
}

/// The configuration holding the NIC's primary address: the one marked
/// primary, else the first.
pub fn primary_configuration(configs: &[IpConfiguration]) -> Option<&IpConfiguration> {
    configs
        .iter()
        .find(|c| c.properties.primary == Some(true))
        .or_else(|| configs.first())
}

fn address_of(nic_id: &str, config: &IpConfiguration) -> Result<Option<Ipv4>, Error> {
    let props = &config.properties;
    if props
        .private_ip_address_version
        .as_deref()
        .is_some_and(|v| v != "IPv4")
    {
        return Ok(None);
    }
    props
        .private_ip_address
        .as_deref()
        .map(|text| {
            parse_ipv4(text).map_err(|e| {
                Error::Other(format!(
                    "{nic_id}: ipConfiguration {}: privateIPAddress: {e}",
                    config.name
                ))
            })
        })
        .transpose()
}

/// One NIC as the WIT's interface at `index` on `vm`; `None` for a NIC
/// with no primary IPv4 address yet.
pub fn interface(nic: &Nic, index: u32, vm: &str) -> Result<Option<NetworkInterface>, Error> {
    let configs = &nic.properties.ip_configurations;
    let Some(primary) = primary_configuration(configs) else {
        return Ok(None);
    };
    let Some(primary_ip) = address_of(&nic.id, primary)? else {
        return Ok(None);
    };
    let Some(subnet) = primary.properties.subnet.as_ref() else {
        return Ok(None);
    };
    let vpc = vnet_of_subnet(&subnet.id).ok_or_else(|| {
        Error::Other(format!(
            "{}: subnet id {} names no virtual network",
            nic.id, subnet.id
        ))
    })?;
    let mut addresses = Vec::new();
    for config in configs.iter().filter(|c| c.name != primary.name) {
        let props = &config.properties;
        let succeeded = props.provisioning_state.as_deref() == Some("Succeeded");
        // The WIT's addresses are in the interface's subnet.
        let same_subnet = props
            .subnet
            .as_ref()
            .is_some_and(|s| s.id.eq_ignore_ascii_case(&subnet.id));
        if succeeded && same_subnet {
            addresses.extend(address_of(&nic.id, config)?);
        }
    }
    Ok(Some(NetworkInterface {
        id: nic.id.clone(),
        mac: mac(&nic.id, nic.properties.mac_address.as_deref())?,
        index,
        subnet_id: subnet.id.clone(),
        vpc_id: vpc.to_string(),
        primary_ip,
        addresses,
        prefixes: Vec::new(),
        security_groups: nic
            .properties
            .network_security_group
            .iter()
            .map(|g| g.id.clone())
            .collect(),
        tags: tags(&nic.tags),
        instance_id: Some(vm.to_string()),
    }))
}

/// The instances of `vms` with their NICs: grouped by VM, the primary NIC
/// first and the others by id, each NIC's position its index. NICs of VMs
/// not in `vms` are left out, and so are VMs with no usable NIC.
pub fn instances(nics: &[Nic], vms: &[VmInfo]) -> Result<Vec<Instance>, Error> {
    let mut by_vm: BTreeMap<&str, Vec<&Nic>> = BTreeMap::new();
    let known: BTreeMap<&str, &VmInfo> = vms.iter().map(|vm| (vm.id.as_str(), vm)).collect();
    let vm_ids: Vec<String> = nics
        .iter()
        .map(|nic| {
            nic.properties
                .virtual_machine
                .as_ref()
                .map(|vm| canonical(&vm.id))
                .unwrap_or_default()
        })
        .collect();
    for (nic, vm) in nics.iter().zip(&vm_ids) {
        if let Some((id, _)) = known.get_key_value(vm.as_str()) {
            by_vm.entry(id).or_default().push(nic);
        }
    }
    let mut instances = Vec::new();
    for (vm_id, mut nics) in by_vm {
        nics.sort_by(|a, b| {
            let primary = |n: &Nic| n.properties.primary != Some(true);
            (primary(a), canonical(&a.id)).cmp(&(primary(b), canonical(&b.id)))
        });
        nics.dedup_by(|a, b| a.id.eq_ignore_ascii_case(&b.id));
        let mut interfaces = Vec::new();
        for nic in nics {
            let index = interfaces.len() as u32;
            interfaces.extend(interface(nic, index, vm_id)?);
        }
        let Some(vpc_id) = interfaces.first().map(|i| i.vpc_id.clone()) else {
            continue;
        };
        let info = known[vm_id];
        instances.push(Instance {
            id: vm_id.to_string(),
            instance_type: info.size.clone(),
            availability_zone: info.location.clone(),
            vpc_id,
            interfaces,
        });
    }
    Ok(instances)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RG: &str = "/subscriptions/s/resourceGroups/RG/providers";

    fn nic_json(name: &str, vm: &str, primary: bool, configs: &str) -> Nic {
        serde_json::from_str(&format!(
            r#"{{"id": "{RG}/Microsoft.Network/networkInterfaces/{name}", "etag": "W/\"1\"",
                "tags": {{"pool": "a"}},
                "properties": {{"macAddress": "00-0D-3A-1B-C7-21", "primary": {primary},
                  "virtualMachine": {{"id": "{RG}/Microsoft.Compute/virtualMachines/{vm}"}},
                  "networkSecurityGroup": {{"id": "{RG}/Microsoft.Network/networkSecurityGroups/NSG"}},
                  "ipConfigurations": [{configs}]}}}}"#
        ))
        .unwrap()
    }

    fn config(name: &str, ip: &str, primary: bool, state: &str, subnet: &str) -> String {
        format!(
            r#"{{"name": "{name}", "properties": {{"privateIPAddress": "{ip}", "primary": {primary},
                "privateIPAddressVersion": "IPv4", "provisioningState": "{state}",
                "subnet": {{"id": "{RG}/Microsoft.Network/virtualNetworks/VNET/subnets/{subnet}"}}}}}}"#
        )
    }

    fn pairs(tags: &[Tag]) -> Vec<(&str, &str)> {
        tags.iter()
            .map(|t| (t.key.as_str(), t.value.as_str()))
            .collect()
    }

    fn vm(name: &str) -> VmInfo {
        VmInfo {
            id: canonical(&format!("{RG}/Microsoft.Compute/virtualMachines/{name}")),
            size: "Standard_D2s_v3".into(),
            location: "eastus".into(),
        }
    }

    #[test]
    fn subnets_free_addresses_are_size_less_five_less_configurations_in_use() {
        let vnet: VirtualNetwork = serde_json::from_str(&format!(
            r#"{{"id": "{RG}/Microsoft.Network/virtualNetworks/VNET", "location": "eastus", "tags": {{"k": "v"}},
                "properties": {{"addressSpace": {{"addressPrefixes": ["10.0.0.0/16", "fd00::/48", "10.1.0.0/16"]}},
                  "subnets": [
                    {{"id": "{RG}/Microsoft.Network/virtualNetworks/VNET/subnets/nodes",
                      "properties": {{"addressPrefix": "10.0.1.0/24", "ipConfigurations": [{{"id": "a"}}, {{"id": "b"}}]}}}},
                    {{"id": "{RG}/Microsoft.Network/virtualNetworks/VNET/subnets/tiny",
                      "properties": {{"addressPrefixes": ["10.0.2.0/29"], "ipConfigurations": [{{"id": "a"}}, {{"id": "b"}}, {{"id": "c"}}, {{"id": "d"}}]}}}},
                    {{"id": "{RG}/Microsoft.Network/virtualNetworks/VNET/subnets/v6only", "properties": {{"addressPrefix": "fd00::/64"}}}}
                  ]}}}}"#
        ))
        .unwrap();
        let vpcs = vpcs(std::slice::from_ref(&vnet)).unwrap();
        // As ARM spells them, as Cilium's operator reports them.
        assert_eq!(
            vpcs[0].id,
            format!("{RG}/Microsoft.Network/virtualNetworks/VNET")
        );
        assert_eq!(vpcs[0].cidrs.len(), 2);
        assert_eq!(vpcs[0].primary_cidr.to_string(), "10.0.0.0/16");
        let found = subnets(std::slice::from_ref(&vnet), &Tags::new()).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(
            found[0].id,
            "/subscriptions/s/resourceGroups/RG/providers/Microsoft.Network/virtualNetworks/VNET/subnets/nodes"
        );
        assert_eq!(found[0].available_addresses, 256 - 5 - 2);
        assert_eq!(found[1].available_addresses, 0, "8 - 5 - 4 saturates");
        assert_eq!(found[0].availability_zone, "eastus");
        assert_eq!(found[0].vpc_id, vpcs[0].id);
        assert_eq!(pairs(&found[0].tags), [("k", "v")]);
        let other_tags: Tags = [("k".to_string(), "w".to_string())].into_iter().collect();
        assert!(subnets(&[vnet], &other_tags).unwrap().is_empty());
    }

    #[test]
    fn a_bad_prefix_is_other_naming_the_subnet() {
        let vnet: VirtualNetwork = serde_json::from_str(&format!(
            r#"{{"id": "v", "properties": {{"subnets": [{{"id": "{RG}/s1", "properties": {{"addressPrefix": "10.0.1.1/24"}}}}]}}}}"#
        ))
        .unwrap();
        assert!(
            matches!(subnets(&[vnet], &Tags::new()), Err(Error::Other(m)) if m.contains("s1") && m.contains("bits set"))
        );
    }

    #[test]
    fn nsgs_take_their_first_subnets_network_and_unassociated_ones_are_left_out() {
        let nsgs: Vec<NetworkSecurityGroup> = serde_json::from_str(&format!(
            r#"[{{"id": "{RG}/Microsoft.Network/networkSecurityGroups/A",
                 "properties": {{"subnets": [{{"id": "{RG}/Microsoft.Network/virtualNetworks/VNET/subnets/nodes"}}]}}}},
                {{"id": "{RG}/Microsoft.Network/networkSecurityGroups/B", "properties": {{}}}}]"#
        ))
        .unwrap();
        let groups = security_groups(&nsgs, &Tags::new());
        assert_eq!(groups.len(), 1);
        assert_eq!(
            groups[0].id,
            format!("{RG}/Microsoft.Network/networkSecurityGroups/A")
        );
        assert_eq!(
            groups[0].vpc_id,
            format!("{RG}/Microsoft.Network/virtualNetworks/VNET")
        );
    }

    #[test]
    fn macs_take_colons_and_keep_arms_case_and_bad_ones_are_refused() {
        assert_eq!(
            mac("n", Some("00-0D-3A-1B-C7-21")).unwrap(),
            "00:0D:3A:1B:C7:21"
        );
        assert_eq!(
            mac("n", Some("00:0d:3a:1b:c7:21")).unwrap(),
            "00:0d:3a:1b:c7:21"
        );
        assert_eq!(mac("n", None).unwrap(), "");
        assert!(
            matches!(mac("n", Some("00-0D-3A")), Err(Error::Other(m)) if m.contains("six octets"))
        );
        assert!(mac("n", Some("00-0D-3A-1B-C7-ZZ")).is_err());
        assert!(mac("n", Some("000D3A1BC721")).is_err());
    }

    #[test]
    fn instances_group_nics_by_vm_primary_first_with_only_succeeded_secondaries() {
        let nics = vec![
            nic_json(
                "vm1-nic2",
                "VM1",
                false,
                &config("ipconfig1", "10.0.1.9", true, "Succeeded", "nodes"),
            ),
            nic_json(
                "vm1-nic1",
                "vm1",
                true,
                &[
                    config("ipconfig1", "10.0.1.4", true, "Succeeded", "nodes"),
                    config("Cilium-a", "10.0.1.5", false, "Succeeded", "nodes"),
                    config("Cilium-b", "10.0.1.6", false, "Updating", "nodes"),
                    // The same subnet, its name spelled in another case.
                    config("Cilium-c", "10.0.1.8", false, "Succeeded", "NODES"),
                    config("other", "10.0.2.6", false, "Succeeded", "elsewhere"),
                ]
                .join(","),
            ),
            nic_json(
                "stranger",
                "vm9",
                true,
                &config("ipconfig1", "10.0.1.7", true, "Succeeded", "nodes"),
            ),
        ];
        let found = instances(&nics, &[vm("vm1")]).unwrap();
        assert_eq!(found.len(), 1);
        let instance = &found[0];
        assert_eq!(instance.id, vm("vm1").id);
        assert_eq!(instance.instance_type, "Standard_D2s_v3");
        let ids: Vec<(&str, u32)> = instance
            .interfaces
            .iter()
            .map(|i| (i.id.rsplit('/').next().unwrap(), i.index))
            .collect();
        assert_eq!(ids, [("vm1-nic1", 0), ("vm1-nic2", 1)]);
        let primary = &instance.interfaces[0];
        assert_eq!(primary.primary_ip, parse_ipv4("10.0.1.4").unwrap());
        assert_eq!(
            primary.addresses,
            [
                parse_ipv4("10.0.1.5").unwrap(),
                parse_ipv4("10.0.1.8").unwrap()
            ]
        );
        // ARM's spelling, as Cilium's operator reports them; only the VM's
        // id is lower-cased.
        assert_eq!(primary.mac, "00:0D:3A:1B:C7:21");
        assert_eq!(
            primary.subnet_id,
            format!("{RG}/Microsoft.Network/virtualNetworks/VNET/subnets/nodes")
        );
        assert_eq!(
            primary.vpc_id,
            format!("{RG}/Microsoft.Network/virtualNetworks/VNET")
        );
        assert_eq!(primary.vpc_id, instance.vpc_id);
        assert_eq!(primary.instance_id.as_deref(), Some(instance.id.as_str()));
        assert_eq!(
            primary.security_groups,
            [format!("{RG}/Microsoft.Network/networkSecurityGroups/NSG")]
        );
        assert_eq!(
            instance.id,
            "/subscriptions/s/resourcegroups/rg/providers/microsoft.compute/virtualmachines/vm1"
        );
        assert_eq!(pairs(&primary.tags), [("pool", "a")]);
    }

    #[test]
    fn a_bad_address_is_other_naming_nic_and_configuration() {
        let nics = vec![nic_json(
            "n",
            "vm1",
            true,
            &config("ipconfig1", "10.0.1.400", true, "Succeeded", "nodes"),
        )];
        assert!(
            matches!(instances(&nics, &[vm("vm1")]), Err(Error::Other(m)) if m.contains("ipconfig1") && m.contains("/n"))
        );
    }
}
