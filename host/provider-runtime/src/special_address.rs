//! The one rule for addresses no provider may reach, whatever its allow-list
//! says: cloud metadata and platform services, link-local and site-local
//! ranges, and addresses that are not unicast. Every IPv6 form that carries
//! an IPv4 address (mapped, compatible, translated, NAT64, 6to4, Teredo) is
//! decoded and judged as that IPv4 address, so no spelling of a metadata
//! address gets through. Pure: the egress policy applies it to literals and
//! to every resolved address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is special.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialKind {
    /// 169.254.0.0/16: AWS, GCP and OpenStack metadata, ECS task metadata.
    LinkLocalV4,
    /// fe80::/10.
    LinkLocalV6,
    /// fec0::/10, deprecated but still routed by some stacks.
    SiteLocalV6,
    /// fd00:ec2::/64: the AWS IPv6 instance metadata (::254), DNS (::253)
    /// and EKS Pod Identity agent (::23).
    AwsPlatformV6,
    /// fd20:ce::254: the GCP metadata server over IPv6.
    GcpMetadataV6,
    /// fd00:c1::a9fe:a9fe: the Oracle Cloud instance metadata over IPv6.
    OracleMetadataV6,
    /// fd00:42::42: no cloud documents it; third-party metadata deny lists
    /// carry it, and one address of the unique-local range costs nothing
    /// to refuse.
    ListedMetadataV6,
    /// 100.100.100.200.
    AlibabaMetadata,
    /// 168.63.129.16.
    AzureWireServer,
    /// 192.0.0.192.
    OracleMetadata,
    /// 0.0.0.0/8 and `::`: connecting there reaches the local host.
    Unspecified,
    /// 255.255.255.255.
    Broadcast,
    /// 224.0.0.0/4 and ff00::/8.
    Multicast,
}

impl std::fmt::Display for SpecialKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SpecialKind::LinkLocalV4 => "link-local (instance metadata lives here)",
            SpecialKind::LinkLocalV6 => "link-local",
            SpecialKind::SiteLocalV6 => "site-local",
            SpecialKind::AwsPlatformV6 => {
                "an AWS platform address (IPv6 metadata, DNS, EKS Pod Identity agent)"
            }
            SpecialKind::GcpMetadataV6 => "the GCP metadata server (IPv6)",
            SpecialKind::OracleMetadataV6 => "the Oracle Cloud metadata service (IPv6)",
            SpecialKind::ListedMetadataV6 => "a metadata address of third-party deny lists (IPv6)",
            SpecialKind::AlibabaMetadata => "the Alibaba Cloud metadata service",
            SpecialKind::AzureWireServer => "the Azure WireServer",
            SpecialKind::OracleMetadata => "the Oracle Cloud metadata service",
            SpecialKind::Unspecified => "unspecified (this host)",
            SpecialKind::Broadcast => "broadcast",
            SpecialKind::Multicast => "multicast",
        })
    }
}

/// An IPv6 form that carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipv4Carrier {
    /// `::ffff:a.b.c.d`.
    Mapped,
    /// `::a.b.c.d` (deprecated IPv4-compatible).
    Compatible,
    /// `::ffff:0:a.b.c.d` (SIIT IPv4-translated).
    Translated,
    /// `64:ff9b::/96`, the well-known NAT64 prefix.
    Nat64,
    /// `64:ff9b:1::/48`, local-use NAT64 (any of RFC 6052's prefix lengths).
    LocalNat64,
    /// `2002::/16`, 6to4.
    SixToFour,
    /// `2001::/32`, Teredo: its server address.
    TeredoServer,
    /// `2001::/32`, Teredo: its (obfuscated) client address.
    TeredoClient,
}

impl std::fmt::Display for Ipv4Carrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ipv4Carrier::Mapped => "IPv4-mapped",
            Ipv4Carrier::Compatible => "IPv4-compatible",
            Ipv4Carrier::Translated => "IPv4-translated",
            Ipv4Carrier::Nat64 => "NAT64",
            Ipv4Carrier::LocalNat64 => "local-use NAT64",
            Ipv4Carrier::SixToFour => "6to4",
            Ipv4Carrier::TeredoServer => "Teredo server",
            Ipv4Carrier::TeredoClient => "Teredo client",
        })
    }
}

/// Why an address is refused: its kind, and the IPv4 address (and the form
/// carrying it) that was judged, when the address was an IPv6 carrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Special {
    pub kind: SpecialKind,
    pub carried: Option<(Ipv4Carrier, Ipv4Addr)>,
}

impl std::fmt::Display for Special {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.carried {
            None => write!(f, "{}", self.kind),
            Some((carrier, v4)) => write!(f, "{carrier}, carrying {v4}, which is {}", self.kind),
        }
    }
}

