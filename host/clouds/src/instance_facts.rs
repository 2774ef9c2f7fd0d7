//! An instance's facts in one shape whichever cloud it runs in, for the node
//! agent to build its CiliumNode's `spec.instance-id` and `spec.eni` (or
//! `spec.azure`) from. Plain data, converted from each cloud's own facts.

use crate::aws::instance_facts::AwsInstanceFacts;
use crate::azure::{AzureInstanceFacts, AzureInterface};
use crate::mac::MacAddress;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceFacts {
    /// The id the operator knows the instance by: EC2's `i-…`; on Azure the
    /// lower-cased VM resource id, as Cilium's Azure IPAM writes it.
    pub instance_id: String,
    /// EC2's instance type; Azure's VM size.
    pub instance_type: String,
    /// EC2's availability zone (`eu-west-1a`); Azure's zone (`1`), none when
    /// the VM is in no zone.
    pub zone: Option<String>,
    /// EC2's VPC; none on Azure (IMDS does not name the virtual network).
    pub vpc_id: Option<String>,
    /// The primary interface's subnet on EC2 (`subnet-…`); none on Azure
    /// (IMDS gives the subnet's prefix, not its resource id).
    pub node_subnet_id: Option<String>,
    pub primary_mac: MacAddress,
    /// Azure's interfaces, the primary first; empty on EC2, whose
    /// interfaces the operator reads from the EC2 API.
    pub azure_interfaces: Vec<AzureInterface>,
}

impl From<AwsInstanceFacts> for InstanceFacts {
    fn from(aws: AwsInstanceFacts) -> Self {
        Self {
            instance_id: aws.instance_id,
            instance_type: aws.instance_type,
            zone: Some(aws.availability_zone),
            vpc_id: Some(aws.vpc_id),
            node_subnet_id: Some(aws.subnet_id),
            primary_mac: aws.primary_mac,
            azure_interfaces: Vec::new(),
        }
    }
}

impl From<AzureInstanceFacts> for InstanceFacts {
    fn from(azure: AzureInstanceFacts) -> Self {
        Self {
            instance_id: azure.instance_id,
            instance_type: azure.vm_size,
            zone: azure.zone,
            vpc_id: None,
            node_subnet_id: None,
            primary_mac: azure.primary_interface.mac,
            azure_interfaces: std::iter::once(azure.primary_interface)
                .chain(azure.other_interfaces)
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::azure::AzureVmId;

    fn mac(last: u8) -> MacAddress {
        MacAddress::new([0x00, 0x0d, 0x3a, 0x1b, 0x2c, last])
    }

    #[test]
    fn aws_facts_fill_vpc_and_subnet() {
        let facts = InstanceFacts::from(AwsInstanceFacts {
            instance_id: "i-0123456789abcdef0".into(),
            instance_type: "m5.large".into(),
            availability_zone: "eu-west-1a".into(),
            primary_mac: mac(1),
            vpc_id: "vpc-0a1b2c3d".into(),
            subnet_id: "subnet-12345678".into(),
            interface_id: "eni-0f1e2d3c".into(),
            device_number: 0,
        });
        assert_eq!(
            facts,
            InstanceFacts {
                instance_id: "i-0123456789abcdef0".into(),
                instance_type: "m5.large".into(),
                zone: Some("eu-west-1a".into()),
                vpc_id: Some("vpc-0a1b2c3d".into()),
                node_subnet_id: Some("subnet-12345678".into()),
                primary_mac: mac(1),
                azure_interfaces: Vec::new(),
            }
        );
    }

    #[test]
    fn azure_facts_keep_the_interfaces_primary_first() {
        let interface = |last: u8| AzureInterface {
            mac: mac(last),
            private_ips: vec![Ipv4Addr::new(10, 0, 0, last)],
            subnets: vec!["10.0.0.0/24".parse().unwrap()],
        };
        let facts = InstanceFacts::from(AzureInstanceFacts {
            instance_id:
                "/subscriptions/s/resourcegroups/rg/providers/microsoft.compute/virtualmachines/vm"
                    .into(),
            vm: AzureVmId::Standalone {
                subscription: "s".into(),
                resource_group: "rg".into(),
                name: "vm".into(),
            },
            vm_size: "Standard_D4s_v3".into(),
            location: "westeurope".into(),
            zone: None,
            vm_scale_set_name: None,
            subscription_id: "s".into(),
            resource_group_name: "rg".into(),
            primary_interface: interface(4),
            other_interfaces: vec![interface(5), interface(6)],
        });
        assert_eq!(
            facts,
            InstanceFacts {
                instance_id: "/subscriptions/s/resourcegroups/rg/providers/microsoft.compute/virtualmachines/vm".into(),
                instance_type: "Standard_D4s_v3".into(),
                zone: None,
                vpc_id: None,
                node_subnet_id: None,
                primary_mac: mac(4),
                azure_interfaces: vec![interface(4), interface(5), interface(6)],
            }
        );
    }
}
