//! The edits assign-ips and unassign-ips make to a resource read from ARM
//! before it is PUT back: IP configurations added (Dynamic allocation, the
//! NIC's subnet, the first configuration's application security groups) or
//! removed by name (those holding addresses, those in provisioning state
//! Failed), within Azure's limits, all or nothing. Pure: the ARM round
//! trips are in `assign.rs`.

use ipam_provider_sdk::net::{ipv4_text, parse_ipv4};
use ipam_provider_sdk::{Error, Ipv4};

use crate::convert::primary_configuration;
use crate::models::{
    IpConfiguration, IpConfigurationProperties, Nic, ScaleSetIpConfiguration,
    ScaleSetIpConfigurationProperties, ScaleSetNicConfiguration, ScaleSetVm,
};

/// IP configurations one NIC may have, and one VM over all its NICs.
pub const MAX_PER_NIC: usize = 256;
pub const MAX_PER_VM: usize = 256;

fn over_limit(what: &str, has: usize, adding: usize, limit: usize) -> Result<(), Error> {
    if has + adding > limit {
        return Err(Error::AddressLimit(format!(
            "{what} has {has} IP configurations; {adding} more would pass Azure's {limit}"
        )));
    }
    Ok(())
}

fn fresh(names: &[String], taken: &[&str]) -> Result<(), Error> {
    match names
        .iter()
        .find(|n| taken.iter().any(|t| t.eq_ignore_ascii_case(n)))
    {
        Some(name) => Err(Error::Other(format!(
            "the new configuration name {name} is taken"
        ))),
        None => Ok(()),
    }
}

/// Add a configuration named after each of `names` to a standalone NIC.
pub fn add_to_nic(nic: &mut Nic, names: &[String]) -> Result<(), Error> {
    let configs = &mut nic.properties.ip_configurations;
    over_limit(&nic.id, configs.len(), names.len(), MAX_PER_NIC)?;
    let taken: Vec<&str> = configs.iter().map(|c| c.name.as_str()).collect();
    fresh(names, &taken)?;
    let primary = primary_configuration(configs)
        .ok_or_else(|| Error::Other(format!("{}: no IP configuration", nic.id)))?;
    let subnet = primary.properties.subnet.clone().ok_or_else(|| {
        Error::Other(format!(
            "{}: the primary configuration has no subnet",
            nic.id
        ))
    })?;
    let groups = configs
        .first()
        .and_then(|c| c.properties.application_security_groups.clone());
    for name in names {
        configs.push(IpConfiguration {
            name: name.clone(),
            id: None,
            properties: IpConfigurationProperties {
                private_ip_allocation_method: Some("Dynamic".into()),
                private_ip_address_version: Some("IPv4".into()),
                subnet: Some(subnet.clone()),
                primary: Some(false),
                application_security_groups: groups.clone(),
                ..Default::default()
            },
            rest: Default::default(),
        });
    }
    Ok(())
}

/// The configurations of a NIC holding `addresses` (the primary address is
/// refused); addresses it does not hold are ignored.
pub fn names_holding(nic: &Nic, addresses: &[Ipv4]) -> Result<Vec<String>, Error> {
    let configs = &nic.properties.ip_configurations;
    let primary = primary_configuration(configs).map(|c| c.name.as_str());
    let mut names = Vec::new();
    for config in configs {
        let held = config
            .properties
            .private_ip_address
            .as_deref()
            .and_then(|text| parse_ipv4(text).ok());
        let Some(address) = held.filter(|a| addresses.contains(a)) else {
            continue;
        };
        if Some(config.name.as_str()) == primary {
            return Err(Error::InvalidArgument(format!(
                "{} is the primary address of {}",
                ipv4_text(address),
                nic.id
            )));
        }
        names.push(config.name.clone());
    }
    Ok(names)
}

