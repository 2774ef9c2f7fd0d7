//! EC2's answers as WIT records. A field the WIT needs and EC2 left out is an
//! error naming it, never a panic or an invented value.

use aws_sdk_ec2::types as ec2;
use ipam_provider_sdk::{Error, Instance, NetworkInterface, SecurityGroup, Subnet, Tag, Vpc};

fn required<T>(value: Option<T>, what: &str, of: &str) -> Result<T, Error> {
    value.ok_or_else(|| Error::Other(format!("EC2 returned {of} without {what}")))
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
    let primary_cidr = required(vpc.cidr_block(), "a CIDR", &id)?.to_string();
    let mut cidrs = vec![primary_cidr.clone()];
    for association in vpc.cidr_block_association_set() {
        let associated = association
            .cidr_block_state()
            .and_then(|s| s.state())
            .is_some_and(|s| *s == ec2::VpcCidrBlockStateCode::Associated);
        if let Some(cidr) = association.cidr_block() {
            if associated && cidr != primary_cidr {
                cidrs.push(cidr.to_string());
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
        cidr: required(subnet.cidr_block(), "a CIDR", &id)?.to_string(),
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
    Ok(NetworkInterface {
        mac: text(eni.mac_address()),
        index,
        subnet_id: text(eni.subnet_id()),
        vpc_id: text(eni.vpc_id()),
        primary_ip: required(eni.private_ip_address(), "a primary address", &id)?.to_string(),
        addresses: eni
            .private_ip_addresses()
            .iter()
            .filter(|a| a.primary() != Some(true))
            .filter_map(|a| a.private_ip_address().map(str::to_string))
            .collect(),
        prefixes: eni
            .ipv4_prefixes()
            .iter()
            .filter_map(|p| p.ipv4_prefix().map(str::to_string))
            .collect(),
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