/// The special kind of an address, if it is one no provider may reach.
pub fn special(address: IpAddr) -> Option<Special> {
    match address {
        IpAddr::V4(v4) => special_v4(v4).map(|kind| Special {
            kind,
            carried: None,
        }),
        IpAddr::V6(v6) => {
            if let Some(kind) = special_v6(v6) {
                return Some(Special {
                    kind,
                    carried: None,
                });
            }
            carried_ipv4(v6).into_iter().find_map(|(carrier, v4)| {
                special_v4(v4).map(|kind| Special {
                    kind,
                    carried: Some((carrier, v4)),
                })
            })
        }
    }
}

fn special_v4(v4: Ipv4Addr) -> Option<SpecialKind> {
    let kind = if v4.is_link_local() {
        SpecialKind::LinkLocalV4
    } else if v4 == Ipv4Addr::new(100, 100, 100, 200) {
        SpecialKind::AlibabaMetadata
    } else if v4 == Ipv4Addr::new(168, 63, 129, 16) {
        SpecialKind::AzureWireServer
    } else if v4 == Ipv4Addr::new(192, 0, 0, 192) {
        SpecialKind::OracleMetadata
    } else if v4.octets()[0] == 0 {
        SpecialKind::Unspecified
    } else if v4.is_broadcast() {
        SpecialKind::Broadcast
    } else if v4.is_multicast() {
        SpecialKind::Multicast
    } else {
        return None;
    };
    Some(kind)
}

fn special_v6(v6: Ipv6Addr) -> Option<SpecialKind> {
    let s = v6.segments();
    let kind = if v6.is_unspecified() {
        SpecialKind::Unspecified
    } else if v6.is_multicast() {
        SpecialKind::Multicast
    } else if s[0] & 0xffc0 == 0xfe80 {
        SpecialKind::LinkLocalV6
    } else if s[0] & 0xffc0 == 0xfec0 {
        SpecialKind::SiteLocalV6
    } else if s[..4] == [0xfd00, 0x0ec2, 0, 0] {
        SpecialKind::AwsPlatformV6
    } else if s == [0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254] {
        SpecialKind::GcpMetadataV6
    } else if s == [0xfd00, 0xc1, 0, 0, 0, 0, 0xa9fe, 0xa9fe] {
        SpecialKind::OracleMetadataV6
    } else if s == [0xfd00, 0x42, 0, 0, 0, 0, 0, 0x42] {
        SpecialKind::ListedMetadataV6
    } else {
        return None;
    };
    Some(kind)
}

fn v4_at(bytes: &[u8; 16], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3])
}

/// Every IPv4 address an IPv6 address carries, with the form carrying it.
fn carried_ipv4(v6: Ipv6Addr) -> Vec<(Ipv4Carrier, Ipv4Addr)> {
    let s = v6.segments();
    let b = v6.octets();
    let tail = v4_at(&b, 12);
    let mut carried = Vec::new();
    if s[..6] == [0, 0, 0, 0, 0, 0xffff] {
        carried.push((Ipv4Carrier::Mapped, tail));
    } else if s[..6] == [0, 0, 0, 0, 0xffff, 0] {
        carried.push((Ipv4Carrier::Translated, tail));
    } else if s[..6] == [0; 6] && v6 != Ipv6Addr::LOCALHOST {
        // `::` itself is judged unspecified above; `::1` is loopback.
        carried.push((Ipv4Carrier::Compatible, tail));
    } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        carried.push((Ipv4Carrier::Nat64, tail));
    } else if s[..3] == [0x64, 0xff9b, 1] {
        // RFC 6052: where the IPv4 address sits depends on the prefix length
        // the operator chose (/48, /56, /64 or /96; bits 64..72 are always
        // zero), so every placement is judged. A placement the address does
        // not use reads as zeros, and 0.0.0.0/8 there means nothing.
        let at = |o: [usize; 4]| Ipv4Addr::new(b[o[0]], b[o[1]], b[o[2]], b[o[3]]);
        for octets in [
            [6, 7, 9, 10],
            [7, 9, 10, 11],
            [9, 10, 11, 12],
            [12, 13, 14, 15],
        ] {
            let v4 = at(octets);
            if v4.octets()[0] != 0 {
                carried.push((Ipv4Carrier::LocalNat64, v4));
            }
        }
    } else if s[0] == 0x2002 {
        carried.push((Ipv4Carrier::SixToFour, v4_at(&b, 2)));
    } else if s[..2] == [0x2001, 0] {
        carried.push((Ipv4Carrier::TeredoServer, v4_at(&b, 4)));
        carried.push((Ipv4Carrier::TeredoClient, Ipv4Addr::from(!u32::from(tail))));
    }
    carried
}

#[cfg(test)]
mod tests {
    use super::*;

    use Ipv4Carrier::*;
    use SpecialKind::*;

    fn judged(text: &str) -> Option<Special> {
        special(text.parse().expect("an address"))
    }

