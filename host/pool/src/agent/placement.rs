//! Where a pod address lives, read from the interfaces the operator
//! published (status.eni.enis in ENI mode, status.azure.interfaces in Azure
//! mode): the interface's MAC and number, its subnet and gateway (the
//! subnet's first address, the cloud's router), and the VPC's CIDRs. The CNI
//! answer and the policy routes are built from it.

use std::net::IpAddr;

use ipam_ciliumnode::CiliumNode;
use ipnet::IpNet;

/// The interface an address is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The interface's id (ENI id, Azure NIC resource id).
    pub interface_id: String,
    /// Lower-case `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    /// ENI device index; for Azure, the interface's position in the list.
    pub interface_number: u32,
    pub subnet: Option<IpNet>,
    /// The subnet's router.
    pub gateway: Option<IpAddr>,
    /// The VPC's (or virtual network's) CIDRs.
    pub vpc_cidrs: Vec<IpNet>,
}

impl Placement {
    /// Whether the address is on a secondary interface, which needs policy
    /// routes (the primary interface is the main table's).
    pub fn is_secondary(&self) -> bool {
        self.interface_number != 0
    }
}

/// The first usable address of a subnet: its network address plus one.
pub fn first_address(subnet: &IpNet) -> Option<IpAddr> {
    match subnet.network() {
        IpAddr::V4(network) => u32::from(network)
            .checked_add(1)
            .map(|n| IpAddr::V4(n.into())),
        IpAddr::V6(network) => u128::from(network)
            .checked_add(1)
            .map(|n| IpAddr::V6(n.into())),
    }
}

fn normalise_mac(mac: &str) -> String {
    mac.replace('-', ":").to_ascii_lowercase()
}

/// Where `ip` lives on `node`, by its pool entry's `resource` first, else
/// by the interface whose addresses hold it. None when the operator has
/// not published the interface (yet).
pub fn placement(node: &CiliumNode, resource: Option<&str>, ip: IpAddr) -> Option<Placement> {
    let text = ip.to_string();
    let eni = node
        .status
        .eni
        .enis
        .values()
        .find(|eni| Some(eni.id.as_str()) == resource)
        .or_else(|| {
            node.status.eni.enis.values().find(|eni| {
                eni.addresses
                    .iter()
                    .any(|a| a.parse::<IpAddr>().ok() == Some(ip))
            })
        });
    if let Some(eni) = eni {
        let subnet = eni.subnet.cidr.parse::<IpNet>().ok();
        let vpc_cidrs = std::iter::once(&eni.vpc.primary_cidr)
            .chain(&eni.vpc.cidrs)
            .filter_map(|cidr| cidr.parse::<IpNet>().ok())
            .fold(Vec::new(), |mut all, cidr| {
                if !all.contains(&cidr) {
                    all.push(cidr);
                }
                all
            });
        return Some(Placement {
            interface_id: eni.id.clone(),
            mac: normalise_mac(&eni.mac),
            interface_number: eni.number,
            gateway: subnet.as_ref().and_then(first_address),
            subnet,
            vpc_cidrs,
        });
    }
    let interfaces = &node.status.azure.interfaces;
    let (number, nic) = interfaces
        .iter()
        .enumerate()
        .find(|(_, nic)| Some(nic.id.as_str()) == resource)
        .or_else(|| {
            interfaces
                .iter()
                .enumerate()
                .find(|(_, nic)| nic.addresses.iter().any(|a| a.ip == text))
        })?;
    let subnet = nic.cidr.parse::<IpNet>().ok();
    Some(Placement {
        interface_id: nic.id.clone(),
        mac: normalise_mac(&nic.mac),
        interface_number: u32::try_from(number).ok()?,
        gateway: nic
            .gateway_ip
            .parse()
            .ok()
            .or_else(|| subnet.as_ref().and_then(first_address)),
        subnet,
        vpc_cidrs: subnet.into_iter().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_ciliumnode::node::{AzureAddress, AzureInterface, EniInterface, EniSubnet, EniVpc};

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_eni_address_is_placed_by_resource_or_by_its_addresses() {
        let mut node = CiliumNode::default();
        node.status.eni.enis.insert(
            "eni-2".into(),
            EniInterface {
                id: "eni-2".into(),
                mac: "0A:1B:2C:3D:4E:5F".into(),
                number: 2,
                subnet: EniSubnet {
                    id: "subnet-1".into(),
                    cidr: "10.0.32.0/19".into(),
                },
                vpc: EniVpc {
                    id: "vpc-1".into(),
                    primary_cidr: "10.0.0.0/16".into(),
                    cidrs: vec!["10.0.0.0/16".into(), "10.1.0.0/16".into()],
                },
                addresses: vec!["10.0.32.7".into()],
                ..Default::default()
            },
        );
        let by_resource = placement(&node, Some("eni-2"), ip("10.0.32.9")).unwrap();
        assert_eq!(by_resource.mac, "0a:1b:2c:3d:4e:5f");
        assert_eq!(by_resource.interface_number, 2);
        assert!(by_resource.is_secondary());
        assert_eq!(by_resource.gateway, Some(ip("10.0.32.1")));
        assert_eq!(by_resource.vpc_cidrs.len(), 2, "the primary CIDR once");
        let by_address = placement(&node, None, ip("10.0.32.7")).unwrap();
        assert_eq!(by_address.interface_id, "eni-2");
        assert!(placement(&node, None, ip("10.9.9.9")).is_none());
    }

    #[test]
    fn an_azure_address_is_placed_with_its_gateway_and_position() {
        let mut node = CiliumNode::default();
        for (n, id) in ["nic-0", "nic-1"].into_iter().enumerate() {
            node.status.azure.interfaces.push(AzureInterface {
                id: id.into(),
                mac: format!("00-0D-3A-00-00-0{n}"),
                gateway_ip: format!("10.{n}.0.1"),
                cidr: format!("10.{n}.0.0/24"),
                addresses: vec![AzureAddress {
                    ip: format!("10.{n}.0.5"),
                    ..Default::default()
                }],
                ..Default::default()
            });
        }
        let placed = placement(&node, None, ip("10.1.0.5")).unwrap();
        assert_eq!(placed.interface_id, "nic-1");
        assert_eq!(placed.mac, "00:0d:3a:00:00:01");
        assert_eq!(placed.interface_number, 1);
        assert!(placed.is_secondary());
        assert_eq!(placed.gateway, Some(ip("10.1.0.1")));
        let primary = placement(&node, None, ip("10.0.0.5")).unwrap();
        assert_eq!(primary.interface_number, 0);
        assert!(
            !primary.is_secondary(),
            "the primary interface's addresses need no policy routes"
        );
    }

    #[test]
    fn first_addresses() {
        for (subnet, first) in [
            ("10.0.0.0/24", "10.0.0.1"),
            ("10.0.32.0/19", "10.0.32.1"),
            ("2600:1f14::/56", "2600:1f14::1"),
        ] {
            assert_eq!(first_address(&subnet.parse().unwrap()), Some(ip(first)));
        }
    }
}
