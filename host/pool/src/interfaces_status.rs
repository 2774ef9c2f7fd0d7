//! A node's interfaces as its agent reads them from the CiliumNode status:
//! status.eni.enis in ENI mode, status.azure.interfaces in Azure mode (the
//! operator's [`crate::IpamMode`]). Field meanings and forms are those
//! Cilium's operator writes (pkg/aws/eni/types, pkg/azure/types).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipam_ciliumnode::{AzureAddress, AzureInterface, EniInterface, EniSubnet, EniVpc};
use ipam_cloud::{Instance, Vpc};

use crate::select::interface_name;

/// status.eni.enis: what cilium-agent needs of each interface to route
/// through it (MAC, device index, subnet and VPC CIDRs, addresses), with its
/// primary address (`ip`) and zone. As Cilium's operator writes them,
/// `addresses` are the secondary ones (the primary too with
/// `use_primary_address`) and the VPC's `cidrs` leave out its primary CIDR.
/// The cloud model has no interface description, so `description` stays
/// unset. `subnet_cidr` gives a subnet's CIDR as last listed (empty if
/// unknown).
pub fn eni_interfaces(
    instance: &Instance,
    vpc: Option<&Vpc>,
    use_primary_address: bool,
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
                        .map(|v| {
                            v.cidrs
                                .iter()
                                .filter(|c| **c != v.primary_cidr)
                                .map(ToString::to_string)
                                .collect()
                        })
                        .unwrap_or_default(),
                },
                addresses: use_primary_address
                    .then_some(&eni.primary_ip)
                    .into_iter()
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

/// The provisioning state, as Cilium writes it (lower-cased), of a usable
/// ipConfiguration; only these are in the cloud model's addresses.
const AZURE_SUCCEEDED: &str = "succeeded";

/// Azure reserves a subnet's first addresses; its gateway is the first
/// usable one (network + 1).
fn azure_gateway(cidr: &str) -> String {
    cidr.parse::<ipnet::Ipv4Net>()
        .ok()
        .map(|net| Ipv4Addr::from(u32::from(net.network()).saturating_add(1)).to_string())
        .unwrap_or_default()
}

