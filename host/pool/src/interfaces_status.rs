//! A node's interfaces as its agent reads them from the CiliumNode status:
//! status.eni.enis for ENI-mode agents, status.azure.interfaces for nodes of
//! Cilium's Azure IPAM mode (spec.azure set). Field meanings are Cilium's
//! (pkg/eni/types, pkg/azure/types).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipam_ciliumnode::{AzureAddress, AzureInterface, CiliumNode, EniInterface, EniSubnet, EniVpc};
use ipam_cloud::{Instance, Vpc};

/// Which status a node's agent reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpamMode {
    Eni,
    Azure,
}

impl IpamMode {
    pub fn of(node: &CiliumNode) -> Self {
        if node.spec.azure.is_some() {
            IpamMode::Azure
        } else {
            IpamMode::Eni
        }
    }
}

/// status.eni.enis: what cilium-agent needs of each interface to route
/// through it (MAC, device index, subnet and VPC CIDRs, addresses), with its
/// primary address and zone as Cilium's operator writes them. The cloud
/// model has no interface description, so `description` stays unset.
/// `subnet_cidr` gives a subnet's CIDR as last listed (empty if unknown).
pub fn eni_interfaces(
    instance: &Instance,
    vpc: Option<&Vpc>,
    subnet_cidr: impl Fn(&str) -> String,
) -> BTreeMap<String, EniInterface> {
    instance
        .interfaces
        .iter()
        .map(|eni| {
            let interface = EniInterface {
                id: eni.id.clone(),
                ip: eni.primary_ip.to_string(),
                mac: eni.mac.clone(),
                availability_zone: instance.availability_zone.clone(),
                description: String::new(),
                number: eni.index,
                subnet: EniSubnet {
                    id: eni.subnet_id.clone(),
                    cidr: subnet_cidr(&eni.subnet_id),
                },
                vpc: EniVpc {
                    id: eni.vpc_id.clone(),
                    primary_cidr: vpc.map(|v| v.primary_cidr.to_string()).unwrap_or_default(),
                    cidrs: vpc
                        .map(|v| v.cidrs.iter().map(ToString::to_string).collect())
                        .unwrap_or_default(),
                },
                addresses: std::iter::once(&eni.primary_ip)
                    .chain(&eni.addresses)
                    .map(ToString::to_string)
                    .collect(),
                prefixes: eni.prefixes.iter().map(ToString::to_string).collect(),
                security_groups: eni.security_groups.clone(),
                tags: eni
                    .tags
                    .iter()
                    .map(|t| (t.key.clone(), t.value.clone()))
                    .collect(),
            };
            (eni.id.clone(), interface)
        })
        .collect()
}

/// The provisioning state Azure reports for a usable NIC or ipConfiguration;
/// only these count in Cilium's Azure mode.
const AZURE_SUCCEEDED: &str = "succeeded";

/// Azure reserves a subnet's first addresses; its gateway is the first
/// usable one (network + 1).
fn azure_gateway(cidr: &str) -> String {
    cidr.parse::<ipnet::Ipv4Net>()
        .ok()
        .map(|net| Ipv4Addr::from(u32::from(net.network()).saturating_add(1)).to_string())
        .unwrap_or_default()
}

/// status.azure.interfaces: each interface with its addresses, subnet CIDR
/// and gateway.
pub fn azure_interfaces(
    instance: &Instance,
    subnet_cidr: impl Fn(&str) -> String,
) -> Vec<AzureInterface> {
    instance
        .interfaces
        .iter()
        .map(|nic| {
            let cidr = subnet_cidr(&nic.subnet_id);
            let address = |ip: &Ipv4Addr| AzureAddress {
                ip: ip.to_string(),
                subnet: nic.subnet_id.clone(),
                state: AZURE_SUCCEEDED.into(),
            };
            AzureInterface {
                id: nic.id.clone(),
                name: nic.id.rsplit('/').next().unwrap_or_default().to_string(),
                mac: nic.mac.clone(),
                state: AZURE_SUCCEEDED.into(),
                addresses: std::iter::once(&nic.primary_ip)
                    .chain(&nic.addresses)
                    .map(address)
                    .collect(),
                security_group: nic.security_groups.first().cloned().unwrap_or_default(),
                gateway_ip: azure_gateway(&cidr),
                cidr,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_cloud::NetworkInterface;

    fn instance() -> Instance {
        Instance {
            id: "vm-1".into(),
            instance_type: "Standard_D2".into(),
            availability_zone: "1".into(),
            vpc_id: "vnet-1".into(),
            interfaces: vec![NetworkInterface {
                id: "/subscriptions/s/networkInterfaces/nic-1".into(),
                mac: "aa:bb".into(),
                index: 0,
                subnet_id: "subnet-1".into(),
                vpc_id: "vnet-1".into(),
                primary_ip: "10.240.0.4".parse().unwrap(),
                addresses: vec!["10.240.0.5".parse().unwrap()],
                prefixes: Vec::new(),
                security_groups: vec!["nsg-1".into()],
                tags: Vec::new(),
                instance_id: Some("vm-1".into()),
            }],
        }
    }

    #[test]
    fn azure_interfaces_carry_gateway_cidr_and_succeeded_addresses() {
        let nics = azure_interfaces(&instance(), |_| "10.240.0.0/16".into());
        let nic = &nics[0];
        assert_eq!(nic.name, "nic-1");
        assert_eq!(nic.gateway_ip, "10.240.0.1");
        assert_eq!(nic.cidr, "10.240.0.0/16");
        assert_eq!(nic.security_group, "nsg-1");
        let ips: Vec<&str> = nic.addresses.iter().map(|a| a.ip.as_str()).collect();
        assert_eq!(ips, ["10.240.0.4", "10.240.0.5"]);
        assert!(nic.addresses.iter().all(|a| a.state == "succeeded"));
        let unknown = azure_interfaces(&instance(), |_| String::new());
        assert_eq!(unknown[0].gateway_ip, "", "no CIDR, no gateway");
    }

    #[test]
    fn eni_interfaces_carry_the_vpc_and_every_address() {
        let vpc = Vpc {
            id: "vnet-1".into(),
            primary_cidr: "10.240.0.0/12".parse().unwrap(),
            cidrs: vec!["10.240.0.0/12".parse().unwrap()],
        };
        let enis = eni_interfaces(&instance(), Some(&vpc), |_| "10.240.0.0/16".into());
        let eni = &enis["/subscriptions/s/networkInterfaces/nic-1"];
        assert_eq!(eni.addresses, ["10.240.0.4", "10.240.0.5"]);
        assert_eq!(eni.ip, "10.240.0.4", "the primary address");
        assert_eq!(eni.availability_zone, "1", "the instance's zone");
        assert_eq!(eni.subnet.cidr, "10.240.0.0/16");
        assert_eq!(eni.vpc.primary_cidr, "10.240.0.0/12");
    }
}
