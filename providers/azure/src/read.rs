//! The read operations: lists per resource group, converted by `convert`.

use ipam_provider_sdk::{Error, Instance, Limits, SecurityGroup, Subnet, Vpc};

use crate::convert::{self, VmInfo};
use crate::ip_configs::MAX_PER_NIC;
use crate::kept_networks::KeptNetworks;
use crate::models::{
    NetworkSecurityGroup, Nic, ResourceSku, ScaleSet, ScaleSetVm, VirtualMachine, VirtualNetwork,
};
use crate::resource_id::canonical;
use crate::settings::has_tags;
use crate::transport::Transport;
use crate::Azure;

impl<T: Transport> Azure<T> {
    /// `/subscriptions/{s}/resourceGroups/{rg}/providers/{rest}` of each
    /// group of virtual networks and NSGs, listed at `api_version`.
    fn list_in_network_groups<R: serde::de::DeserializeOwned>(
        &self,
        rest: &str,
        api_version: &str,
    ) -> Result<Vec<R>, Error> {
        let mut all = Vec::new();
        for group in self.settings.network_groups() {
            let path = format!("{}/providers/{rest}", self.group_path(group));
            all.extend(self.arm.list(&self.arm.url(&path, api_version))?);
        }
        Ok(all)
    }

    fn group_path(&self, group: &str) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{group}",
            self.settings.subscription_id
        )
    }

    fn virtual_networks(&self) -> Result<Vec<VirtualNetwork>, Error> {
        self.list_in_network_groups(
            "Microsoft.Network/virtualNetworks",
            &self.settings.api_versions.network,
        )
    }

    /// The virtual networks; their listing is kept for the get-subnets
    /// that follows (`kept_networks`).
    pub fn vpcs(&mut self) -> Result<Vec<Vpc>, Error> {
        let listed_at = self.arm.transport.now();
        let networks = self.virtual_networks()?;
        let vpcs = convert::vpcs(&networks)?;
        self.kept_networks = Some(KeptNetworks::new(networks, listed_at));
        Ok(vpcs)
    }

    /// The subnets, from get-vpcs' listing if it is still fresh, else from
    /// a listing of their own.
    pub fn subnets(&mut self) -> Result<Vec<Subnet>, Error> {
        let now = self.arm.transport.now();
        let kept = self
            .kept_networks
            .take()
            .and_then(|kept| kept.fresh_at(now));
        let networks = match kept {
            Some(networks) => networks,
            None => self.virtual_networks()?,
        };
        convert::subnets(&networks, &self.settings.subnet_tags)
    }

    pub fn security_groups(&self) -> Result<Vec<SecurityGroup>, Error> {
        let nsgs: Vec<NetworkSecurityGroup> = self.list_in_network_groups(
            "Microsoft.Network/networkSecurityGroups",
            &self.settings.api_versions.network,
        )?;
        Ok(convert::security_groups(
            &nsgs,
            &self.settings.security_group_tags,
        ))
    }

    /// The node resource group's selected scale sets' VMs and NICs, then
    /// its standalone VMs' NICs.
    pub fn instances(&self, ids: &[String]) -> Result<Vec<Instance>, Error> {
        let settings = &self.settings;
        let versions = &settings.api_versions;
        let mut vms: Vec<VmInfo> = Vec::new();
        let mut nics: Vec<Nic> = Vec::new();
        let group_path = self.group_path(&settings.resource_group);
        let scale_sets: Vec<ScaleSet> = self.arm.list(&self.arm.url(
            &format!("{group_path}/providers/Microsoft.Compute/virtualMachineScaleSets"),
            &versions.compute,
        ))?;
        let selected = scale_sets.iter().filter(|s| {
            let named = settings
                .scale_sets
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n.eq_ignore_ascii_case(&s.name)));
            named && has_tags(&s.tags, &settings.instance_tags)
        });
        for scale_set in selected {
            let path = format!(
                "{group_path}/providers/Microsoft.Compute/virtualMachineScaleSets/{}",
                scale_set.name
            );
            let members: Vec<ScaleSetVm> = self.arm.list(
                &self
                    .arm
                    .url(&format!("{path}/virtualMachines"), &versions.compute),
            )?;
            vms.extend(members.iter().map(|vm| VmInfo {
                id: canonical(&vm.id),
                size: vm.sku.as_ref().map(|s| s.name.clone()).unwrap_or_default(),
                location: vm.location.clone(),
            }));
            nics.extend(self.arm.list::<Nic>(&self.arm.url(
                &format!("{path}/networkInterfaces"),
                &versions.scale_set_network,
            ))?);
        }
        if settings.standalone_vms {
            let standalone: Vec<VirtualMachine> = self.arm.list(&self.arm.url(
                &format!("{group_path}/providers/Microsoft.Compute/virtualMachines"),
                &versions.compute,
            ))?;
            vms.extend(
                standalone
                    .iter()
                    .filter(|vm| has_tags(&vm.tags, &settings.instance_tags))
                    .map(|vm| VmInfo {
                        id: canonical(&vm.id),
                        size: vm.properties.hardware_profile.vm_size.clone(),
                        location: vm.location.clone(),
                    }),
            );
            nics.extend(self.arm.list::<Nic>(&self.arm.url(
                &format!("{group_path}/providers/Microsoft.Network/networkInterfaces"),
                &versions.network,
            ))?);
        }
        if !ids.is_empty() {
            let wanted: Vec<String> = ids.iter().map(|id| canonical(id)).collect();
            vms.retain(|vm| wanted.contains(&vm.id));
        }
        convert::instances(&nics, &vms)
    }

    /// The VM size's NIC count from Resource SKUs; 256 IPv4 configurations
    /// per NIC; no prefixes on Azure.
    pub fn instance_limits(&self, size: &str) -> Result<Limits, Error> {
        let mut path = format!(
            "/subscriptions/{}/providers/Microsoft.Compute/skus",
            self.settings.subscription_id
        );
        if let Some(location) = &self.settings.location {
            path.push_str(&format!("?$filter=location%20eq%20%27{location}%27"));
        }
        let skus: Vec<ResourceSku> = self.arm.list(
            &self
                .arm
                .url(&path, &self.settings.api_versions.resource_skus),
        )?;
        let sku = skus
            .iter()
            .find(|s| s.resource_type == "virtualMachines" && s.name.eq_ignore_ascii_case(size))
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "VM size {size} is not among the Resource SKUs{}",
                    self.settings
                        .location
                        .as_ref()
                        .map(|l| format!(" of {l}"))
                        .unwrap_or_default()
                ))
            })?;
        let interfaces = sku
            .capabilities
            .iter()
            .find(|c| c.name == "MaxNetworkInterfaces")
            .ok_or_else(|| {
                Error::Other(format!(
                    "VM size {size}: no MaxNetworkInterfaces capability"
                ))
            })?;
        let max_interfaces = interfaces
            .value
            .parse::<u32>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                Error::Other(format!(
                    "VM size {size}: MaxNetworkInterfaces {:?} is not a count",
                    interfaces.value
                ))
            })?;
        Ok(Limits {
            max_interfaces,
            ipv4_per_interface: MAX_PER_NIC as u32,
            ipv6_per_interface: 0,
            prefix_delegation: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::arm::scripted::{answer, Scripted};
    use crate::settings::Settings;

    const ARM: &str = "http://127.0.0.1:1";
    const SUB: &str = "00000000-1111-2222-3333-444444444444";

    fn azure(location: Option<&str>, answers: Vec<crate::transport::Response>) -> Azure<Scripted> {
        let mut settings = serde_json::json!({
            "subscription-id": SUB, "resource-group": "rg", "arm-endpoint": ARM,
        });
        if let Some(location) = location {
            settings["location"] = location.into();
        }
        let settings = Settings::parse(&settings.to_string()).expect("settings");
        Azure::new(Scripted::new(answers), settings)
    }

    const SKUS: &str = r#"{"value": [
        {"resourceType": "disks", "name": "Standard_D2s_v3", "capabilities": []},
        {"resourceType": "virtualMachines", "name": "Standard_D2s_v3",
         "capabilities": [{"name": "MaxNetworkInterfaces", "value": "2"}]},
        {"resourceType": "virtualMachines", "name": "Standard_Bad",
         "capabilities": [{"name": "MaxNetworkInterfaces", "value": "0"}]},
        {"resourceType": "virtualMachines", "name": "Standard_None", "capabilities": []}
    ]}"#;

    #[test]
    fn limits_come_from_the_vm_sku_of_the_location_when_one_is_set() {
        let azure = azure(Some("eastus"), vec![answer(200, &[], SKUS)]);
        let limits = azure.instance_limits("standard_d2s_v3").expect("limits");
        assert_eq!(
            (
                limits.max_interfaces,
                limits.ipv4_per_interface,
                limits.ipv6_per_interface,
                limits.prefix_delegation
            ),
            (2, 256, 0, false)
        );
        assert_eq!(
            azure.arm.transport.urls(),
            [format!(
                "GET {ARM}/subscriptions/{SUB}/providers/Microsoft.Compute/skus?$filter=location%20eq%20%27eastus%27&api-version=2021-07-01"
            )]
        );
    }

    #[test]
    fn without_a_location_every_regions_skus_are_read() {
        let azure = azure(None, vec![answer(200, &[], SKUS)]);
        azure.instance_limits("Standard_D2s_v3").expect("limits");
        assert_eq!(
            azure.arm.transport.urls(),
            [format!("GET {ARM}/subscriptions/{SUB}/providers/Microsoft.Compute/skus?api-version=2021-07-01")]
        );
    }

    #[test]
    fn an_unknown_size_is_not_found_and_a_bad_sku_is_other() {
        let azure = azure(
            None,
            vec![
                answer(200, &[], SKUS),
                answer(200, &[], SKUS),
                answer(200, &[], SKUS),
            ],
        );
        assert!(
            matches!(azure.instance_limits("Standard_Nope"), Err(Error::NotFound(m)) if m.contains("Standard_Nope"))
        );
        assert!(
            matches!(azure.instance_limits("Standard_Bad"), Err(Error::Other(m)) if m.contains("not a count"))
        );
        assert!(
            matches!(azure.instance_limits("Standard_None"), Err(Error::Other(m)) if m.contains("no MaxNetworkInterfaces"))
        );
    }

    #[test]
    fn networks_are_read_in_the_nodes_group_and_the_network_groups() {
        let settings = Settings::parse(&format!(
            r#"{{"subscription-id": "{SUB}", "resource-group": "MC_rg", "arm-endpoint": "{ARM}",
                "network-resource-groups": ["vnet-rg"]}}"#
        ))
        .expect("settings");
        let empty = || answer(200, &[], r#"{"value": []}"#);
        let mut azure = Azure::new(Scripted::new(vec![empty(), empty()]), settings);
        assert!(azure.vpcs().expect("vpcs").is_empty());
        let urls = azure.arm.transport.urls();
        assert!(
            urls[0].contains("/resourceGroups/MC_rg/providers/Microsoft.Network/virtualNetworks?"),
            "{urls:?}"
        );
        assert!(
            urls[1]
                .contains("/resourceGroups/vnet-rg/providers/Microsoft.Network/virtualNetworks?"),
            "{urls:?}"
        );
    }

    /// One virtual network of one subnet, as each listing answers.
    const NETWORK_PAGE: &str = r#"{"value": [{"id": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Network/virtualNetworks/v",
        "properties": {"addressSpace": {"addressPrefixes": ["10.0.0.0/16"]},
          "subnets": [{"id": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Network/virtualNetworks/v/subnets/nodes",
                       "properties": {"addressPrefix": "10.0.1.0/24"}}]}}]}"#;

    /// An Azure client whose network resource groups are `groups`, with
    /// `listings` answers to give.
    fn azure_on_groups(groups: &[&str], listings: usize) -> Azure<Scripted> {
        let settings = Settings::parse(
            &serde_json::json!({
                "subscription-id": SUB, "resource-group": groups[0], "arm-endpoint": ARM,
                "network-resource-groups": groups[1..],
            })
            .to_string(),
        )
        .expect("settings");
        let answers = (0..listings)
            .map(|_| answer(200, &[], NETWORK_PAGE))
            .collect();
        Azure::new(Scripted::new(answers), settings)
    }

    fn network_listings(azure: &Azure<Scripted>) -> usize {
        azure
            .arm
            .transport
            .urls()
            .iter()
            .filter(|url| url.contains("/providers/Microsoft.Network/virtualNetworks?"))
            .count()
    }

    #[test]
    fn get_subnets_right_after_get_vpcs_takes_its_listing() {
        let mut azure = azure_on_groups(&["MC_rg", "vnet-rg"], 2);
        assert_eq!(azure.vpcs().expect("vpcs").len(), 2);
        azure.arm.transport.clock.set(Duration::from_millis(900));
        let subnets = azure.subnets().expect("subnets from the same listing");
        assert_eq!(subnets.len(), 2, "one from each group's listing");
        assert_eq!(network_listings(&azure), 2, "one per network group");
    }

    #[test]
    fn a_second_get_subnets_lists_again() {
        let mut azure = azure_on_groups(&["MC_rg", "vnet-rg"], 4);
        azure.vpcs().expect("vpcs");
        azure.subnets().expect("subnets");
        assert_eq!(azure.subnets().expect("subnets again").len(), 2);
        assert_eq!(network_listings(&azure), 4);
    }

    #[test]
    fn get_subnets_more_than_a_second_after_get_vpcs_lists_again() {
        let mut azure = azure_on_groups(&["MC_rg"], 2);
        azure.arm.transport.clock.set(Duration::from_secs(50));
        azure.vpcs().expect("vpcs");
        azure.arm.transport.clock.set(Duration::from_millis(51_001));
        assert_eq!(azure.subnets().expect("subnets").len(), 1);
        assert_eq!(network_listings(&azure), 2);
    }
}
