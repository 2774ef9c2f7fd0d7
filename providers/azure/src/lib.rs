//! The Azure provider: secondary IP configurations on the NICs of VMs and
//! scale-set VMs through Azure Resource Manager, over `wasi:http`, with the
//! release Cilium's Azure mode never shipped. The Entra token comes from the
//! host (`get-credentials`, key `access-token`); the guest never reads
//! files, environment, instance metadata or Entra. Settings, the calls of
//! each operation, the rate model and the error table: `README.md`.
//!
//! ARM's JSON is modelled by hand (`models`), not with `azure_mgmt_network`:
//! `README.md` says why. Each operation is blocking code over a
//! [`transport::Transport`]; a write waits for its long-running operation by
//! polling, sleeping on wasi:clocks. Every write leaves out the NIC's IP
//! configurations in provisioning state Failed, and an assign whose
//! operation ended Failed is undone (`undo`; `README.md` says why).

mod arm;
mod assign;
mod convert;
mod credentials;
mod errors;
mod ip_configs;
mod kept_networks;
mod models;
#[cfg(test)]
mod nic_scripts;
mod permissions;
mod rate_model;
mod read;
mod resource_id;
#[cfg(test)]
mod role_tests;
mod settings;
mod transport;
mod undo;

use std::time::Duration;

use ipam_provider_sdk::{
    export_provider, Assigned, Capabilities, Error, Instance, IpRequest, Ipv4, Ipv4Net, Limits,
    Provider, ProviderInfo, SecurityGroup, Subnet, Vpc,
};

use arm::Arm;
use kept_networks::KeptNetworks;
use permissions::Guarded;
use settings::Settings;
use transport::{Transport, WasiTransport};

/// The ARM client and the settings it was built from. Its transport sends
/// only the requests whose permissions `permissions` lists.
pub(crate) struct Azure<T> {
    arm: Arm<Guarded<T>>,
    settings: Settings,
    /// get-vpcs' listing, for the get-subnets right after it.
    kept_networks: Option<KeptNetworks>,
}

impl<T: Transport> Azure<T> {
    fn new(transport: T, settings: Settings) -> Self {
        Azure {
            arm: Arm {
                transport: Guarded(transport),
                endpoint: settings.endpoint().to_string(),
                operation_timeout: Duration::from_millis(settings.operation_timeout_ms),
                poll_interval: Duration::from_millis(settings.poll_interval_ms),
            },
            settings,
            kept_networks: None,
        }
    }
}

#[derive(Default)]
pub struct AzureProvider {
    azure: Option<Azure<WasiTransport>>,
}

/// The name of a new IP configuration: `Cilium-` and eight random
/// lower-case letters and digits, as Cilium names them.
fn configuration_name() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 8];
    wstd::rand::get_random_bytes(&mut bytes);
    let suffix: String = bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    format!("Cilium-{suffix}")
}

impl AzureProvider {
    fn azure(&mut self) -> Result<&mut Azure<WasiTransport>, Error> {
        self.azure.as_mut().ok_or_else(|| {
            Error::InvalidArgument("the azure provider has not been configured".to_string())
        })
    }
}

impl Provider for AzureProvider {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "azure".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            capabilities: Capabilities {
                // Azure attaches a NIC only to a stopped (deallocated) VM:
                // no documented way exists to add one to a running node.
                create_interface: false,
                release: true,
                prefixes: false,
                delete_interface: false,
            },
            // Nothing is kept in the guest; If-Match turns two writers of one
            // NIC into a conflict rather than a lost update.
            max_concurrency: 4,
            rate_model: rate_model::rate_model(),
        }
    }

    fn configure(&mut self, settings: &str) -> Result<(), Error> {
        let settings = Settings::parse(settings)?;
        self.azure = Some(Azure::new(WasiTransport::new(), settings));
        Ok(())
    }

    fn get_vpcs(&mut self) -> Result<Vec<Vpc>, Error> {
        self.azure()?.vpcs()
    }

    fn get_subnets(&mut self) -> Result<Vec<Subnet>, Error> {
        self.azure()?.subnets()
    }

    fn get_security_groups(&mut self) -> Result<Vec<SecurityGroup>, Error> {
        self.azure()?.security_groups()
    }

    fn get_instances(&mut self, ids: &[String]) -> Result<Vec<Instance>, Error> {
        self.azure()?.instances(ids)
    }

    fn get_instance_limits(&mut self, instance_type: &str) -> Result<Limits, Error> {
        self.azure()?.instance_limits(instance_type)
    }

    fn assign_ips(&mut self, interface_id: &str, request: IpRequest) -> Result<Assigned, Error> {
        let addresses = self
            .azure()?
            .assign(interface_id, request, &mut configuration_name)?;
        Ok(Assigned {
            addresses,
            prefixes: Vec::new(),
        })
    }

    fn unassign_ips(
        &mut self,
        interface_id: &str,
        addresses: &[Ipv4],
        prefixes: &[Ipv4Net],
    ) -> Result<(), Error> {
        self.azure()?.unassign(interface_id, addresses, prefixes)
    }
}

export_provider!(AzureProvider);
