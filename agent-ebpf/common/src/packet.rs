//! Parsing a frame from a pod just far enough to judge it: its Ethernet
//! type, the source address of IPv4 and IPv6, and whether an ICMPv6 packet
//! is neighbour discovery. Every read goes through [`PacketBytes`], which
//! answers `None` past the end of the frame.

/// Where a frame's bytes come from.
pub trait PacketBytes {
    /// The `N` bytes at `offset`, or `None` if the frame is shorter.
    fn read<const N: usize>(&self, offset: usize) -> Option<[u8; N]>;

    /// Like [`PacketBytes::read`], at an offset computed from the packet's
    /// own bytes (a header length). The eBPF side reads these through the
    /// kernel's bounds-checked load: the verifier cannot follow a direct
    /// access at such an offset.
    fn read_at_computed<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        self.read(offset)
    }
}

impl PacketBytes for [u8] {
    fn read<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        let end = offset.checked_add(N)?;
        self.get(offset..end)?.try_into().ok()
    }
}

pub const ETH_HEADER_LEN: usize = 14;
pub const ETH_P_IPV4: u16 = 0x0800;
pub const ETH_P_ARP: u16 = 0x0806;
pub const ETH_P_IPV6: u16 = 0x86dd;
const IPV4_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;
const IPPROTO_ICMPV6: u8 = 58;
const IPPROTO_HOPOPTS: u8 = 0;
/// ICMPv6 router solicitation, the first neighbour discovery type (RFC 4861).
const ND_ROUTER_SOLICIT: u8 = 133;
/// ICMPv6 redirect, the last neighbour discovery type (RFC 4861).
const ND_REDIRECT: u8 = 137;
/// ICMPv6 multicast listener query, report and done (MLDv1, RFC 2710) and
/// MLDv2 report (RFC 3810).
const MLD_TYPES: [u8; 4] = [130, 131, 132, 143];

/// What a frame from a pod is, as far as the source check cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// ARP: let through (the kernel answers for the pod's gateway).
    Arp,
    /// ICMPv6 neighbour discovery (router solicitation to redirect, without
    /// extension headers, as RFC 6980 has it): let through whatever its
    /// source (duplicate address detection sends from `::`).
    NeighbourDiscovery,
    /// ICMPv6 multicast listener discovery behind its hop-by-hop (router
    /// alert) header: let through like neighbour discovery; a pod sends it
    /// from its link-local address (or `::`) when its interface comes up.
    MulticastListener,
    Ipv4 {
        source: [u8; 4],
    },
    Ipv6 {
        source: [u8; 16],
    },
}

/// Why a frame could not be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Shorter than the headers it announces.
    Truncated,
    /// The IP header's version is not the Ethernet type's, or an IPv4
    /// header length is below the minimum.
    BadIpHeader,
    /// An Ethernet type other than ARP, IPv4 and IPv6.
    UnknownL3 { ether_type: u16 },
}

/// Parses a frame that starts with its Ethernet header.
#[inline(always)]
pub fn parse<P: PacketBytes + ?Sized>(frame: &P) -> Result<Parsed, ParseError> {
    let ether_type: [u8; 2] = frame.read(12).ok_or(ParseError::Truncated)?;
    match u16::from_be_bytes(ether_type) {
        ETH_P_ARP => Ok(Parsed::Arp),
        ETH_P_IPV4 => parse_ipv4(frame),
        ETH_P_IPV6 => parse_ipv6(frame),
        ether_type => Err(ParseError::UnknownL3 { ether_type }),
    }
}

#[inline(always)]
fn parse_ipv4<P: PacketBytes + ?Sized>(frame: &P) -> Result<Parsed, ParseError> {
    let header: [u8; IPV4_HEADER_LEN] = frame.read(ETH_HEADER_LEN).ok_or(ParseError::Truncated)?;
    let version = header[0] >> 4;
    let header_words = header[0] & 0x0f;
    if version != 4 || header_words < 5 {
        return Err(ParseError::BadIpHeader);
    }
    Ok(Parsed::Ipv4 {
        source: [header[12], header[13], header[14], header[15]],
    })
}

#[inline(always)]
fn parse_ipv6<P: PacketBytes + ?Sized>(frame: &P) -> Result<Parsed, ParseError> {
    let header: [u8; IPV6_HEADER_LEN] = frame.read(ETH_HEADER_LEN).ok_or(ParseError::Truncated)?;
    if header[0] >> 4 != 6 {
        return Err(ParseError::BadIpHeader);
    }
    let after_header = ETH_HEADER_LEN + IPV6_HEADER_LEN;
    if header[6] == IPPROTO_ICMPV6 {
        let [icmp_type]: [u8; 1] = frame.read(after_header).ok_or(ParseError::Truncated)?;
        if (ND_ROUTER_SOLICIT..=ND_REDIRECT).contains(&icmp_type) {
            return Ok(Parsed::NeighbourDiscovery);
        }
    } else if header[6] == IPPROTO_HOPOPTS {
        let [next_header, length_words]: [u8; 2] =
            frame.read(after_header).ok_or(ParseError::Truncated)?;
        if next_header == IPPROTO_ICMPV6 {
            // The hop-by-hop header's length is in 8-byte units, not
            // counting the first 8.
            let icmp = after_header + (usize::from(length_words) + 1) * 8;
            let [icmp_type]: [u8; 1] = frame.read_at_computed(icmp).ok_or(ParseError::Truncated)?;
            if MLD_TYPES.contains(&icmp_type) {
                return Ok(Parsed::MulticastListener);
            }
        }
    }
    let mut source = [0; 16];
    source.copy_from_slice(&header[8..24]);
    Ok(Parsed::Ipv6 { source })
}