    #[test]
    fn every_special_form_is_refused_with_its_reason() {
        let metadata: Ipv4Addr = "169.254.169.254".parse().unwrap();
        let alibaba: Ipv4Addr = "100.100.100.200".parse().unwrap();
        let plain = |kind| {
            Some(Special {
                kind,
                carried: None,
            })
        };
        let carried = |kind, carrier, v4| {
            Some(Special {
                kind,
                carried: Some((carrier, v4)),
            })
        };
        let table: &[(&str, Option<Special>)] = &[
            ("169.254.169.254", plain(LinkLocalV4)),
            ("169.254.170.2", plain(LinkLocalV4)),
            ("100.100.100.200", plain(AlibabaMetadata)),
            ("168.63.129.16", plain(AzureWireServer)),
            ("192.0.0.192", plain(OracleMetadata)),
            ("0.0.0.0", plain(Unspecified)),
            ("0.1.2.3", plain(Unspecified)),
            ("255.255.255.255", plain(Broadcast)),
            ("224.0.0.1", plain(Multicast)),
            ("239.255.255.250", plain(Multicast)),
            ("::", plain(Unspecified)),
            ("ff02::1", plain(Multicast)),
            ("fe80::1", plain(LinkLocalV6)),
            ("febf::1", plain(LinkLocalV6)),
            ("fec0::1", plain(SiteLocalV6)),
            ("feff::1", plain(SiteLocalV6)),
            ("fd00:ec2::254", plain(AwsPlatformV6)),
            ("fd00:ec2::253", plain(AwsPlatformV6)),
            ("fd00:ec2::23", plain(AwsPlatformV6)),
            ("fd20:ce::254", plain(GcpMetadataV6)),
            ("fd20:00ce:0::0254", plain(GcpMetadataV6)),
            ("fd00:c1::a9fe:a9fe", plain(OracleMetadataV6)),
            ("fd00:c1::169.254.169.254", plain(OracleMetadataV6)),
            ("fd00:42::42", plain(ListedMetadataV6)),
            (
                "::ffff:169.254.169.254",
                carried(LinkLocalV4, Mapped, metadata),
            ),
            ("::ffff:a9fe:a9fe", carried(LinkLocalV4, Mapped, metadata)),
            ("::a9fe:a9fe", carried(LinkLocalV4, Compatible, metadata)),
            (
                "::ffff:0:a9fe:a9fe",
                carried(LinkLocalV4, Translated, metadata),
            ),
            ("64:ff9b::a9fe:a9fe", carried(LinkLocalV4, Nat64, metadata)),
            (
                "64:ff9b::6464:64c8",
                carried(AlibabaMetadata, Nat64, alibaba),
            ),
            (
                "64:ff9b:1::a9fe:a9fe",
                carried(LinkLocalV4, LocalNat64, metadata),
            ),
            // The /48 form: 169.254 in bits 48..64, 169.254 after the zero octet.
            (
                "64:ff9b:1:a9fe:a9:fe00::",
                carried(LinkLocalV4, LocalNat64, metadata),
            ),
            (
                "2002:a9fe:a9fe::1",
                carried(LinkLocalV4, SixToFour, metadata),
            ),
            (
                "2001:0:a9fe:a9fe::1",
                carried(LinkLocalV4, TeredoServer, metadata),
            ),
            // Client 169.254.169.254 is stored inverted: 56.1.56.1.
            (
                "2001:0:102:304::5601:5601",
                carried(LinkLocalV4, TeredoClient, metadata),
            ),
            (
                "::ffff:0.0.0.0",
                carried(Unspecified, Mapped, Ipv4Addr::UNSPECIFIED),
            ),
        ];
        for (text, want) in table {
            assert_eq!(&judged(text), want, "{text}");
        }
    }

    #[test]
    fn ordinary_addresses_and_their_carriers_pass() {
        for text in [
            "127.0.0.1",
            "10.1.2.3",
            "100.100.100.201",
            "168.63.129.17",
            "192.0.0.193",
            "52.95.110.1",
            "::1",
            "2600:1f18::1",
            "fd00:ec3::254",
            "fd00:ec2:0:1::254",
            "fd20:ce::253",
            "fd20:ce:0:1::254",
            "fd00:c1::a9fe:a9ff",
            "fd00:42::43",
            "::ffff:127.0.0.1",
            "64:ff9b::3414:1",
            "2002:3414:1::1",
            "2001:0:3414:1::cbeb:fefe",
            "64:ff9b:1::3414:1",
        ] {
            assert_eq!(judged(text), None, "{text}");
        }
    }

    #[test]
    fn the_reason_names_the_carrier_and_what_it_carries() {
        let reason = judged("64:ff9b::a9fe:a9fe").unwrap().to_string();
        assert_eq!(
            reason,
            "NAT64, carrying 169.254.169.254, which is link-local (instance metadata lives here)"
        );
    }
}
