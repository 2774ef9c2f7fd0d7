//! Which VM an Azure resource id names, and the instance id Cilium's Azure
//! IPAM knows that VM by.
//!
//! Cilium's operator (pkg/azure/api) files each network interface under the
//! lower-cased `virtualMachine.id` of the NIC; its agent (nodediscovery)
//! writes `spec.instance-id` as the lower-cased Kubernetes provider id
//! without its `azure://` prefix, because the Azure cloud provider mixes
//! cases there. Both are the VM's ARM resource id:
//! - standalone VM (and a Flexible scale set's VM):
//!   `/subscriptions/<s>/resourcegroups/<rg>/providers/microsoft.compute/virtualmachines/<name>`
//! - Uniform scale set VM:
//!   `/subscriptions/<s>/resourcegroups/<rg>/providers/microsoft.compute/virtualmachinescalesets/<vmss>/virtualmachines/<instance-id>`
//!
//! IMDS's `compute.resourceId` (since api-version 2019-03-11) is that same
//! resource id, in either form: the Azure cloud provider takes the node's
//! provider id from it. So the instance id is `compute.resourceId`, checked
//! for one of these shapes and lower-cased.

use std::fmt;

/// The VM a resource id names (names as given, not lower-cased).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AzureVmId {
    /// A standalone VM, or a VM of a Flexible scale set.
    Standalone {
        subscription: String,
        resource_group: String,
        name: String,
    },
    /// A VM of a Uniform scale set, by its instance id (a decimal number).
    ScaleSetVm {
        subscription: String,
        resource_group: String,
        scale_set: String,
        instance: String,
    },
}

/// Text that is not the resource id of a VM.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a VM resource id (/subscriptions/<s>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachines/<name> or .../virtualMachineScaleSets/<vmss>/virtualMachines/<n>)")]
pub struct AzureVmIdError(pub String);

impl AzureVmId {
    /// Read a VM's resource id; the fixed segments match in any case, as
    /// ARM's do.
    pub fn parse(text: &str) -> Result<Self, AzureVmIdError> {
        let fail = || AzureVmIdError(text.to_string());
        let rest = text.strip_prefix('/').ok_or_else(fail)?;
        let segments: Vec<&str> = rest.split('/').collect();
        if segments.iter().any(|s| s.is_empty() || s.trim() != *s) {
            return Err(fail());
        }
        let fixed = |segment: &str, name: &str| segment.eq_ignore_ascii_case(name);
        match segments.as_slice() {
            [subscriptions, subscription, resource_groups, resource_group, providers, compute, rest @ ..]
                if fixed(subscriptions, "subscriptions")
                    && fixed(resource_groups, "resourceGroups")
                    && fixed(providers, "providers")
                    && fixed(compute, "Microsoft.Compute") =>
            {
                let subscription = subscription.to_string();
                let resource_group = resource_group.to_string();
                match rest {
                    [machines, name] if fixed(machines, "virtualMachines") => {
                        Ok(Self::Standalone {
                            subscription,
                            resource_group,
                            name: name.to_string(),
                        })
                    }
                    [scale_sets, scale_set, machines, instance]
                        if fixed(scale_sets, "virtualMachineScaleSets")
                            && fixed(machines, "virtualMachines") =>
                    {
                        Ok(Self::ScaleSetVm {
                            subscription,
                            resource_group,
                            scale_set: scale_set.to_string(),
                            instance: instance.to_string(),
                        })
                    }
                    _ => Err(fail()),
                }
            }
            _ => Err(fail()),
        }
    }

    pub fn subscription(&self) -> &str {
        match self {
            Self::Standalone { subscription, .. } | Self::ScaleSetVm { subscription, .. } => {
                subscription
            }
        }
    }

    pub fn resource_group(&self) -> &str {
        match self {
            Self::Standalone { resource_group, .. } | Self::ScaleSetVm { resource_group, .. } => {
                resource_group
            }
        }
    }

    /// The id Cilium's Azure IPAM knows the VM by: the resource id, lower-cased.
    pub fn instance_id(&self) -> String {
        self.to_string().to_ascii_lowercase()
    }
}

impl fmt::Display for AzureVmId {
    /// The resource id in ARM's own casing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Standalone {
                subscription,
                resource_group,
                name,
            } => write!(
                f,
                "/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/Microsoft.Compute/virtualMachines/{name}"
            ),
            Self::ScaleSetVm {
                subscription,
                resource_group,
                scale_set,
                instance,
            } => write!(
                f,
                "/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/Microsoft.Compute/virtualMachineScaleSets/{scale_set}/virtualMachines/{instance}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_give_cilium_s_lower_cased_instance_id() {
        let cases = [
            (
                "/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourceGroups/MC_rg_aks_westeurope/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-10706209-vmss/virtualMachines/3",
                "/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourcegroups/mc_rg_aks_westeurope/providers/microsoft.compute/virtualmachinescalesets/aks-nodepool1-10706209-vmss/virtualmachines/3",
            ),
            (
                "/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourceGroups/Prod-RG/providers/Microsoft.Compute/virtualMachines/Worker-1",
                "/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourcegroups/prod-rg/providers/microsoft.compute/virtualmachines/worker-1",
            ),
            // ARM's fixed segments come in any case (the Kubernetes provider
            // id mixes them); the id is the same.
            (
                "/SUBSCRIPTIONS/s/RESOURCEGROUPS/rg/PROVIDERS/MICROSOFT.COMPUTE/VIRTUALMACHINESCALESETS/vmss/VIRTUALMACHINES/0",
                "/subscriptions/s/resourcegroups/rg/providers/microsoft.compute/virtualmachinescalesets/vmss/virtualmachines/0",
            ),
        ];
        for (resource_id, instance_id) in cases {
            let vm = AzureVmId::parse(resource_id).unwrap();
            assert_eq!(vm.instance_id(), instance_id);
        }
    }

    #[test]
    fn the_parts_are_read() {
        assert_eq!(
            AzureVmId::parse("/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/vmss/virtualMachines/7"),
            Ok(AzureVmId::ScaleSetVm {
                subscription: "s".into(),
                resource_group: "rg".into(),
                scale_set: "vmss".into(),
                instance: "7".into(),
            })
        );
        let vm = AzureVmId::parse(
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm",
        )
        .unwrap();
        assert_eq!((vm.subscription(), vm.resource_group()), ("s", "rg"));
    }

    #[test]
    fn other_ids_are_refused() {
        for text in [
            "",
            "subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm/",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines",
            "/subscriptions//resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/nic",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/vmss",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/vmss/virtualMachines/3/networkInterfaces/nic",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/ vm",
        ] {
            assert_eq!(
                AzureVmId::parse(text),
                Err(AzureVmIdError(text.to_string())),
                "{text:?}"
            );
        }
    }
}