/// Test frames, shared with the verdict's tests.
#[cfg(test)]
pub(crate) mod frames {
    extern crate std;
    use std::vec::Vec;

    pub fn ethernet(ether_type: u16, payload: &[u8]) -> Vec<u8> {
        let mut frame = Vec::new();
        frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2]);
        frame.extend_from_slice(&ether_type.to_be_bytes());
        frame.extend_from_slice(payload);
        frame
    }

    pub fn ipv4(source: [u8; 4]) -> Vec<u8> {
        let mut header = [0u8; 20];
        header[0] = 0x45;
        header[9] = 17;
        header[12..16].copy_from_slice(&source);
        header[16..20].copy_from_slice(&[10, 0, 0, 1]);
        ethernet(super::ETH_P_IPV4, &header)
    }

    pub fn ipv6(source: [u8; 16], next_header: u8, payload: &[u8]) -> Vec<u8> {
        let mut header = [0u8; 40];
        header[0] = 0x60;
        header[6] = next_header;
        header[7] = 255;
        header[8..24].copy_from_slice(&source);
        header[24] = 0xff;
        let mut packet = header.to_vec();
        packet.extend_from_slice(payload);
        ethernet(super::ETH_P_IPV6, &packet)
    }
}

#[cfg(test)]
mod tests {
    use super::frames::*;
    use super::*;

    const POD_V6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
    /// A hop-by-hop header with a router alert option, then an MLDv2 report.
    const MLD_REPORT: [u8; 12] = [58, 0, 5, 2, 0, 0, 1, 0, 143, 0, 0, 0];

    #[test]
    fn parses_what_the_check_needs() {
        let mut odd_ihl = ipv4([10, 0, 0, 7]);
        odd_ihl[14] = 0x44;
        let mut v6_in_v4 = ipv4([10, 0, 0, 7]);
        v6_in_v4[14] = 0x65;
        let cases: &[(&str, std::vec::Vec<u8>, Result<Parsed, ParseError>)] = &[
            ("empty", std::vec![], Err(ParseError::Truncated)),
            (
                "no ethernet type",
                std::vec![0; 13],
                Err(ParseError::Truncated),
            ),
            ("arp", ethernet(ETH_P_ARP, &[0; 28]), Ok(Parsed::Arp)),
            (
                "ipv4",
                ipv4([10, 0, 0, 7]),
                Ok(Parsed::Ipv4 {
                    source: [10, 0, 0, 7],
                }),
            ),
            (
                "ipv4 cut in its header",
                ipv4([10, 0, 0, 7])[..14 + 19].to_vec(),
                Err(ParseError::Truncated),
            ),
            (
                "ipv4 header length 4",
                odd_ihl,
                Err(ParseError::BadIpHeader),
            ),
            ("version 6 in ipv4", v6_in_v4, Err(ParseError::BadIpHeader)),
            (
                "ipv6 udp",
                ipv6(POD_V6, 17, &[0; 8]),
                Ok(Parsed::Ipv6 { source: POD_V6 }),
            ),
            (
                "ipv6 echo request is not neighbour discovery",
                ipv6(POD_V6, 58, &[128, 0, 0, 0]),
                Ok(Parsed::Ipv6 { source: POD_V6 }),
            ),
            (
                "neighbour solicitation from ::",
                ipv6([0; 16], 58, &[135, 0, 0, 0]),
                Ok(Parsed::NeighbourDiscovery),
            ),
            (
                "router solicitation",
                ipv6(POD_V6, 58, &[133, 0, 0, 0]),
                Ok(Parsed::NeighbourDiscovery),
            ),
            (
                "mld report is not neighbour discovery",
                ipv6(POD_V6, 58, &[143, 0, 0, 0]),
                Ok(Parsed::Ipv6 { source: POD_V6 }),
            ),
            (
                "mldv2 report behind a router alert",
                ipv6(
                    [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                    0,
                    &MLD_REPORT,
                ),
                Ok(Parsed::MulticastListener),
            ),
            (
                "udp behind a hop-by-hop header",
                ipv6(POD_V6, 0, &[17, 0, 5, 2, 0, 0, 1, 0, 0, 0, 0, 0]),
                Ok(Parsed::Ipv6 { source: POD_V6 }),
            ),
            (
                "echo request behind a hop-by-hop header",
                ipv6(POD_V6, 0, &[58, 0, 5, 2, 0, 0, 1, 0, 128, 0, 0, 0]),
                Ok(Parsed::Ipv6 { source: POD_V6 }),
            ),
            (
                "hop-by-hop header longer than the frame",
                ipv6(POD_V6, 0, &[58, 3, 5, 2, 0, 0, 1, 0, 143, 0, 0, 0]),
                Err(ParseError::Truncated),
            ),
            (
                "icmpv6 without its type",
                ipv6(POD_V6, 58, &[]),
                Err(ParseError::Truncated),
            ),
            (
                "ipv6 cut in its header",
                ipv6(POD_V6, 17, &[])[..14 + 39].to_vec(),
                Err(ParseError::Truncated),
            ),
            (
                "vlan tag",
                ethernet(0x8100, &[0; 40]),
                Err(ParseError::UnknownL3 { ether_type: 0x8100 }),
            ),
        ];
        for (name, frame, want) in cases {
            assert_eq!(parse(frame.as_slice()), *want, "{name}");
        }
    }

    #[test]
    fn reads_past_the_end_are_none() {
        let frame = [1u8, 2, 3];
        assert_eq!(frame.as_slice().read::<3>(0), Some([1, 2, 3]));
        assert_eq!(frame.as_slice().read::<1>(3), None);
        assert_eq!(frame.as_slice().read::<2>(usize::MAX), None);
    }
}
