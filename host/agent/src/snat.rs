//! Masquerading of pod traffic that leaves the VPC (VNet), as plain data:
//! which ranges are the VPC's (from the CiliumNode the operator publishes)
//! and so which rules the agent wants. Pods hold VPC addresses, which
//! route inside the VPC; a packet to the internet (through a NAT or
//! internet gateway, which translates only the addresses it knows, the
//! instances' primary ones) must leave with the node's address. So the
//! agent keeps, in nftables (`nft_snat`, over netlink):
//!
//! ```text
//! table ip ipam-agent {
//!   chain snat {
//!     type nat hook postrouting priority srcnat; policy accept;
//!     ip daddr <each kept range> return
//!     ip saddr <each VPC range> masquerade
//!   }
//! }
//! ```
//!
//! Kept ranges are the VPC's and those of `--snat-exclude-cidrs` (peered
//! VPCs, on-premises ranges reached over a VPN or Direct Connect, or the
//! VNet's address space on Azure, whose CiliumNode names only subnets).
//! The VPC's ranges: on EC2 each interface's `status.eni.enis.*.vpc`
//! `primary-cidr` and `cidrs`; on Azure each interface's subnet range
//! (`status.azure.interfaces[].cidr`). `masquerade` takes the address of
//! the interface the packet leaves by, as Cilium's and aws-node's SNAT do.
//! The node's own traffic from its VPC address out of its primary interface
//! keeps that address.

use std::collections::BTreeSet;

use ipam_ciliumnode::CiliumNode;
use ipnet::Ipv4Net;

/// The rules the agent wants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnatRules {
    /// Sources whose traffic is masqueraded (the VPC's ranges).
    pub sources: Vec<Ipv4Net>,
    /// Destinations whose traffic keeps its source.
    pub kept: Vec<Ipv4Net>,
}

impl SnatRules {
    /// Whether anything is masqueraded at all.
    pub fn masquerades(&self) -> bool {
        !self.sources.is_empty()
    }
}

/// The VPC's IPv4 ranges as `node` names them, sorted, each once (ranges
/// written in any other form are left out and returned apart).
pub fn vpc_ranges(node: &CiliumNode) -> (Vec<Ipv4Net>, Vec<String>) {
    let eni = node.status.eni.enis.values().flat_map(|interface| {
        std::iter::once(interface.vpc.primary_cidr.as_str())
            .chain(interface.vpc.cidrs.iter().map(String::as_str))
    });
    let azure = node
        .status
        .azure
        .interfaces
        .iter()
        .map(|interface| interface.cidr.as_str());
    let mut ranges = BTreeSet::new();
    let mut malformed = BTreeSet::new();
    for text in eni.chain(azure).filter(|t| !t.is_empty()) {
        match text.parse::<Ipv4Net>() {
            Ok(range) => {
                ranges.insert(range.trunc());
            }
            // An IPv6 range is not malformed, only not this table's.
            Err(_) if text.parse::<ipnet::Ipv6Net>().is_ok() => {}
            Err(_) => {
                malformed.insert(text.to_string());
            }
        }
    }
    (
        ranges.into_iter().collect(),
        malformed.into_iter().collect(),
    )
}

/// The rules for the VPC ranges `vpc` and the extra kept ranges `exclude`.
pub fn wanted(vpc: &[Ipv4Net], exclude: &[Ipv4Net]) -> SnatRules {
    let sources: BTreeSet<Ipv4Net> = vpc.iter().map(Ipv4Net::trunc).collect();
    let kept: BTreeSet<Ipv4Net> = vpc.iter().chain(exclude).map(Ipv4Net::trunc).collect();
    SnatRules {
        sources: sources.into_iter().collect(),
        kept: kept.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn net(text: &str) -> Ipv4Net {
        text.parse().unwrap()
    }

    #[test]
    fn the_vpc_ranges_come_from_each_clouds_status() {
        let node: CiliumNode = serde_json::from_value(json!({
            "name": "n1",
            "status": {
                "eni": {"enis": {
                    "eni-1": {"id": "eni-1", "vpc": {"id": "vpc-1", "primary-cidr": "10.0.0.0/16",
                                                      "cidrs": ["10.0.0.0/16", "100.64.0.0/16", "2600:1f18::/56"]}},
                    "eni-2": {"id": "eni-2", "vpc": {"id": "vpc-1", "primary-cidr": "10.0.0.0/16"}},
                    "eni-3": {"id": "eni-3", "vpc": {"id": "vpc-1", "primary-cidr": "ten/8"}},
                }},
                "azure": {"interfaces": [{"id": "nic", "cidr": "10.240.0.5/16"}]},
            },
        }))
        .unwrap();
        let (ranges, malformed) = vpc_ranges(&node);
        assert_eq!(
            ranges,
            [
                net("10.0.0.0/16"),
                net("10.240.0.0/16"),
                net("100.64.0.0/16")
            ]
        );
        assert_eq!(malformed, ["ten/8"]);
        assert_eq!(vpc_ranges(&CiliumNode::default()), (vec![], vec![]));
    }

    #[test]
    fn the_vpc_is_masqueraded_beyond_itself_and_the_excluded_ranges() {
        let rules = wanted(
            &[net("10.0.0.0/16")],
            &[
                net("192.168.0.0/16"),
                net("10.0.0.0/16"),
                net("172.16.5.9/12"),
            ],
        );
        assert_eq!(rules.sources, [net("10.0.0.0/16")]);
        assert_eq!(
            rules.kept,
            [
                net("10.0.0.0/16"),
                net("172.16.0.0/12"),
                net("192.168.0.0/16")
            ]
        );
        assert!(rules.masquerades());
        let nothing_known = wanted(&[], &[net("192.168.0.0/16")]);
        assert!(
            !nothing_known.masquerades(),
            "no VPC range: nothing to masquerade"
        );
    }
}