/// status.azure.interfaces: each interface with its secondary addresses
/// (Cilium's operator lists no primary ipConfiguration's address unless
/// told to use it), subnet CIDR and gateway; ids and MAC as the provider
/// spells them.
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
                name: interface_name(nic).to_string(),
                mac: nic.mac.clone(),
                // Cilium's operator leaves the interface's own state unset.
                state: String::new(),
                addresses: nic.addresses.iter().map(address).collect(),
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
    use ipam_ciliumnode::go_agent;
    use ipam_cloud::{NetworkInterface, Tag};
    use serde_json::Value;

    /// The interface of a Go-written fixture's status as the cloud model
    /// holds it: its id, MAC, subnet, primary and secondary addresses.
    fn interface_like(
        id: &str,
        mac: &str,
        subnet: &str,
        primary: &str,
        secondaries: &[&str],
    ) -> NetworkInterface {
        NetworkInterface {
            id: id.into(),
            mac: mac.into(),
            index: 0,
            subnet_id: subnet.into(),
            vpc_id: String::new(),
            primary_ip: primary.parse().unwrap(),
            addresses: secondaries.iter().map(|a| a.parse().unwrap()).collect(),
            prefixes: Vec::new(),
            security_groups: Vec::new(),
            tags: Vec::new(),
            instance_id: None,
        }
    }

    fn fixture_status(fixture: &str) -> Value {
        let object: Value = serde_json::from_str(fixture).unwrap();
        object["status"].clone()
    }

    #[test]
    fn enis_are_written_as_ciliums_operator_writes_them() {
        let want = fixture_status(go_agent::ENI_OPERATOR_WRITTEN)["eni"]["enis"].clone();
        let mut eni = interface_like(
            "eni-0a1b2c3d4e5f60718",
            "0a:1b:2c:3d:4e:5f",
            "subnet-0123456789abcdef0",
            "10.0.1.17",
            &[
                "10.0.1.41",
                "10.0.1.87",
                "10.0.1.103",
                "10.0.1.122",
                "10.0.1.150",
                "10.0.1.178",
                "10.0.1.201",
                "10.0.1.236",
            ],
        );
        eni.vpc_id = "vpc-0a1b2c3d".into();
        eni.security_groups = vec!["sg-0123456789abcdef0".into()];
        eni.tags = [
            ("Name", "demo-ng-1-Node"),
            ("kubernetes.io/cluster/demo", "owned"),
        ]
        .map(|(key, value)| Tag {
            key: key.into(),
            value: value.into(),
        })
        .to_vec();
        let instance = Instance {
            id: "i-0123456789abcdef0".into(),
            instance_type: "m5.large".into(),
            availability_zone: "us-east-1a".into(),
            vpc_id: "vpc-0a1b2c3d".into(),
            interfaces: vec![eni],
        };
        let vpc = Vpc {
            id: "vpc-0a1b2c3d".into(),
            primary_cidr: "10.0.0.0/16".parse().unwrap(),
            cidrs: vec![
                "10.0.0.0/16".parse().unwrap(),
                "100.64.0.0/16".parse().unwrap(),
            ],
        };
        let written = eni_interfaces(&instance, Some(&vpc), false, |_| "10.0.1.0/24".into());
        let mut written = serde_json::to_value(&written).unwrap();
        // Two differences, on purpose. An empty `prefixes` is written (Go
        // leaves out the nil slice): Cilium's operator replaces the whole
        // object, this one merges a patch, where a left-out key would keep
        // prefixes the interface no longer has. And `availability-zone`,
        // which the CRD declares and Cilium leaves empty, is filled.
        let eni = written["eni-0a1b2c3d4e5f60718"].as_object_mut().unwrap();
        assert_eq!(eni.remove("prefixes"), Some(serde_json::json!([])));
        assert_eq!(eni.remove("availability-zone"), Some("us-east-1a".into()));
        assert_eq!(written, want);
    }

    #[test]
    fn azure_interfaces_are_written_as_ciliums_operator_writes_them() {
        let want = fixture_status(go_agent::AZURE_OPERATOR_WRITTEN)["azure"]["interfaces"].clone();
        let group = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/MC_rg_cluster_eastus/providers";
        let mut nic = interface_like(
            &format!("{group}/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-12345678-vmss/virtualMachines/0/networkInterfaces/aks-nodepool1-12345678-vmss"),
            "00:0D:3A:1B:2C:3D",
            &format!("{group}/Microsoft.Network/virtualNetworks/aks-vnet-12345678/subnets/aks-subnet"),
            "10.224.0.4",
            &[
                "10.224.0.5", "10.224.0.6", "10.224.0.7", "10.224.0.8", "10.224.0.9", "10.224.0.10",
                "10.224.0.11", "10.224.0.12",
            ],
        );
        nic.security_groups = vec![format!(
            "{group}/Microsoft.Network/networkSecurityGroups/aks-agentpool-12345678-nsg"
        )];
        let instance = Instance {
            id: "vm".into(),
            instance_type: "Standard_D4s_v3".into(),
            availability_zone: "eastus".into(),
            vpc_id: String::new(),
            interfaces: vec![nic],
        };
        let written = azure_interfaces(&instance, |_| "10.224.0.0/16".into());
        assert_eq!(serde_json::to_value(&written).unwrap(), want);
    }

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
    fn azure_interfaces_carry_gateway_cidr_and_succeeded_secondary_addresses() {
        let nics = azure_interfaces(&instance(), |_| "10.240.0.0/16".into());
        let nic = &nics[0];
        assert_eq!(nic.name, "nic-1");
        assert_eq!(nic.gateway_ip, "10.240.0.1");
        assert_eq!(nic.cidr, "10.240.0.0/16");
        assert_eq!(nic.security_group, "nsg-1");
        let ips: Vec<&str> = nic.addresses.iter().map(|a| a.ip.as_str()).collect();
        assert_eq!(ips, ["10.240.0.5"], "the primary 10.240.0.4 is not listed");
        assert_eq!(nic.addresses[0].subnet, "subnet-1");
        assert!(nic.addresses.iter().all(|a| a.state == "succeeded"));
        assert_eq!(nic.state, "", "Cilium sets no interface state");
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
        let enis = eni_interfaces(&instance(), Some(&vpc), false, |_| "10.240.0.0/16".into());
        let eni = &enis["/subscriptions/s/networkInterfaces/nic-1"];
        assert_eq!(eni.addresses, ["10.240.0.5"], "secondary addresses only");
        assert_eq!(eni.ip, "10.240.0.4", "the primary address");
        assert!(eni.vpc.cidrs.is_empty(), "the primary CIDR is not repeated");
        let with_primary = eni_interfaces(&instance(), Some(&vpc), true, |_| String::new());
        assert_eq!(
            with_primary["/subscriptions/s/networkInterfaces/nic-1"].addresses,
            ["10.240.0.4", "10.240.0.5"],
            "use-primary-address lists the primary too"
        );
        assert_eq!(eni.availability_zone, "1", "the instance's zone");
        assert_eq!(eni.subnet.cidr, "10.240.0.0/16");
        assert_eq!(eni.vpc.primary_cidr, "10.240.0.0/12");
    }
}
