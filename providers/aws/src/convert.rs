//! EC2's answers as WIT records. A field the WIT needs and EC2 left out, or
//! an address or CIDR in EC2's text that does not parse, is an error naming
//! it, never a panic or an invented value.

use aws_sdk_ec2::operation::assign_private_ip_addresses::AssignPrivateIpAddressesOutput;
use aws_sdk_ec2::types as ec2;
use ipam_provider_sdk::net::parse_ipv4;
use ipam_provider_sdk::{
    Assigned, Error, Instance, IpRequest, Ipv4, Ipv4Net, Limits, NetworkInterface, SecurityGroup,
    Subnet, Tag, Vpc,
};

fn required<T>(value: Option<T>, what: &str, of: &str) -> Result<T, Error> {
    value.ok_or_else(|| Error::Other(format!("EC2 returned {of} without {what}")))
}

/// An address in EC2's text (`10.0.1.17`), as the WIT carries it.
pub fn address(text: &str, what: &str, of: &str) -> Result<Ipv4, Error> {
    parse_ipv4(text)
        .map_err(|e| Error::Other(format!("EC2 returned {of} with an unreadable {what}: {e}")))
}

/// A CIDR in EC2's text (`10.0.0.0/16`), as the WIT carries it.
pub fn network(text: &str, what: &str, of: &str) -> Result<Ipv4Net, Error> {
    text.parse::<Ipv4Net>()
        .map_err(|e| Error::Other(format!("EC2 returned {of} with an unreadable {what}: {e}")))
}

fn text(value: Option<&str>) -> String {
    value.unwrap_or_default().to_string()
}

pub fn tags(tags: &[ec2::Tag]) -> Vec<Tag> {
    tags.iter()
        .filter_map(|t| {
            Some(Tag {
                key: t.key()?.to_string(),
                value: text(t.value()),
            })
        })
        .collect()
}

pub fn vpc(vpc: &ec2::Vpc) -> Result<Vpc, Error> {
    let id = required(vpc.vpc_id(), "an id", "a VPC")?.to_string();
    let primary_cidr = network(required(vpc.cidr_block(), "a CIDR", &id)?, "CIDR", &id)?;
    let mut cidrs = vec![primary_cidr];
    for association in vpc.cidr_block_association_set() {
        let associated = association
            .cidr_block_state()
            .and_then(|s| s.state())
            .is_some_and(|s| *s == ec2::VpcCidrBlockStateCode::Associated);
        if let (true, Some(cidr)) = (associated, association.cidr_block()) {
            let cidr = network(cidr, "associated CIDR", &id)?;
            if cidr != primary_cidr {
                cidrs.push(cidr);
            }
        }
    }
    Ok(Vpc {
        id,
        primary_cidr,
        cidrs,
    })
}

pub fn subnet(subnet: &ec2::Subnet) -> Result<Subnet, Error> {
    let id = required(subnet.subnet_id(), "an id", "a subnet")?.to_string();
    Ok(Subnet {
        cidr: network(required(subnet.cidr_block(), "a CIDR", &id)?, "CIDR", &id)?,
        availability_zone: text(subnet.availability_zone()),
        vpc_id: required(subnet.vpc_id(), "a VPC", &id)?.to_string(),
        available_addresses: subnet
            .available_ip_address_count()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        tags: tags(subnet.tags()),
        id,
    })
}

pub fn security_group(group: &ec2::SecurityGroup) -> Result<SecurityGroup, Error> {
    Ok(SecurityGroup {
        id: required(group.group_id(), "an id", "a security group")?.to_string(),
        vpc_id: text(group.vpc_id()),
        tags: tags(group.tags()),
    })
}

fn device_index(index: Option<i32>, of: &str) -> Result<u32, Error> {
    let index = required(index, "a device index", of)?;
    u32::try_from(index).map_err(|_| Error::Other(format!("{of}: device index {index}")))
}