/// The NIC's configurations in provisioning state `Failed`, the primary
/// excepted: never counted in the pool (`convert` counts Succeeded ones),
/// so no pod holds their addresses, and every write leaves them out.
pub fn failed_names(nic: &Nic) -> Vec<String> {
    let configs = &nic.properties.ip_configurations;
    let primary = primary_configuration(configs).map(|c| c.name.as_str());
    configs
        .iter()
        .filter(|c| Some(c.name.as_str()) != primary)
        .filter(|c| {
            c.properties
                .provisioning_state
                .as_deref()
                .is_some_and(|state| state.eq_ignore_ascii_case("Failed"))
        })
        .map(|c| c.name.clone())
        .collect()
}

fn named(names: &[String], name: &str) -> bool {
    names.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Remove the configurations named `names` from a standalone NIC; how many
/// it removed.
pub fn remove_from_nic(nic: &mut Nic, names: &[String]) -> usize {
    let configs = &mut nic.properties.ip_configurations;
    let before = configs.len();
    configs.retain(|c| !named(names, &c.name));
    before - configs.len()
}

/// The addresses ARM allocated to the configurations named `names`, in
/// their order; a configuration missing or without an address is `other`.
pub fn allocated(nic: &Nic, names: &[String]) -> Result<Vec<Ipv4>, Error> {
    names
        .iter()
        .map(|name| {
            let config = nic
                .properties
                .ip_configurations
                .iter()
                .find(|c| c.name.eq_ignore_ascii_case(name))
                .ok_or_else(|| {
                    Error::Other(format!(
                        "{}: the new configuration {name} is not on it",
                        nic.id
                    ))
                })?;
            let text = config
                .properties
                .private_ip_address
                .as_deref()
                .ok_or_else(|| {
                    Error::Other(format!("{}: ARM allocated no address to {name}", nic.id))
                })?;
            parse_ipv4(text).map_err(|e| Error::Other(format!("{}: {name}: {e}", nic.id)))
        })
        .collect()
}

fn scale_set_nic<'a>(
    vm: &'a mut ScaleSetVm,
    nic_name: &str,
) -> Result<&'a mut ScaleSetNicConfiguration, Error> {
    let id = vm.id.clone();
    vm.properties
        .network_profile_configuration
        .as_mut()
        .and_then(|p| {
            p.network_interface_configurations
                .iter_mut()
                .find(|c| c.name.eq_ignore_ascii_case(nic_name))
        })
        .ok_or_else(|| Error::NotFound(format!("{id} has no network interface {nic_name}")))
}

/// Drop the image reference before a PUT: with a Compute Gallery image
/// ARM refuses the update for a permission on the image (Cilium #19695,
/// AKS #1819), and ARM keeps the VM's image when it is left out.
fn clear_image_reference(vm: &mut ScaleSetVm) {
    if let Some(storage) = vm.properties.storage_profile.as_mut() {
        storage.image_reference = None;
    }
}

/// Add a configuration named after each of `names` to the scale-set VM's
/// NIC `nic_name`.
pub fn add_to_scale_set_vm(
    vm: &mut ScaleSetVm,
    nic_name: &str,
    names: &[String],
) -> Result<(), Error> {
    let on_vm: usize = vm
        .properties
        .network_profile_configuration
        .iter()
        .flat_map(|p| &p.network_interface_configurations)
        .map(|c| c.properties.ip_configurations.len())
        .sum();
    over_limit(&vm.id, on_vm, names.len(), MAX_PER_VM)?;
    let nic = scale_set_nic(vm, nic_name)?;
    let configs = &mut nic.properties.ip_configurations;
    over_limit(nic_name, configs.len(), names.len(), MAX_PER_NIC)?;
    let taken: Vec<&str> = configs.iter().map(|c| c.name.as_str()).collect();
    fresh(names, &taken)?;
    let primary = configs
        .iter()
        .find(|c| c.properties.primary == Some(true))
        .or_else(|| configs.first())
        .ok_or_else(|| Error::Other(format!("{nic_name}: no IP configuration")))?;
    let subnet = primary.properties.subnet.clone().ok_or_else(|| {
        Error::Other(format!(
            "{nic_name}: the primary configuration has no subnet"
        ))
    })?;
    let groups = configs
        .first()
        .and_then(|c| c.properties.application_security_groups.clone());
    for name in names {
        configs.push(ScaleSetIpConfiguration {
            name: name.clone(),
            properties: ScaleSetIpConfigurationProperties {
                subnet: Some(subnet.clone()),
                primary: Some(false),
                private_ip_address_version: Some("IPv4".into()),
                application_security_groups: groups.clone(),
                rest: Default::default(),
            },
            rest: Default::default(),
        });
    }
    clear_image_reference(vm);
    Ok(())
}

