//! A mock cloud inside the guest, configured entirely by its settings: VPCs,
//! subnets, security groups, instance types with their limits, instances with
//! their primary interface, and injected faults. It enforces what a real cloud
//! enforces and moto does not (interface count, device-index conflicts,
//! address slots, subnet capacity, /28 fragmentation), and is deterministic.
//! Settings are documented in `providers/mock/README.md`.
//!
//! Its answers are `ipam:provider@0.2.0` records; its `info` declares EC2's
//! rate model ([`rate_model`]), as the AWS provider does.
//!
//! This crate is the mock as a library, exporting nothing. The component
//! (`target/components/mock.wasm`) is `component/` beside it, which exports
//! [`MockProvider`] with the SDK's `export_provider!`;
//! `providers/testing/mock-v0-1-0` serves the same [`MockProvider`] as
//! `ipam:provider@0.1.0`; and the host's fake cloud (`ipam-fake-cloud`,
//! `host/fake-cloud`) runs this same state machine ([`Cloud`], built from
//! [`Settings`], with its [`faults`]) compiled natively, so the engine's tests
//! run without wasmtime and there is one implementation of the mock's rules.

pub mod cloud;
pub mod faults;
mod pool;
pub mod rate_model;
pub mod settings;

use ipam_provider_sdk::{
    Assigned, Capabilities, CreateInterfaceRequest, Error, Instance, IpRequest, Ipv4, Ipv4Net,
    Limits, NetworkInterface, Provider, ProviderInfo, SecurityGroup, Subnet, Tag, Vpc,
};

pub use cloud::Cloud;
pub use rate_model::rate_model;
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
            rate_model: rate_model(),
        }
    }

    fn configure(&mut self, settings: &str) -> Result<(), Error> {
        let settings = ipam_provider_sdk::settings::parse(settings)?;
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
        addresses: &[Ipv4],
        prefixes: &[Ipv4Net],
    ) -> Result<(), Error> {
        self.cloud("unassign-ips")?
            .unassign_ips(interface_id, addresses, prefixes)
    }
}

#[cfg(test)]
mod tests {
    use ipam_provider_sdk::net::parse_ipv4;

    use super::*;

    const SETTINGS: &str = r#"{
        "vpcs": [{"id": "vpc-1", "cidrs": ["10.0.0.0/16", "100.64.0.0/16"]}],
        "subnets": [{"id": "subnet-a", "vpc-id": "vpc-1", "cidr": "10.0.1.0/24",
                     "availability-zone": "zone-a", "occupied": ["10.0.1.4"]}],
        "instance-types": {"m5.large": {"max-interfaces": 3, "ipv4-per-interface": 10,
                                        "prefix-delegation": true}},
        "instances": [{"id": "i-1", "instance-type": "m5.large", "subnet-id": "subnet-a"}]
    }"#;

    fn configured() -> MockProvider {
        let mut mock = MockProvider::default();
        mock.configure(SETTINGS).expect("good settings");
        mock
    }

    fn net(text: &str) -> Ipv4Net {
        text.parse().unwrap()
    }

    fn ip(text: &str) -> Ipv4 {
        parse_ipv4(text).unwrap()
    }

    #[test]
    fn listings_are_compact_addresses_and_networks() {
        let mut mock = configured();
        let vpc = &mock.get_vpcs().unwrap()[0];
        assert_eq!(vpc.primary_cidr, net("10.0.0.0/16"));
        assert_eq!(vpc.cidrs, [net("10.0.0.0/16"), net("100.64.0.0/16")]);
        let subnet = &mock.get_subnets().unwrap()[0];
        assert_eq!(subnet.cidr, net("10.0.1.0/24"));
        assert_eq!(
            subnet.available_addresses,
            256 - 5 - 2,
            "occupied and primary"
        );
        let instance = &mock.get_instances(&[]).unwrap()[0];
        let primary = &instance.interfaces[0];
        assert_eq!(primary.primary_ip, ip("10.0.1.5"), "after the occupied .4");
    }

    #[test]
    fn assigned_addresses_and_prefixes_come_back_as_listed_and_unassign_by_value() {
        let mut mock = configured();
        let eni = mock.get_instances(&[]).unwrap()[0].interfaces[0].id.clone();
        let addresses = mock.assign_ips(&eni, IpRequest::Addresses(2)).unwrap();
        assert_eq!(addresses.addresses, [ip("10.0.1.6"), ip("10.0.1.7")]);
        assert!(addresses.prefixes.is_empty());
        let prefixes = mock.assign_ips(&eni, IpRequest::Prefixes(1)).unwrap();
        assert_eq!(prefixes.prefixes, [net("10.0.1.16/28")]);
        assert!(prefixes.addresses.is_empty());
        let listed = mock.get_instances(&[]).unwrap()[0].interfaces[0].clone();
        assert_eq!(listed.addresses, addresses.addresses);
        assert_eq!(listed.prefixes, prefixes.prefixes);

        mock.unassign_ips(&eni, &[ip("10.0.1.6")], &[net("10.0.1.16/28")])
            .unwrap();
        let listed = mock.get_instances(&[]).unwrap()[0].interfaces[0].clone();
        assert_eq!(listed.addresses, [ip("10.0.1.7")]);
        assert!(listed.prefixes.is_empty());
    }

    #[test]
    fn unassigning_a_prefix_that_is_not_a_network_or_not_a_28_is_invalid() {
        let mut mock = configured();
        let eni = mock.get_instances(&[]).unwrap()[0].interfaces[0].id.clone();
        let bits_past = Ipv4Net {
            address: ip("10.0.1.17"),
            length: 28,
        };
        assert_eq!(
            mock.unassign_ips(&eni, &[], &[bits_past]),
            Err(Error::InvalidArgument(
                "10.0.1.17/28 has bits set past its length (the network is 10.0.1.16/28)".into()
            ))
        );
        assert_eq!(
            mock.unassign_ips(&eni, &[], &[net("10.0.1.0/24")]),
            Err(Error::InvalidArgument("10.0.1.0/24 is not a /28".into()))
        );
        assert_eq!(
            mock.unassign_ips(&eni, &[ip("10.0.1.5")], &[]),
            Err(Error::InvalidArgument(format!(
                "10.0.1.5 is the primary address of {eni}"
            )))
        );
    }

    #[test]
    fn bad_settings_name_the_key_path_and_unknown_keys_are_refused() {
        let mut mock = MockProvider::default();
        let bad =
            r#"{"subnets": [{"id": "s", "vpc-id": "v", "cidr": 10, "availability-zone": "z"}]}"#;
        assert_eq!(
            mock.configure(bad),
            Err(Error::InvalidArgument(
                "settings: subnets[0].cidr: invalid type: integer `10`, expected a string".into()
            ))
        );
        let unknown = r#"{"vpcs": [{"id": "v", "cidrs": [], "tags": {}}]}"#;
        match mock.configure(unknown) {
            Err(Error::InvalidArgument(text)) => {
                assert!(text.contains("unknown field `tags`"), "{text}")
            }
            other => panic!("expected invalid-argument, got {other:?}"),
        }
        let bad_cidr = r#"{"vpcs": [{"id": "v", "cidrs": ["10.0.0.1/16"]}]}"#;
        assert_eq!(
            mock.configure(bad_cidr),
            Err(Error::InvalidArgument(
                "vpc v: 10.0.0.1/16 has bits set past its length (the network is 10.0.0.0/16)"
                    .into()
            ))
        );
    }
}
