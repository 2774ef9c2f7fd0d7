//! Between the mock's 0.2.0 records and 0.1.0's: the same fields, with
//! addresses and networks as text in 0.1.0.

use ipam_provider_sdk as v2;
use ipam_provider_sdk::net::{ipv4_text, parse_ipv4};

use crate::ipam::provider::types as v1;

fn networks(nets: &[v2::Ipv4Net]) -> Vec<String> {
    nets.iter().map(ToString::to_string).collect()
}

fn addresses(addresses: &[v2::Ipv4]) -> Vec<String> {
    addresses.iter().copied().map(ipv4_text).collect()
}

fn tags(tags: Vec<v2::Tag>) -> Vec<v1::Tag> {
    tags.into_iter()
        .map(|t| v1::Tag {
            key: t.key,
            value: t.value,
        })
        .collect()
}

pub fn tag_in(tag: v1::Tag) -> v2::Tag {
    v2::Tag {
        key: tag.key,
        value: tag.value,
    }
}

/// The mock's info, named for this component, without the rate model.
pub fn info(info: v2::ProviderInfo) -> v1::ProviderInfo {
    let c = info.capabilities;
    v1::ProviderInfo {
        name: "mock-v0.1.0".into(),
        version: info.version,
        capabilities: v1::Capabilities {
            create_interface: c.create_interface,
            release: c.release,
            prefixes: c.prefixes,
            delete_interface: c.delete_interface,
        },
        max_concurrency: info.max_concurrency,
    }
}

pub fn error(error: v2::Error) -> v1::Error {
    use v2::Error as E;
    match error {
        E::Throttled(ms) => v1::Error::Throttled(ms),
        E::NotFound(m) => v1::Error::NotFound(m),
        E::InterfaceLimit(m) => v1::Error::InterfaceLimit(m),
        E::AddressLimit(m) => v1::Error::AddressLimit(m),
        E::SubnetFull(m) => v1::Error::SubnetFull(m),
        E::InsufficientPrefixes(m) => v1::Error::InsufficientPrefixes(m),
        E::Conflict(m) => v1::Error::Conflict(m),
        E::InvalidArgument(m) => v1::Error::InvalidArgument(m),
        E::Unauthorized(m) => v1::Error::Unauthorized(m),
        E::Transient(m) => v1::Error::Transient(m),
        E::Other(m) => v1::Error::Other(m),
    }
}

pub fn vpc(vpc: v2::Vpc) -> v1::Vpc {
    v1::Vpc {
        id: vpc.id,
        primary_cidr: vpc.primary_cidr.to_string(),
        cidrs: networks(&vpc.cidrs),
    }
}

pub fn subnet(subnet: v2::Subnet) -> v1::Subnet {
    v1::Subnet {
        id: subnet.id,
        cidr: subnet.cidr.to_string(),
        availability_zone: subnet.availability_zone,
        vpc_id: subnet.vpc_id,
        available_addresses: subnet.available_addresses,
        tags: tags(subnet.tags),
    }
}

pub fn security_group(group: v2::SecurityGroup) -> v1::SecurityGroup {
    v1::SecurityGroup {
        id: group.id,
        vpc_id: group.vpc_id,
        tags: tags(group.tags),
    }
}

pub fn interface(eni: v2::NetworkInterface) -> v1::NetworkInterface {
    v1::NetworkInterface {
        id: eni.id,
        mac: eni.mac,
        index: eni.index,
        subnet_id: eni.subnet_id,
        vpc_id: eni.vpc_id,
        primary_ip: ipv4_text(eni.primary_ip),
        addresses: addresses(&eni.addresses),
        prefixes: networks(&eni.prefixes),
        security_groups: eni.security_groups,
        tags: tags(eni.tags),
        instance_id: eni.instance_id,
    }
}

pub fn instance(instance: v2::Instance) -> v1::Instance {
    v1::Instance {
        id: instance.id,
        instance_type: instance.instance_type,
        availability_zone: instance.availability_zone,
        vpc_id: instance.vpc_id,
        interfaces: instance.interfaces.into_iter().map(interface).collect(),
    }
}

pub fn limits(limits: v2::Limits) -> v1::Limits {
    v1::Limits {
        max_interfaces: limits.max_interfaces,
        ipv4_per_interface: limits.ipv4_per_interface,
        ipv6_per_interface: limits.ipv6_per_interface,
        prefix_delegation: limits.prefix_delegation,
    }
}

pub fn create_request(request: v1::CreateInterfaceRequest) -> v2::CreateInterfaceRequest {
    v2::CreateInterfaceRequest {
        instance_id: request.instance_id,
        index: request.index,
        subnet_id: request.subnet_id,
        security_groups: request.security_groups,
        description: request.description,
        tags: request.tags.into_iter().map(tag_in).collect(),
        delete_on_termination: request.delete_on_termination,
        ipv4_count: request.ipv4_count,
        use_prefixes: request.use_prefixes,
    }
}

pub fn ip_request(request: v1::IpRequest) -> v2::IpRequest {
    match request {
        v1::IpRequest::Addresses(n) => v2::IpRequest::Addresses(n),
        v1::IpRequest::Prefixes(n) => v2::IpRequest::Prefixes(n),
    }
}

pub fn assigned(assigned: v2::Assigned) -> v1::Assigned {
    v1::Assigned {
        addresses: addresses(&assigned.addresses),
        prefixes: networks(&assigned.prefixes),
    }
}

/// unassign-ips' addresses; one that does not parse is invalid-argument.
pub fn addresses_in(texts: &[String]) -> Result<Vec<v2::Ipv4>, v1::Error> {
    texts
        .iter()
        .map(|text| parse_ipv4(text))
        .collect::<Result<_, _>>()
        .map_err(|e| v1::Error::InvalidArgument(format!("unassign-ips: addresses: {e}")))
}