/// Remove the configurations named `names` from the scale-set VM's NIC
/// `nic_name`; how many it removed (none: nothing to PUT).
pub fn remove_from_scale_set_vm(
    vm: &mut ScaleSetVm,
    nic_name: &str,
    names: &[String],
) -> Result<usize, Error> {
    let nic = scale_set_nic(vm, nic_name)?;
    let configs = &mut nic.properties.ip_configurations;
    let before = configs.len();
    configs.retain(|c| !named(names, &c.name));
    let removed = before - configs.len();
    clear_image_reference(vm);
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUBNET: &str = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/nodes";

    fn nic(configs: usize) -> Nic {
        let configs: Vec<String> = (0..configs)
            .map(|n| {
                format!(
                    r#"{{"name": "c{n}", "properties": {{"privateIPAddress": "10.0.1.{}", "primary": {},
                        "subnet": {{"id": "{SUBNET}"}}, "applicationSecurityGroups": [{{"id": "asg"}}]}}}}"#,
                    n + 4,
                    n == 0
                )
            })
            .collect();
        serde_json::from_str(&format!(
            r#"{{"id": "nic", "properties": {{"ipConfigurations": [{}]}}}}"#,
            configs.join(",")
        ))
        .unwrap()
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("Cilium-{i}")).collect()
    }

    #[test]
    fn added_configurations_are_dynamic_in_the_primary_subnet_with_the_first_ones_groups() {
        let mut nic = nic(2);
        add_to_nic(&mut nic, &names(2)).unwrap();
        let configs = &nic.properties.ip_configurations;
        assert_eq!(configs.len(), 4);
        let added = serde_json::to_value(&configs[3]).unwrap();
        assert_eq!(
            added,
            serde_json::json!({"name": "Cilium-1", "properties": {
                "privateIPAllocationMethod": "Dynamic", "privateIPAddressVersion": "IPv4",
                "subnet": {"id": SUBNET}, "primary": false,
                "applicationSecurityGroups": [{"id": "asg"}]}})
        );
    }

    #[test]
    fn past_256_configurations_nothing_is_added_and_it_is_address_limit() {
        let mut full = nic(250);
        assert!(
            matches!(add_to_nic(&mut full, &names(7)), Err(Error::AddressLimit(m)) if m.contains("250"))
        );
        assert_eq!(full.properties.ip_configurations.len(), 250);
        add_to_nic(&mut full, &names(6)).unwrap();
    }

    #[test]
    fn a_taken_name_is_refused() {
        let mut nic = nic(2);
        assert!(
            matches!(add_to_nic(&mut nic, &["C1".to_string()]), Err(Error::Other(m)) if m.contains("taken"))
        );
    }

    #[test]
    fn removal_finds_configurations_by_address_and_refuses_the_primary() {
        let mut nic = nic(3);
        let held = [
            parse_ipv4("10.0.1.6").unwrap(),
            parse_ipv4("10.9.9.9").unwrap(),
        ];
        let found = names_holding(&nic, &held).unwrap();
        assert_eq!(found, ["c2"]);
        assert_eq!(remove_from_nic(&mut nic, &found), 1);
        assert_eq!(nic.properties.ip_configurations.len(), 2);
        assert_eq!(remove_from_nic(&mut nic, &["C1".into(), "gone".into()]), 1);
        assert!(
            names_holding(&nic, &held).unwrap().is_empty(),
            "again: nothing to remove"
        );
        let primary = names_holding(&nic, &[parse_ipv4("10.0.1.4").unwrap()]);
        assert!(matches!(primary, Err(Error::InvalidArgument(m)) if m.contains("primary")));
    }

    #[test]
    fn allocated_addresses_are_read_by_name_and_a_missing_one_is_other() {
        let nic = nic(3);
        assert_eq!(
            allocated(&nic, &["c2".into(), "C1".into()]).unwrap(),
            [
                parse_ipv4("10.0.1.6").unwrap(),
                parse_ipv4("10.0.1.5").unwrap()
            ]
        );
        assert!(
            matches!(allocated(&nic, &["Cilium-x".into()]), Err(Error::Other(m)) if m.contains("not on it"))
        );
    }

    #[test]
    fn failed_configurations_are_found_by_state_but_never_the_primary() {
        let mut nic = nic(4);
        for (config, state) in nic.properties.ip_configurations.iter_mut().zip([
            "Failed",
            "Failed",
            "Succeeded",
            "failed",
        ]) {
            config.properties.provisioning_state = Some(state.into());
        }
        assert_eq!(failed_names(&nic), ["c1", "c3"]);
    }

    fn scale_set_vm(configs_per_nic: &[usize]) -> ScaleSetVm {
        let nics: Vec<String> = configs_per_nic
            .iter()
            .enumerate()
            .map(|(n, count)| {
                let configs: Vec<String> = (0..*count)
                    .map(|c| {
                        format!(
                            r#"{{"name": "ip{c}", "properties": {{"primary": {}, "subnet": {{"id": "{SUBNET}"}}}}}}"#,
                            c == 0
                        )
                    })
                    .collect();
                format!(
                    r#"{{"name": "nic{n}", "properties": {{"primary": {}, "ipConfigurations": [{}]}}}}"#,
                    n == 0,
                    configs.join(",")
                )
            })
            .collect();
        serde_json::from_str(&format!(
            r#"{{"id": "vm", "etag": "\"1\"", "properties": {{
                "storageProfile": {{"imageReference": {{"id": "/galleries/g/images/i"}}, "osDisk": {{}}}},
                "networkProfileConfiguration": {{"networkInterfaceConfigurations": [{}]}}}}}}"#,
            nics.join(",")
        ))
        .unwrap()
    }

    #[test]
    fn a_scale_set_vm_gets_configurations_on_the_named_nic_and_loses_its_image_reference() {
        let mut vm = scale_set_vm(&[1, 1]);
        add_to_scale_set_vm(&mut vm, "NIC1", &names(2)).unwrap();
        let body = serde_json::to_value(&vm).unwrap();
        let configs = &body["properties"]["networkProfileConfiguration"]
            ["networkInterfaceConfigurations"][1]["properties"]["ipConfigurations"];
        assert_eq!(configs.as_array().unwrap().len(), 3);
        assert_eq!(
            configs[2],
            serde_json::json!({"name": "Cilium-1", "properties": {"subnet": {"id": SUBNET}, "primary": false, "privateIPAddressVersion": "IPv4"}})
        );
        assert_eq!(
            body["properties"]["storageProfile"],
            serde_json::json!({"osDisk": {}})
        );
        assert!(matches!(
            add_to_scale_set_vm(&mut vm, "nic7", &names(1)),
            Err(Error::NotFound(_))
        ));
    }

    #[test]
    fn the_vm_wide_limit_counts_every_nic() {
        let mut vm = scale_set_vm(&[200, 50]);
        assert!(
            matches!(add_to_scale_set_vm(&mut vm, "nic1", &names(7)), Err(Error::AddressLimit(m)) if m.contains("250"))
        );
        add_to_scale_set_vm(&mut vm, "nic1", &names(6)).unwrap();
    }

    #[test]
    fn removal_from_a_scale_set_vm_says_how_many_went() {
        let mut vm = scale_set_vm(&[3]);
        assert_eq!(
            remove_from_scale_set_vm(&mut vm, "nic0", &["IP2".into(), "gone".into()]).unwrap(),
            1
        );
        assert_eq!(
            remove_from_scale_set_vm(&mut vm, "nic0", &["ip2".into()]).unwrap(),
            0
        );
    }
}