/// An interface from DescribeNetworkInterfaces (or CreateNetworkInterface,
/// before it is attached: index 0 and no instance until the caller sets them).
pub fn interface(eni: &ec2::NetworkInterface) -> Result<NetworkInterface, Error> {
    let id = required(eni.network_interface_id(), "an id", "an interface")?.to_string();
    let (index, instance_id) = match live_attachment(eni) {
        Some(a) => (
            device_index(a.device_index(), &id)?,
            a.instance_id().map(str::to_string),
        ),
        None => (0, None),
    };
    let primary_ip = required(eni.private_ip_address(), "a primary address", &id)?;
    Ok(NetworkInterface {
        mac: text(eni.mac_address()),
        index,
        subnet_id: text(eni.subnet_id()),
        vpc_id: text(eni.vpc_id()),
        primary_ip: address(primary_ip, "primary address", &id)?,
        addresses: eni
            .private_ip_addresses()
            .iter()
            .filter(|a| a.primary() != Some(true))
            .filter_map(|a| a.private_ip_address())
            .map(|a| address(a, "secondary address", &id))
            .collect::<Result<_, _>>()?,
        prefixes: eni
            .ipv4_prefixes()
            .iter()
            .filter_map(|p| p.ipv4_prefix())
            .map(|p| network(p, "prefix", &id))
            .collect::<Result<_, _>>()?,
        security_groups: eni
            .groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_string))
            .collect(),
        tags: tags(eni.tag_set()),
        instance_id,
        id,
    })
}

/// The attachment of an interface attached or attaching (not one detaching).
pub fn live_attachment(eni: &ec2::NetworkInterface) -> Option<&ec2::NetworkInterfaceAttachment> {
    eni.attachment().filter(|a| {
        !matches!(
            a.status(),
            Some(ec2::AttachmentStatus::Detached | ec2::AttachmentStatus::Detaching)
        )
    })
}

/// Whether an interface occupies this device index of network card 0: its
/// attachment is not yet fully detached (EC2 keeps the index of an interface
/// still detaching).
pub fn holds_device_index(eni: &ec2::NetworkInterface, index: u32) -> bool {
    on_first_card(eni)
        && eni.attachment().is_some_and(|a| {
            a.status() != Some(&ec2::AttachmentStatus::Detached)
                && a.device_index().and_then(|i| u32::try_from(i).ok()) == Some(index)
        })
}

/// Whether an interface is on network card 0, the only card the WIT models
/// (device indexes restart on every card).
pub fn on_first_card(eni: &ec2::NetworkInterface) -> bool {
    eni.attachment()
        .and_then(|a| a.network_card_index())
        .unwrap_or(0)
        == 0
}

/// An instance with no interfaces yet; the caller adds them from
/// DescribeNetworkInterfaces.
pub fn instance(instance: &ec2::Instance) -> Result<Instance, Error> {
    let id = required(instance.instance_id(), "an id", "an instance")?.to_string();
    Ok(Instance {
        instance_type: required(instance.instance_type(), "a type", &id)?
            .as_str()
            .to_string(),
        availability_zone: text(instance.placement().and_then(|p| p.availability_zone())),
        vpc_id: text(instance.vpc_id()),
        interfaces: Vec::new(),
        id,
    })
}