/// unassign-ips' prefixes; one that does not parse (or has bits set past
/// its length) is invalid-argument.
pub fn prefixes_in(texts: &[String]) -> Result<Vec<v2::Ipv4Net>, v1::Error> {
    texts
        .iter()
        .map(|text| text.parse::<v2::Ipv4Net>())
        .collect::<Result<_, _>>()
        .map_err(|e| v1::Error::InvalidArgument(format!("unassign-ips: prefixes: {e}")))
}

#[cfg(test)]
mod tests {
    use ipam_provider_sdk::Provider;
    use mock_provider::MockProvider;

    use super::*;

    const SETTINGS: &str = r#"{
        "vpcs": [{"id": "vpc-1", "cidrs": ["10.0.0.0/16", "100.64.0.0/16"]}],
        "subnets": [{"id": "subnet-a", "vpc-id": "vpc-1", "cidr": "10.0.1.0/24",
                     "availability-zone": "zone-a", "tags": {"tier": "pods"}}],
        "instance-types": {"m5.large": {"max-interfaces": 3, "ipv4-per-interface": 10,
                                        "prefix-delegation": true}},
        "instances": [{"id": "i-1", "instance-type": "m5.large", "subnet-id": "subnet-a"}]
    }"#;

    fn mock() -> MockProvider {
        let mut mock = MockProvider::default();
        mock.configure(SETTINGS).unwrap();
        mock
    }

    fn invalid(result: Result<impl std::fmt::Debug, v1::Error>) -> String {
        match result {
            Err(v1::Error::InvalidArgument(text)) => text,
            other => panic!("expected invalid-argument, got {other:?}"),
        }
    }

    #[test]
    fn listings_are_0_1_0_text() {
        let mut mock = mock();
        let vpc = vpc(mock.get_vpcs().unwrap().remove(0));
        assert_eq!(vpc.primary_cidr, "10.0.0.0/16");
        assert_eq!(vpc.cidrs, ["10.0.0.0/16", "100.64.0.0/16"]);
        let subnet = subnet(mock.get_subnets().unwrap().remove(0));
        assert_eq!(subnet.cidr, "10.0.1.0/24");
        assert_eq!(
            (subnet.tags[0].key.as_str(), subnet.tags[0].value.as_str()),
            ("tier", "pods")
        );
        let eni = mock.get_instances(&[]).unwrap()[0].interfaces[0].id.clone();
        mock.assign_ips(&eni, v2::IpRequest::Addresses(2)).unwrap();
        let got = assigned(mock.assign_ips(&eni, v2::IpRequest::Prefixes(1)).unwrap());
        assert_eq!(got.prefixes, ["10.0.1.16/28"]);
        assert!(got.addresses.is_empty());
        let listed = instance(mock.get_instances(&[]).unwrap().remove(0));
        let primary = &listed.interfaces[0];
        assert_eq!(primary.primary_ip, "10.0.1.4");
        assert_eq!(primary.addresses, ["10.0.1.5", "10.0.1.6"]);
        assert_eq!(primary.prefixes, ["10.0.1.16/28"]);
        assert_eq!(primary.instance_id.as_deref(), Some("i-1"));
    }

    #[test]
    fn unassign_arguments_parse_into_0_2_0_types_or_are_invalid() {
        let addresses = addresses_in(&["10.0.1.5".into(), "100.64.10.99".into()]).unwrap();
        assert_eq!(addresses, [0x0a00_0105, 0x6440_0a63]);
        let prefixes = prefixes_in(&["10.0.1.16/28".into()]).unwrap();
        assert_eq!(prefixes[0].to_string(), "10.0.1.16/28");
        assert_eq!(
            invalid(addresses_in(&["10.0.1.5".into(), "10.0.1.x".into()])),
            "unassign-ips: addresses: \"10.0.1.x\" is not an IPv4 address"
        );
        assert_eq!(
            invalid(prefixes_in(&["10.0.1.16".into()])),
            "unassign-ips: prefixes: \"10.0.1.16\" is not an IPv4 network (a.b.c.d/n)"
        );
        assert_eq!(
            invalid(prefixes_in(&["10.0.1.17/28".into()])),
            "unassign-ips: prefixes: 10.0.1.17/28 has bits set past its length \
             (the network is 10.0.1.16/28)"
        );
    }

    #[test]
    fn requests_and_errors_keep_their_fields_and_variants() {
        let request = create_request(v1::CreateInterfaceRequest {
            instance_id: "i-1".into(),
            index: 2,
            subnet_id: "subnet-a".into(),
            security_groups: vec!["sg-1".into()],
            description: "pods".into(),
            tags: vec![v1::Tag {
                key: "k".into(),
                value: "v".into(),
            }],
            delete_on_termination: true,
            ipv4_count: 3,
            use_prefixes: true,
        });
        assert_eq!(
            (
                request.instance_id.as_str(),
                request.index,
                request.ipv4_count,
                request.use_prefixes
            ),
            ("i-1", 2, 3, true)
        );
        assert_eq!(request.tags[0].key, "k");
        assert!(matches!(
            ip_request(v1::IpRequest::Prefixes(2)),
            v2::IpRequest::Prefixes(2)
        ));
        assert!(matches!(
            error(v2::Error::Throttled(7)),
            v1::Error::Throttled(7)
        ));
        assert!(matches!(
            error(v2::Error::SubnetFull("s".into())),
            v1::Error::SubnetFull(m) if m == "s"
        ));
        let info = info(MockProvider::info());
        assert_eq!(info.name, "mock-v0.1.0");
        assert_eq!(info.max_concurrency, 1);
        assert!(info.capabilities.prefixes);
    }
}
