//! The Node's `spec.providerID`, read into the instance it names: where the
//! instance id comes from when the metadata service gives none (`--cloud
//! none`, or a metadata service that does not answer). The kubelet or the
//! cloud controller manager sets it, in the cloud's own form:
//!
//! - EC2: `aws:///<zone>/<instance>` (also `aws:////<instance>` and
//!   `aws:///<instance>`, as the AWS cloud provider reads them), the
//!   instance being `i-` and hexadecimal digits. The operator's AWS provider
//!   knows an instance by that `i-…` id (spec.instance-id, as cilium-agent
//!   writes it from IMDS).
//! - Azure: `azure://<VM resource id>`, a standalone VM
//!   (`…/virtualMachines/<name>`) or a Uniform scale set's
//!   (`…/virtualMachineScaleSets/<vmss>/virtualMachines/<n>`). The
//!   operator's Azure provider, as Cilium's Azure IPAM, knows the VM by its
//!   resource id lower-cased (`ipam_clouds::azure::vm_id`).
//!
//! Pure: text in, a typed value or a typed error naming what is wrong out.

use std::fmt;

use ipam_clouds::azure::vm_id::{AzureVmId, AzureVmIdError};

/// The instance a provider id names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderId {
    /// An EC2 instance, with its availability zone when the id names one.
    Aws {
        zone: Option<String>,
        instance: String,
    },
    /// An Azure VM.
    Azure(AzureVmId),
}

/// Which cloud a provider id is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderCloud {
    Aws,
    Azure,
}

impl fmt::Display for ProviderCloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProviderCloud::Aws => "aws",
            ProviderCloud::Azure => "azure",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderIdError {
    #[error("the provider id is empty")]
    Empty,
    #[error("provider id {0:?} has no scheme (aws:// or azure://)")]
    NoScheme(String),
    #[error("provider id {id:?}: scheme {scheme:?} is not one the agent reads (aws, azure); set --instance-id")]
    UnknownScheme { id: String, scheme: String },
    #[error("provider id {0:?} is not aws:///<zone>/<instance>")]
    AwsShape(String),
    #[error("provider id {id:?}: {instance:?} is not an EC2 instance id (i- and 8 or 17 hexadecimal digits)")]
    AwsInstance { id: String, instance: String },
    #[error("provider id {id:?}: {source}")]
    Azure { id: String, source: AzureVmIdError },
}

impl ProviderId {
    /// Reads a Node's `spec.providerID`.
    pub fn parse(text: &str) -> Result<Self, ProviderIdError> {
        if text.is_empty() {
            return Err(ProviderIdError::Empty);
        }
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| ProviderIdError::NoScheme(text.to_string()))?;
        match scheme {
            "aws" => parse_aws(text, rest),
            "azure" => AzureVmId::parse(rest)
                .map(ProviderId::Azure)
                .map_err(|source| ProviderIdError::Azure {
                    id: text.to_string(),
                    source,
                }),
            other => Err(ProviderIdError::UnknownScheme {
                id: text.to_string(),
                scheme: other.to_string(),
            }),
        }
    }

    pub fn cloud(&self) -> ProviderCloud {
        match self {
            ProviderId::Aws { .. } => ProviderCloud::Aws,
            ProviderId::Azure(_) => ProviderCloud::Azure,
        }
    }

    /// The instance id in the form the operator's provider knows the
    /// instance by (spec.instance-id).
    pub fn instance_id(&self) -> String {
        match self {
            ProviderId::Aws { instance, .. } => instance.clone(),
            ProviderId::Azure(vm) => vm.instance_id(),
        }
    }

    /// The availability zone the id names (EC2's only).
    pub fn zone(&self) -> Option<&str> {
        match self {
            ProviderId::Aws { zone, .. } => zone.as_deref(),
            ProviderId::Azure(_) => None,
        }
    }
}

/// `rest` is what follows `aws://`: an empty host, then `/<zone>/<id>`,
/// `//<id>` or `/<id>`.
fn parse_aws(text: &str, rest: &str) -> Result<ProviderId, ProviderIdError> {
    let shape = || ProviderIdError::AwsShape(text.to_string());
    let path = rest.strip_prefix('/').ok_or_else(shape)?;
    let (zone, instance) = match path.split('/').collect::<Vec<_>>().as_slice() {
        [instance] => (None, *instance),
        ["", instance] => (None, *instance),
        [zone, instance] if zone.trim() == *zone => (Some(zone.to_string()), *instance),
        _ => return Err(shape()),
    };
    if !is_ec2_instance_id(instance) {
        return Err(ProviderIdError::AwsInstance {
            id: text.to_string(),
            instance: instance.to_string(),
        });
    }
    Ok(ProviderId::Aws {
        zone,
        instance: instance.to_string(),
    })
}