/// What AssignPrivateIpAddresses assigned. EC2 assigns all that was asked
/// or refuses; an answer listing fewer (cut short, or not EC2's) is an error
/// naming the shortfall, not a success that hands the engine nothing.
pub fn assigned(
    answer: &AssignPrivateIpAddressesOutput,
    request: IpRequest,
) -> Result<Assigned, Error> {
    let of = "an AssignPrivateIpAddresses answer";
    let assigned = Assigned {
        addresses: answer
            .assigned_private_ip_addresses()
            .iter()
            .filter_map(|a| a.private_ip_address())
            .map(|a| address(a, "address", of))
            .collect::<Result<_, _>>()?,
        prefixes: answer
            .assigned_ipv4_prefixes()
            .iter()
            .filter_map(|p| p.ipv4_prefix())
            .map(|p| network(p, "prefix", of))
            .collect::<Result<_, _>>()?,
    };
    let (asked, got, what) = match request {
        IpRequest::Addresses(n) => (n, assigned.addresses.len(), "addresses"),
        IpRequest::Prefixes(n) => (n, assigned.prefixes.len(), "prefixes"),
    };
    if u32::try_from(got).is_ok_and(|got| got >= asked) {
        Ok(assigned)
    } else {
        Err(Error::Other(format!(
            "AssignPrivateIpAddresses answered with {got} of the {asked} {what} asked"
        )))
    }
}

