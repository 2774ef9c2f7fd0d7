//! A mock cloud inside the guest, configured entirely by its settings: VPCs,
//! subnets, security groups, instance types with their limits, instances with
//! their primary interface, and injected faults. It enforces what a real cloud
//! enforces and moto does not (interface count, device-index conflicts,
//! address slots, subnet capacity, /28 fragmentation), and is deterministic.
//! Settings are documented in `providers/mock/README.md`.
//!
//! Besides the component, the crate is a native library: the host's fake
//! cloud (`ipam-fake-cloud`, `host/fake-cloud`) runs this same state machine
//! ([`Cloud`], built from [`Settings`], with its [`faults`]) compiled
//! natively, so the engine's tests run without wasmtime and there is one
//! implementation of the mock's rules.

pub mod cloud;
pub mod faults;
mod pool;
pub mod settings;

use ipam_provider_sdk::{
    export_provider, Assigned, Capabilities, CreateInterfaceRequest, Error, Instance, IpRequest,
    Limits, NetworkInterface, Provider, ProviderInfo, SecurityGroup, Subnet, Tag, Vpc,
};

pub use cloud::Cloud;
pub use settings::{
    FaultSpec, InstanceSpec, InstanceTypeSpec, SecurityGroupSpec, Settings, SubnetSpec, VpcSpec,
};

#[derive(Default)]
pub struct MockProvider {
    cloud: Option<Cloud>,
}

impl MockProvider {
    /// The configured cloud, after the operation's injected fault (if any).
    fn cloud(&mut self, operation: &str) -> Result<&mut Cloud, Error> {
        let cloud = self
            .cloud
            .as_mut()
            .ok_or_else(|| Error::InvalidArgument("configure was not called".into()))?;
        match cloud.faults.check(operation) {
            Some(fault) => Err(fault.error),
            None => Ok(cloud),
        }
    }
}

impl Provider for MockProvider {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "mock".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            capabilities: Capabilities {
                create_interface: true,
                release: true,
                prefixes: true,
                delete_interface: true,
            },
            // The cloud lives in this instance's memory: one instance only.
            max_concurrency: 1,
        }
    }

    fn configure(&mut self, settings: &str) -> Result<(), Error> {
        let settings = serde_json::from_str(settings)
            .map_err(|e| Error::InvalidArgument(format!("mock settings: {e}")))?;
        self.cloud = Some(Cloud::new(settings)?);
        Ok(())
    }

    fn get_vpcs(&mut self) -> Result<Vec<Vpc>, Error> {
        Ok(self.cloud("get-vpcs")?.vpcs())
    }

    fn get_subnets(&mut self) -> Result<Vec<Subnet>, Error> {
        Ok(self.cloud("get-subnets")?.subnets())
    }

    fn get_security_groups(&mut self) -> Result<Vec<SecurityGroup>, Error> {
        Ok(self.cloud("get-security-groups")?.security_groups())
    }

    fn get_instances(&mut self, ids: &[String]) -> Result<Vec<Instance>, Error> {
        Ok(self.cloud("get-instances")?.instances(ids))
    }

    fn get_instance_limits(&mut self, instance_type: &str) -> Result<Limits, Error> {
        self.cloud("get-instance-limits")?
            .instance_limits(instance_type)
    }

    fn get_detached_interfaces(&mut self, tags: &[Tag]) -> Result<Vec<NetworkInterface>, Error> {
        Ok(self
            .cloud("get-detached-interfaces")?
            .detached_interfaces(tags))
    }

    fn create_interface(
        &mut self,
        request: CreateInterfaceRequest,
    ) -> Result<NetworkInterface, Error> {
        self.cloud("create-interface")?.create_interface(request)
    }

    fn delete_interface(&mut self, interface_id: &str) -> Result<(), Error> {
        self.cloud("delete-interface")?
            .delete_interface(interface_id)
    }

    fn assign_ips(&mut self, interface_id: &str, request: IpRequest) -> Result<Assigned, Error> {
        self.cloud("assign-ips")?.assign_ips(interface_id, request)
    }

    fn unassign_ips(
        &mut self,
        interface_id: &str,
        addresses: &[String],
        prefixes: &[String],
    ) -> Result<(), Error> {
        self.cloud("unassign-ips")?
            .unassign_ips(interface_id, addresses, prefixes)
    }
}

export_provider!(MockProvider);