/// `i-` and 8 (older) or 17 lower-case hexadecimal digits.
fn is_ec2_instance_id(text: &str) -> bool {
    text.strip_prefix("i-").is_some_and(|digits| {
        matches!(digits.len(), 8 | 17)
            && digits
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCALE_SET_VM: &str = "azure:///subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourceGroups/MC_rg-aks_aks-prod_westeurope/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-10706209-vmss/virtualMachines/3";

    #[test]
    fn good_ids_give_the_operators_instance_id() {
        let cases: [(&str, ProviderCloud, &str, Option<&str>); 6] = [
            (
                "aws:///us-east-1a/i-0123456789abcdef0",
                ProviderCloud::Aws,
                "i-0123456789abcdef0",
                Some("us-east-1a"),
            ),
            (
                "aws:////i-0123456789abcdef0",
                ProviderCloud::Aws,
                "i-0123456789abcdef0",
                None,
            ),
            ("aws:///i-12345678", ProviderCloud::Aws, "i-12345678", None),
            (
                SCALE_SET_VM,
                ProviderCloud::Azure,
                // As the registration test's IMDS gives it (same VM).
                "/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourcegroups/mc_rg-aks_aks-prod_westeurope/providers/microsoft.compute/virtualmachinescalesets/aks-nodepool1-10706209-vmss/virtualmachines/3",
                None,
            ),
            (
                "azure:///subscriptions/s/resourceGroups/Prod-RG/providers/Microsoft.Compute/virtualMachines/Worker-1",
                ProviderCloud::Azure,
                "/subscriptions/s/resourcegroups/prod-rg/providers/microsoft.compute/virtualmachines/worker-1",
                None,
            ),
            // The cloud provider's own mixed casing of the fixed segments.
            (
                "azure:///subscriptions/s/resourcegroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/vmss/virtualMachines/0",
                ProviderCloud::Azure,
                "/subscriptions/s/resourcegroups/rg/providers/microsoft.compute/virtualmachinescalesets/vmss/virtualmachines/0",
                None,
            ),
        ];
        for (text, cloud, instance_id, zone) in cases {
            let id = ProviderId::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(id.cloud(), cloud, "{text}");
            assert_eq!(id.instance_id(), instance_id, "{text}");
            assert_eq!(id.zone(), zone, "{text}");
        }
    }

    #[test]
    fn bad_ids_are_refused_naming_what_is_wrong() {
        type Expected = fn(&ProviderIdError) -> bool;
        let cases: [(&str, Expected); 12] = [
            ("", |e| *e == ProviderIdError::Empty),
            ("i-0123456789abcdef0", |e| {
                matches!(e, ProviderIdError::NoScheme(_))
            }),
            ("kind://docker/kind/kind-worker", |e| {
                matches!(e, ProviderIdError::UnknownScheme { scheme, .. } if scheme == "kind")
            }),
            ("gce://project/zone/vm", |e| {
                matches!(e, ProviderIdError::UnknownScheme { scheme, .. } if scheme == "gce")
            }),
            ("aws://us-east-1a/i-0123456789abcdef0", |e| {
                matches!(e, ProviderIdError::AwsShape(_))
            }),
            ("aws:///us-east-1a/extra/i-0123456789abcdef0", |e| {
                matches!(e, ProviderIdError::AwsShape(_))
            }),
            ("aws:///us-east-1a/", |e| {
                matches!(e, ProviderIdError::AwsInstance { instance, .. } if instance.is_empty())
            }),
            ("aws:///us-east-1a/vol-0123456789abcdef0", |e| {
                matches!(e, ProviderIdError::AwsInstance { instance, .. } if instance.starts_with("vol-"))
            }),
            ("aws:///us-east-1a/i-0123456789ABCDEF0", |e| {
                matches!(e, ProviderIdError::AwsInstance { .. })
            }),
            ("aws:///us-east-1a/i-012345", |e| {
                matches!(e, ProviderIdError::AwsInstance { .. })
            }),
            ("azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/nic", |e| {
                matches!(e, ProviderIdError::Azure { .. })
            }),
            ("azure://subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm", |e| {
                matches!(e, ProviderIdError::Azure { .. })
            }),
        ];
        for (text, expected) in cases {
            let error = ProviderId::parse(text).expect_err(text);
            assert!(expected(&error), "{text}: {error:?}");
            if !text.is_empty() {
                assert!(error.to_string().contains(text), "{text}: {error}");
            }
        }
    }
}