/// Limits of an instance type from DescribeInstanceTypes: interfaces on
/// network card 0 (else the type's maximum), addresses per interface,
/// prefix delegation on Nitro.
pub fn limits(instance_type: &str, info: &ec2::InstanceTypeInfo) -> Result<Limits, Error> {
    let network = info
        .network_info()
        .ok_or_else(|| Error::Other(format!("EC2 gave no network info for {instance_type}")))?;
    let card_zero = network
        .network_cards()
        .iter()
        .find(|c| c.network_card_index() == Some(0))
        .and_then(|c| c.maximum_network_interfaces());
    let count = |n: Option<i32>, what: &str| {
        n.and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| Error::Other(format!("EC2 gave no {what} for {instance_type}")))
    };
    Ok(Limits {
        max_interfaces: count(
            card_zero.or(network.maximum_network_interfaces()),
            "maximum interfaces",
        )?,
        ipv4_per_interface: count(
            network.ipv4_addresses_per_interface(),
            "IPv4 addresses per interface",
        )?,
        // Types without IPv6 leave it out.
        ipv6_per_interface: network
            .ipv6_addresses_per_interface()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        prefix_delegation: info.hypervisor() == Some(&ec2::InstanceTypeHypervisor::Nitro),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of an error the conversions return (always `other`: EC2
    /// answered, but not with what the WIT needs).
    fn other(error: Error) -> String {
        match error {
            Error::Other(text) => text,
            different => panic!("expected other, got {different:?}"),
        }
    }

    fn ip(text: &str) -> Ipv4 {
        parse_ipv4(text).unwrap()
    }

    fn net(text: &str) -> Ipv4Net {
        text.parse().unwrap()
    }

    /// Tags as (key, value) pairs, to compare (WIT records have no `==`).
    fn pairs(tags: &[Tag]) -> Vec<(&str, &str)> {
        tags.iter()
            .map(|t| (t.key.as_str(), t.value.as_str()))
            .collect()
    }

    fn tag(key: &str, value: &str) -> ec2::Tag {
        ec2::Tag::builder().key(key).value(value).build()
    }

    fn cidr_association(
        cidr: &str,
        state: ec2::VpcCidrBlockStateCode,
    ) -> ec2::VpcCidrBlockAssociation {
        ec2::VpcCidrBlockAssociation::builder()
            .cidr_block(cidr)
            .cidr_block_state(ec2::VpcCidrBlockState::builder().state(state).build())
            .build()
    }

    #[test]
    fn a_vpc_lists_its_primary_cidr_first_then_the_other_associated_ones() {
        let vpc = ec2::Vpc::builder()
            .vpc_id("vpc-1")
            .cidr_block("10.0.0.0/16")
            .cidr_block_association_set(cidr_association(
                "10.0.0.0/16",
                ec2::VpcCidrBlockStateCode::Associated,
            ))
            .cidr_block_association_set(cidr_association(
                "10.1.0.0/16",
                ec2::VpcCidrBlockStateCode::Associated,
            ))
            .cidr_block_association_set(cidr_association(
                "10.2.0.0/16",
                ec2::VpcCidrBlockStateCode::Disassociated,
            ))
            .cidr_block_association_set(cidr_association(
                "10.3.0.0/16",
                ec2::VpcCidrBlockStateCode::Associating,
            ))
            .build();
        let converted = super::vpc(&vpc).expect("a whole VPC");
        assert_eq!(converted.id, "vpc-1");
        assert_eq!(converted.primary_cidr, net("10.0.0.0/16"));
        assert_eq!(converted.cidrs, [net("10.0.0.0/16"), net("10.1.0.0/16")]);
    }

    #[test]
    fn a_cidr_ec2_gave_that_does_not_parse_is_an_error_naming_it() {
        let bad_primary = ec2::Vpc::builder()
            .vpc_id("vpc-1")
            .cidr_block("10.0.0.0/16x")
            .build();
        assert_eq!(
            other(super::vpc(&bad_primary).unwrap_err()),
            "EC2 returned vpc-1 with an unreadable CIDR: \"10.0.0.0/16x\" is not an IPv4 network (a.b.c.d/n)"
        );
        let bad_associated = ec2::Vpc::builder()
            .vpc_id("vpc-1")
            .cidr_block("10.0.0.0/16")
            .cidr_block_association_set(cidr_association(
                "10.1.0.1/16",
                ec2::VpcCidrBlockStateCode::Associated,
            ))
            .build();
        assert_eq!(
            other(super::vpc(&bad_associated).unwrap_err()),
            "EC2 returned vpc-1 with an unreadable associated CIDR: \
             10.1.0.1/16 has bits set past its length (the network is 10.1.0.0/16)"
        );
        let bad_subnet = ec2::Subnet::builder()
            .subnet_id("subnet-1")
            .cidr_block("2600:1f18::/64")
            .vpc_id("vpc-1")
            .build();
        assert_eq!(
            other(super::subnet(&bad_subnet).unwrap_err()),
            "EC2 returned subnet-1 with an unreadable CIDR: \
             \"2600:1f18::/64\" is not an IPv4 network (a.b.c.d/n)"
        );
    }

    #[test]
    fn a_vpc_without_an_id_or_cidr_is_an_error_naming_what_is_missing() {
        let no_id = ec2::Vpc::builder().cidr_block("10.0.0.0/16").build();
        assert_eq!(
            other(super::vpc(&no_id).unwrap_err()),
            "EC2 returned a VPC without an id"
        );
        let no_cidr = ec2::Vpc::builder().vpc_id("vpc-1").build();
        assert_eq!(
            other(super::vpc(&no_cidr).unwrap_err()),
            "EC2 returned vpc-1 without a CIDR"
        );
    }

    #[test]
    fn tags_without_a_key_are_left_out_and_a_missing_value_is_empty() {
        let tags = [
            tag("team", "network"),
            ec2::Tag::builder().value("orphan").build(),
            ec2::Tag::builder().key("bare").build(),
        ];
        assert_eq!(
            pairs(&super::tags(&tags)),
            [("team", "network"), ("bare", "")]
        );
    }

    #[test]
    fn a_subnet_carries_its_fields_and_a_negative_count_is_none_free() {
        let subnet = ec2::Subnet::builder()
            .subnet_id("subnet-1")
            .cidr_block("10.0.1.0/24")
            .availability_zone("us-east-1a")
            .vpc_id("vpc-1")
            .available_ip_address_count(250)
            .tags(tag("ipam", "pods"))
            .build();
        let converted = super::subnet(&subnet).expect("a whole subnet");
        assert_eq!(converted.id, "subnet-1");
        assert_eq!(converted.cidr, net("10.0.1.0/24"));
        assert_eq!(converted.availability_zone, "us-east-1a");
        assert_eq!(converted.vpc_id, "vpc-1");
        assert_eq!(converted.available_addresses, 250);
        assert_eq!(pairs(&converted.tags), [("ipam", "pods")]);
        let mut negative = subnet;
        negative.available_ip_address_count = Some(-1);
        assert_eq!(super::subnet(&negative).unwrap().available_addresses, 0);
    }

    #[test]
    fn a_subnet_without_its_cidr_or_vpc_is_an_error_naming_it() {
        let no_vpc = ec2::Subnet::builder()
            .subnet_id("subnet-1")
            .cidr_block("10.0.1.0/24")
            .build();
        assert_eq!(
            other(super::subnet(&no_vpc).unwrap_err()),
            "EC2 returned subnet-1 without a VPC"
        );
        let no_cidr = ec2::Subnet::builder()
            .subnet_id("subnet-1")
            .vpc_id("vpc-1")
            .build();
        assert_eq!(
            other(super::subnet(&no_cidr).unwrap_err()),
            "EC2 returned subnet-1 without a CIDR"
        );
        let no_id = ec2::Subnet::builder()
            .cidr_block("10.0.1.0/24")
            .vpc_id("vpc-1")
            .build();
        assert_eq!(
            other(super::subnet(&no_id).unwrap_err()),
            "EC2 returned a subnet without an id"
        );
    }

    #[test]
    fn a_security_group_needs_only_its_id() {
        let group = ec2::SecurityGroup::builder()
            .group_id("sg-1")
            .vpc_id("vpc-1")
            .build();
        let converted = security_group(&group).expect("a group");
        assert_eq!(
            (converted.id.as_str(), converted.vpc_id.as_str()),
            ("sg-1", "vpc-1")
        );
        let no_id = ec2::SecurityGroup::builder().vpc_id("vpc-1").build();
        assert_eq!(
            other(security_group(&no_id).unwrap_err()),
            "EC2 returned a security group without an id"
        );
    }

    fn attachment(
        index: i32,
        card: i32,
        status: ec2::AttachmentStatus,
    ) -> ec2::NetworkInterfaceAttachment {
        ec2::NetworkInterfaceAttachment::builder()
            .attachment_id("eni-attach-1")
            .instance_id("i-1")
            .device_index(index)
            .network_card_index(card)
            .status(status)
            .build()
    }

    fn address(ip: &str, primary: bool) -> ec2::NetworkInterfacePrivateIpAddress {
        ec2::NetworkInterfacePrivateIpAddress::builder()
            .private_ip_address(ip)
            .primary(primary)
            .build()
    }

    fn attached_eni() -> ec2::NetworkInterface {
        ec2::NetworkInterface::builder()
            .network_interface_id("eni-1")
            .mac_address("02:00:00:00:00:01")
            .subnet_id("subnet-1")
            .vpc_id("vpc-1")
            .private_ip_address("10.0.1.5")
            .private_ip_addresses(address("10.0.1.5", true))
            .private_ip_addresses(address("10.0.1.6", false))
            .private_ip_addresses(address("10.0.1.7", false))
            .ipv4_prefixes(
                ec2::Ipv4PrefixSpecification::builder()
                    .ipv4_prefix("10.0.1.16/28")
                    .build(),
            )
            .groups(ec2::GroupIdentifier::builder().group_id("sg-1").build())
            .tag_set(tag("ipam-operator/node", "n1"))
            .attachment(attachment(2, 0, ec2::AttachmentStatus::Attached))
            .build()
    }

    fn eni_with(attachment: Option<ec2::NetworkInterfaceAttachment>) -> ec2::NetworkInterface {
        let mut eni = attached_eni();
        eni.attachment = attachment;
        eni
    }

    #[test]
    fn an_attached_interface_has_its_index_instance_and_secondary_addresses() {
        let converted = interface(&attached_eni()).expect("a whole interface");
        assert_eq!(converted.id, "eni-1");
        assert_eq!(converted.mac, "02:00:00:00:00:01");
        assert_eq!(converted.index, 2);
        assert_eq!(converted.subnet_id, "subnet-1");
        assert_eq!(converted.vpc_id, "vpc-1");
        assert_eq!(converted.primary_ip, ip("10.0.1.5"));
        assert_eq!(
            converted.addresses,
            [ip("10.0.1.6"), ip("10.0.1.7")],
            "the primary left out"
        );
        assert_eq!(converted.prefixes, [net("10.0.1.16/28")]);
        assert_eq!(converted.security_groups, ["sg-1"]);
        assert_eq!(pairs(&converted.tags), [("ipam-operator/node", "n1")]);
        assert_eq!(converted.instance_id.as_deref(), Some("i-1"));
    }

    #[test]
    fn an_interface_address_or_prefix_that_does_not_parse_is_an_error_naming_it() {
        let mut bad_primary = attached_eni();
        bad_primary.private_ip_address = Some("10.0.1.five".into());
        assert_eq!(
            other(interface(&bad_primary).unwrap_err()),
            "EC2 returned eni-1 with an unreadable primary address: \
             \"10.0.1.five\" is not an IPv4 address"
        );
        let mut bad_secondary = attached_eni();
        bad_secondary
            .private_ip_addresses
            .get_or_insert_with(Vec::new)
            .push(address("10.0.1.256", false));
        assert_eq!(
            other(interface(&bad_secondary).unwrap_err()),
            "EC2 returned eni-1 with an unreadable secondary address: \
             \"10.0.1.256\" is not an IPv4 address"
        );
        let mut bad_prefix = attached_eni();
        bad_prefix.ipv4_prefixes = Some(vec![ec2::Ipv4PrefixSpecification::builder()
            .ipv4_prefix("10.0.1.17/28")
            .build()]);
        assert_eq!(
            other(interface(&bad_prefix).unwrap_err()),
            "EC2 returned eni-1 with an unreadable prefix: \
             10.0.1.17/28 has bits set past its length (the network is 10.0.1.16/28)"
        );
    }

    #[test]
    fn an_interface_detaching_or_detached_belongs_to_no_instance() {
        for status in [
            ec2::AttachmentStatus::Detaching,
            ec2::AttachmentStatus::Detached,
        ] {
            let eni = eni_with(Some(attachment(2, 0, status.clone())));
            let converted = interface(&eni).expect("a whole interface");
            assert_eq!(
                (converted.index, converted.instance_id),
                (0, None),
                "{status:?}"
            );
        }
        let attaching = eni_with(Some(attachment(2, 0, ec2::AttachmentStatus::Attaching)));
        assert_eq!(interface(&attaching).unwrap().index, 2);
    }

    #[test]
    fn an_interface_without_a_primary_address_or_with_a_negative_index_is_an_error() {
        let mut no_primary = attached_eni();
        no_primary.private_ip_address = None;
        assert_eq!(
            other(interface(&no_primary).unwrap_err()),
            "EC2 returned eni-1 without a primary address"
        );
        let negative = eni_with(Some(attachment(-1, 0, ec2::AttachmentStatus::Attached)));
        assert_eq!(
            other(interface(&negative).unwrap_err()),
            "eni-1: device index -1"
        );
        let no_index = eni_with(Some(
            ec2::NetworkInterfaceAttachment::builder()
                .instance_id("i-1")
                .status(ec2::AttachmentStatus::Attached)
                .build(),
        ));
        assert_eq!(
            other(interface(&no_index).unwrap_err()),
            "EC2 returned eni-1 without a device index"
        );
        let mut no_id = attached_eni();
        no_id.network_interface_id = None;
        assert_eq!(
            other(interface(&no_id).unwrap_err()),
            "EC2 returned an interface without an id"
        );
    }

    #[test]
    fn a_device_index_is_held_until_the_interface_is_detached_and_only_on_its_card() {
        let with = |index, card, status| eni_with(Some(attachment(index, card, status)));
        use ec2::AttachmentStatus::{Attached, Attaching, Detached, Detaching};
        assert!(holds_device_index(&with(1, 0, Attached), 1));
        assert!(holds_device_index(&with(1, 0, Attaching), 1));
        assert!(holds_device_index(&with(1, 0, Detaching), 1));
        assert!(!holds_device_index(&with(1, 0, Detached), 1));
        assert!(!holds_device_index(&with(1, 0, Attached), 2));
        assert!(
            !holds_device_index(&with(1, 1, Attached), 1),
            "another card"
        );
        let unattached = eni_with(None);
        assert!(!holds_device_index(&unattached, 0));
    }

    #[test]
    fn only_interfaces_on_card_zero_or_no_card_are_on_the_first_card() {
        let on = |card| eni_with(Some(attachment(1, card, ec2::AttachmentStatus::Attached)));
        assert!(on_first_card(&on(0)));
        assert!(!on_first_card(&on(1)));
        assert!(on_first_card(&eni_with(None)));
    }

    #[test]
    fn an_instance_carries_its_type_zone_and_vpc_and_needs_its_type() {
        let described = ec2::Instance::builder()
            .instance_id("i-1")
            .instance_type(ec2::InstanceType::M5Large)
            .placement(
                ec2::Placement::builder()
                    .availability_zone("us-east-1a")
                    .build(),
            )
            .vpc_id("vpc-1")
            .build();
        let converted = instance(&described).expect("a whole instance");
        assert_eq!(converted.id, "i-1");
        assert_eq!(converted.instance_type, "m5.large");
        assert_eq!(converted.availability_zone, "us-east-1a");
        assert_eq!(converted.vpc_id, "vpc-1");
        assert!(converted.interfaces.is_empty());
        let mut untyped = described;
        untyped.instance_type = None;
        assert_eq!(
            other(instance(&untyped).unwrap_err()),
            "EC2 returned i-1 without a type"
        );
    }

    fn type_info(hypervisor: ec2::InstanceTypeHypervisor) -> ec2::InstanceTypeInfo {
        ec2::InstanceTypeInfo::builder()
            .instance_type(ec2::InstanceType::M5Large)
            .hypervisor(hypervisor)
            .network_info(
                ec2::NetworkInfo::builder()
                    .maximum_network_interfaces(15)
                    .ipv4_addresses_per_interface(10)
                    .ipv6_addresses_per_interface(12)
                    .network_cards(
                        ec2::NetworkCardInfo::builder()
                            .network_card_index(1)
                            .maximum_network_interfaces(7)
                            .build(),
                    )
                    .network_cards(
                        ec2::NetworkCardInfo::builder()
                            .network_card_index(0)
                            .maximum_network_interfaces(8)
                            .build(),
                    )
                    .build(),
            )
            .build()
    }

    #[test]
    fn limits_count_the_interfaces_of_card_zero_and_prefixes_on_nitro() {
        let nitro = limits("m5.large", &type_info(ec2::InstanceTypeHypervisor::Nitro)).unwrap();
        assert_eq!(
            (
                nitro.max_interfaces,
                nitro.ipv4_per_interface,
                nitro.ipv6_per_interface,
                nitro.prefix_delegation
            ),
            (8, 10, 12, true),
            "card 0's interfaces, not the type's maximum"
        );
        let xen = limits("m5.large", &type_info(ec2::InstanceTypeHypervisor::Xen)).unwrap();
        assert!(!xen.prefix_delegation);
    }

    /// [`type_info`] of Nitro with its network info changed by `change`.
    fn type_info_with(change: impl FnOnce(&mut ec2::NetworkInfo)) -> ec2::InstanceTypeInfo {
        let mut info = type_info(ec2::InstanceTypeHypervisor::Nitro);
        if let Some(network) = info.network_info.as_mut() {
            change(network);
        }
        info
    }

    #[test]
    fn limits_without_cards_use_the_type_maximum_and_missing_ipv6_is_zero() {
        let plain = type_info_with(|network| {
            network.network_cards = None;
            network.ipv6_addresses_per_interface = None;
        });
        let converted = limits("m5.large", &plain).unwrap();
        assert_eq!(
            (converted.max_interfaces, converted.ipv6_per_interface),
            (15, 0)
        );
    }

    #[test]
    fn limits_missing_what_the_engine_needs_are_errors_naming_it() {
        let mut no_network = type_info(ec2::InstanceTypeHypervisor::Nitro);
        no_network.network_info = None;
        assert_eq!(
            other(limits("m5.large", &no_network).unwrap_err()),
            "EC2 gave no network info for m5.large"
        );
        let no_ipv4 = type_info_with(|network| network.ipv4_addresses_per_interface = None);
        assert_eq!(
            other(limits("m5.large", &no_ipv4).unwrap_err()),
            "EC2 gave no IPv4 addresses per interface for m5.large"
        );
        let no_maximum = type_info_with(|network| {
            network.network_cards = None;
            network.maximum_network_interfaces = None;
        });
        assert_eq!(
            other(limits("m5.large", &no_maximum).unwrap_err()),
            "EC2 gave no maximum interfaces for m5.large"
        );
    }

    fn assign_answer(addresses: &[&str], prefixes: &[&str]) -> AssignPrivateIpAddressesOutput {
        let mut answer = AssignPrivateIpAddressesOutput::builder().network_interface_id("eni-1");
        for address in addresses {
            answer = answer.assigned_private_ip_addresses(
                ec2::AssignedPrivateIpAddress::builder()
                    .private_ip_address(*address)
                    .build(),
            );
        }
        for prefix in prefixes {
            answer = answer.assigned_ipv4_prefixes(
                ec2::Ipv4PrefixSpecification::builder()
                    .ipv4_prefix(*prefix)
                    .build(),
            );
        }
        answer.build()
    }

    #[test]
    fn an_assign_answer_gives_what_ec2_assigned() {
        let got = assigned(
            &assign_answer(&["10.0.1.20", "10.0.1.21"], &[]),
            IpRequest::Addresses(2),
        )
        .unwrap();
        assert_eq!(got.addresses, [ip("10.0.1.20"), ip("10.0.1.21")]);
        assert!(got.prefixes.is_empty());
        let got = assigned(
            &assign_answer(&[], &["10.0.1.32/28"]),
            IpRequest::Prefixes(1),
        )
        .unwrap();
        assert_eq!(got.prefixes, [net("10.0.1.32/28")]);
        assert!(got.addresses.is_empty());
    }

    #[test]
    fn an_assign_answer_that_does_not_parse_is_an_error_not_a_panic() {
        assert_eq!(
            other(
                assigned(
                    &assign_answer(&["10.0.1.20", "fe80::1"], &[]),
                    IpRequest::Addresses(2)
                )
                .unwrap_err()
            ),
            "EC2 returned an AssignPrivateIpAddresses answer with an unreadable address: \
             \"fe80::1\" is not an IPv4 address"
        );
        assert_eq!(
            other(
                assigned(&assign_answer(&[], &["10.0.1.32"]), IpRequest::Prefixes(1)).unwrap_err()
            ),
            "EC2 returned an AssignPrivateIpAddresses answer with an unreadable prefix: \
             \"10.0.1.32\" is not an IPv4 network (a.b.c.d/n)"
        );
    }

    #[test]
    fn an_assign_answer_with_less_than_asked_is_an_error_naming_the_shortfall() {
        assert_eq!(
            other(
                assigned(&assign_answer(&["10.0.1.20"], &[]), IpRequest::Addresses(2)).unwrap_err()
            ),
            "AssignPrivateIpAddresses answered with 1 of the 2 addresses asked"
        );
        assert_eq!(
            other(
                assigned(&assign_answer(&["10.0.1.20"], &[]), IpRequest::Prefixes(1)).unwrap_err()
            ),
            "AssignPrivateIpAddresses answered with 0 of the 1 prefixes asked"
        );
    }
}
