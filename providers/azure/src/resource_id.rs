//! ARM resource ids: parsing the interface ids the engine hands back into
//! the resources they name (before any goes into a URL), and the id
//! arithmetic of listings (a subnet's virtual network, a scale-set NIC's VM).

use std::fmt;

/// A NIC, by the resource that owns its IP configurations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NicId {
    /// `.../providers/Microsoft.Network/networkInterfaces/{name}`: its own
    /// resource, updated with a PUT of the NIC.
    Standalone {
        subscription: String,
        resource_group: String,
        name: String,
    },
    /// `.../providers/Microsoft.Compute/virtualMachineScaleSets/{vmss}/virtualMachines/{vm}/networkInterfaces/{name}`:
    /// read-only; its configurations are the scale-set VM's model, updated
    /// with a PUT of the VM.
    ScaleSet {
        subscription: String,
        resource_group: String,
        scale_set: String,
        instance: String,
        name: String,
    },
}

/// An interface id that names no NIC this provider can update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadId(pub String);

impl fmt::Display for BadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not the id of a VM's or a scale-set VM's network interface",
            self.0
        )
    }
}

/// A path segment that goes into a URL as it is: ARM names of letters,
/// digits and `-_.()`, and not dots alone (`..` would climb the path).
fn safe(segment: &str) -> bool {
    !segment.is_empty()
        && !segment.bytes().all(|b| b == b'.')
        && segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'(' | b')'))
}

impl NicId {
    pub fn parse(id: &str) -> Result<NicId, BadId> {
        let bad = || BadId(id.to_string());
        let segments: Vec<&str> = id.strip_prefix('/').ok_or_else(bad)?.split('/').collect();
        if !segments.iter().all(|s| safe(s)) {
            return Err(bad());
        }
        let is = |at: usize, word: &str| {
            segments
                .get(at)
                .is_some_and(|s| s.eq_ignore_ascii_case(word))
        };
        let common = is(0, "subscriptions") && is(2, "resourceGroups") && is(4, "providers");
        if common && segments.len() == 8 && is(5, "Microsoft.Network") && is(6, "networkInterfaces")
        {
            return Ok(NicId::Standalone {
                subscription: segments[1].to_string(),
                resource_group: segments[3].to_string(),
                name: segments[7].to_string(),
            });
        }
        if common
            && segments.len() == 12
            && is(5, "Microsoft.Compute")
            && is(6, "virtualMachineScaleSets")
            && is(8, "virtualMachines")
            && is(10, "networkInterfaces")
        {
            return Ok(NicId::ScaleSet {
                subscription: segments[1].to_string(),
                resource_group: segments[3].to_string(),
                scale_set: segments[7].to_string(),
                instance: segments[9].to_string(),
                name: segments[11].to_string(),
            });
        }
        Err(bad())
    }

    /// The NIC's path, for a GET.
    pub fn path(&self) -> String {
        match self {
            NicId::Standalone {
                subscription,
                resource_group,
                name,
            } => format!(
                "/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/Microsoft.Network/networkInterfaces/{name}"
            ),
            NicId::ScaleSet { name, .. } => {
                format!("{}/networkInterfaces/{name}", self.scale_set_vm_path().unwrap_or_default())
            }
        }
    }

    /// The scale-set VM owning a scale-set NIC.
    pub fn scale_set_vm_path(&self) -> Option<String> {
        match self {
            NicId::Standalone { .. } => None,
            NicId::ScaleSet {
                subscription,
                resource_group,
                scale_set,
                instance,
                ..
            } => Some(format!(
                "/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/Microsoft.Compute/virtualMachineScaleSets/{scale_set}/virtualMachines/{instance}"
            )),
        }
    }
}

/// The id of a subnet's virtual network: the subnet id up to `/subnets/`.
pub fn vnet_of_subnet(subnet_id: &str) -> Option<&str> {
    let at = subnet_id.to_ascii_lowercase().rfind("/subnets/")?;
    Some(&subnet_id[..at])
}

/// An id in one case, for comparing ids across resources: ARM spells a
/// resource group differently in different answers, and compares ids
/// without case. A VM's id is also reported in this form (the instance id),
/// as Cilium's operator lower-cases it; other ids are reported as ARM
/// spells them.
pub fn canonical(id: &str) -> String {
    id.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUB: &str = "/subscriptions/0000-1111/resourceGroups/MC_rg";

    #[test]
    fn a_standalone_nic_id_parses_and_gives_its_path_back() {
        let id = format!("{SUB}/providers/Microsoft.Network/networkInterfaces/vm1-nic");
        let nic = NicId::parse(&id).expect("a NIC id");
        assert_eq!(
            nic,
            NicId::Standalone {
                subscription: "0000-1111".into(),
                resource_group: "MC_rg".into(),
                name: "vm1-nic".into()
            }
        );
        assert_eq!(nic.path(), id);
        assert_eq!(nic.scale_set_vm_path(), None);
    }

    #[test]
    fn a_scale_set_nic_id_names_its_vm_whatever_the_case_of_the_words() {
        let id = format!(
            "{SUB}/providers/microsoft.compute/virtualmachinescalesets/aks-pool/virtualMachines/3/networkInterfaces/aks-pool-nic"
        );
        let nic = NicId::parse(&id).expect("a scale-set NIC id");
        assert_eq!(
            nic.scale_set_vm_path().as_deref(),
            Some("/subscriptions/0000-1111/resourceGroups/MC_rg/providers/Microsoft.Compute/virtualMachineScaleSets/aks-pool/virtualMachines/3")
        );
        assert!(nic
            .path()
            .ends_with("/virtualMachines/3/networkInterfaces/aks-pool-nic"));
    }

    #[test]
    fn anything_else_is_refused_before_it_reaches_a_url() {
        for id in [
            "",
            "eni-123",
            "subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/n",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/n",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/n?x=1",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/a b",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/../x",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/..",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/n/extra",
            "/subscriptions/s/resourceGroups//providers/Microsoft.Network/networkInterfaces/n",
        ] {
            assert_eq!(NicId::parse(id), Err(BadId(id.to_string())), "{id}");
        }
    }

    #[test]
    fn a_subnets_virtual_network_is_its_id_up_to_subnets() {
        assert_eq!(
            vnet_of_subnet(&format!(
                "{SUB}/providers/Microsoft.Network/virtualNetworks/vnet/Subnets/pods"
            )),
            Some(format!("{SUB}/providers/Microsoft.Network/virtualNetworks/vnet").as_str())
        );
        assert_eq!(vnet_of_subnet("/no/subnet/here"), None);
        assert_eq!(
            canonical("/Subscriptions/A/resourceGroups/MC_RG"),
            "/subscriptions/a/resourcegroups/mc_rg"
        );
    }
}
