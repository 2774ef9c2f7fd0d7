//! IPv4 addresses and networks as the WIT carries them, so that no provider
//! hand-rolls the encoding.
//!
//! An address is an [`Ipv4`]: a `u32`, most significant byte first, which is
//! what `u32::from(Ipv4Addr)` gives and `Ipv4Addr::from(u32)` takes back. A
//! network is an [`Ipv4Net`]: its first address and its prefix length, with
//! no bits set past the length. This module adds to the generated
//! `Ipv4Net`:
//! - constructors that refuse a length over 32 or bits set past the length
//!   ([`Ipv4Net::new`], [`Ipv4Net::from_bits`], `"10.0.0.0/16".parse()`),
//!   with a typed [`NetError`], and one that clears those bits
//!   ([`Ipv4Net::containing`]);
//! - [`Ipv4Net::check`], for a record built field by field or received;
//! - `Display` as `10.0.0.0/16`, comparison, ordering and hashing;
//! - [`Ipv4Net::addr`], [`Ipv4Net::netmask`], [`Ipv4Net::size`],
//!   [`Ipv4Net::contains`], [`Ipv4Net::contains_net`];
//!
//! and, for addresses, [`parse_ipv4`] and [`ipv4_text`].
//!
//! ```
//! use std::net::Ipv4Addr;
//! use ipam_provider_sdk::net::{ipv4_text, parse_ipv4, NetError};
//! use ipam_provider_sdk::Ipv4Net;
//!
//! let subnet: Ipv4Net = "10.0.1.0/24".parse().unwrap();
//! assert_eq!(subnet, Ipv4Net::new(Ipv4Addr::new(10, 0, 1, 0), 24).unwrap());
//! assert_eq!((subnet.address, subnet.length), (0x0a00_0100, 24));
//! assert_eq!(subnet.to_string(), "10.0.1.0/24");
//! let address = parse_ipv4("10.0.1.17").unwrap();
//! assert!(subnet.contains(address));
//! assert_eq!(ipv4_text(address), "10.0.1.17");
//! assert_eq!(
//!     "10.0.1.1/28".parse::<Ipv4Net>(),
//!     Err(NetError::HostBits(Ipv4Addr::new(10, 0, 1, 1), 28))
//! );
//! ```

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::Ipv4Addr;
use std::str::FromStr;

use crate::{Ipv4, Ipv4Net};

/// Why an address or a network was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetError {
    /// Text that is not an IPv4 address in dotted-quad notation.
    Address(String),
    /// Text that is not an IPv4 network in CIDR notation (`a.b.c.d/n`).
    Network(String),
    /// A prefix length over 32.
    Length(u32),
    /// An address with bits set past the prefix length (`10.0.1.1/28`).
    HostBits(Ipv4Addr, u8),
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetError::Address(text) => write!(f, "{text:?} is not an IPv4 address"),
            NetError::Network(text) => {
                write!(f, "{text:?} is not an IPv4 network (a.b.c.d/n)")
            }
            NetError::Length(length) => write!(f, "prefix length {length} is over 32"),
            NetError::HostBits(address, length) => write!(
                f,
                "{address}/{length} has bits set past its length (the network is {}/{length})",
                Ipv4Addr::from(u32::from(*address) & mask(*length))
            ),
        }
    }
}

impl std::error::Error for NetError {}

/// The mask of a prefix length of at most 32.
fn mask(length: u8) -> u32 {
    match length {
        0 => 0,
        n => u32::MAX << (32 - u32::from(n.min(32))),
    }
}

/// An address from dotted-quad text (`10.0.1.17`; no leading zeros).
pub fn parse_ipv4(text: &str) -> Result<Ipv4, NetError> {
    text.parse::<Ipv4Addr>()
        .map(u32::from)
        .map_err(|_| NetError::Address(text.to_string()))
}

/// An address as dotted-quad text, written without `fmt`: a listing of
/// hundreds of addresses converted to text (for a cloud's API, or an older
/// contract) costs several times less in a guest than through `Display`.
pub fn ipv4_text(address: Ipv4) -> String {
    let mut text = String::with_capacity(15);
    for (i, octet) in address.to_be_bytes().into_iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        if octet >= 100 {
            text.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            text.push(char::from(b'0' + octet / 10 % 10));
        }
        text.push(char::from(b'0' + octet % 10));
    }
    text
}

impl Ipv4Net {
    /// The network `address/length`; refused when the length is over 32 or
    /// the address has bits set past it.
    pub fn new(address: Ipv4Addr, length: u8) -> Result<Self, NetError> {
        Self::from_bits(u32::from(address), length)
    }

    /// [`Ipv4Net::new`] from the address as the WIT carries it.
    pub fn from_bits(address: Ipv4, length: u8) -> Result<Self, NetError> {
        let net = Ipv4Net { address, length };
        net.check()?;
        Ok(net)
    }

    /// The network of this length that holds `address`, the bits past the
    /// length cleared (`10.0.1.17` and 28 give `10.0.1.16/28`); refused only
    /// for a length over 32.
    pub fn containing(address: impl Into<Ipv4>, length: u8) -> Result<Self, NetError> {
        if length > 32 {
            return Err(NetError::Length(length.into()));
        }
        Ok(Ipv4Net {
            address: address.into() & mask(length),
            length,
        })
    }

    /// Whether this record is a network: a length of at most 32 and no bits
    /// set past it. For one built field by field, or received.
    pub fn check(&self) -> Result<(), NetError> {
        if self.length > 32 {
            return Err(NetError::Length(self.length.into()));
        }
        if self.address & !mask(self.length) != 0 {
            return Err(NetError::HostBits(
                Ipv4Addr::from(self.address),
                self.length,
            ));
        }
        Ok(())
    }

    /// The first address.
    pub fn addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.address)
    }

    /// The mask of the length (`255.255.255.0` for a /24).
    pub fn netmask(&self) -> Ipv4Addr {
        Ipv4Addr::from(mask(self.length))
    }

    /// How many addresses it spans (2^(32 - length)).
    pub fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.length.min(32)))
    }

    /// Whether `address` (an [`Ipv4`] or an `Ipv4Addr`) is in this network.
    pub fn contains(&self, address: impl Into<Ipv4>) -> bool {
        address.into() & mask(self.length) == self.address & mask(self.length)
    }

    /// Whether every address of `other` is in this network.
    pub fn contains_net(&self, other: &Ipv4Net) -> bool {
        other.length >= self.length && self.contains(other.address)
    }
}

impl fmt::Display for Ipv4Net {
    /// `10.0.0.0/16`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", ipv4_text(self.address), self.length)
    }
}

impl FromStr for Ipv4Net {
    type Err = NetError;

    /// `a.b.c.d/n` exactly: a length without leading zeros, at most 32, and
    /// no bits set past it.
    fn from_str(text: &str) -> Result<Self, NetError> {
        let syntax = || NetError::Network(text.to_string());
        let (address, length) = text.split_once('/').ok_or_else(syntax)?;
        let address: Ipv4Addr = address.parse().map_err(|_| syntax())?;
        let digits = !length.is_empty()
            && length.len() <= 3
            && length.bytes().all(|b| b.is_ascii_digit())
            && !(length.len() > 1 && length.starts_with('0'));
        if !digits {
            return Err(syntax());
        }
        let length: u32 = length.parse().map_err(|_| syntax())?;
        let length = u8::try_from(length)
            .ok()
            .filter(|&n| n <= 32)
            .ok_or(NetError::Length(length))?;
        Ipv4Net::new(address, length)
    }
}

impl TryFrom<(Ipv4Addr, u8)> for Ipv4Net {
    type Error = NetError;

    fn try_from((address, length): (Ipv4Addr, u8)) -> Result<Self, NetError> {
        Ipv4Net::new(address, length)
    }
}

impl From<Ipv4Net> for (Ipv4Addr, u8) {
    fn from(net: Ipv4Net) -> Self {
        (net.addr(), net.length)
    }
}

impl PartialEq for Ipv4Net {
    fn eq(&self, other: &Self) -> bool {
        (self.address, self.length) == (other.address, other.length)
    }
}

impl Eq for Ipv4Net {}

impl Hash for Ipv4Net {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.address, self.length).hash(state);
    }
}

impl PartialOrd for Ipv4Net {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ipv4Net {
    /// By address, then by length (a shorter, larger network first).
    fn cmp(&self, other: &Self) -> Ordering {
        (self.address, self.length).cmp(&(other.address, other.length))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> Ipv4Net {
        text.parse()
            .unwrap_or_else(|e| panic!("{text} is a network: {e}"))
    }

    #[test]
    fn addresses_are_u32_most_significant_byte_first() {
        assert_eq!(parse_ipv4("10.0.1.17"), Ok(0x0a00_0111));
        assert_eq!(parse_ipv4("0.0.0.0"), Ok(0));
        assert_eq!(parse_ipv4("255.255.255.255"), Ok(u32::MAX));
        assert_eq!(
            parse_ipv4("10.0.1.17"),
            Ok(u32::from(Ipv4Addr::new(10, 0, 1, 17)))
        );
        for bad in [
            "10.0.1",
            "10.0.1.256",
            "10.0.1.017",
            "10.0.1.1/32",
            "",
            " 10.0.1.1",
        ] {
            assert_eq!(parse_ipv4(bad), Err(NetError::Address(bad.into())), "{bad}");
        }
    }

    #[test]
    fn address_text_is_display_s() {
        for text in [
            "0.0.0.0",
            "10.0.1.9",
            "100.64.10.99",
            "255.255.255.255",
            "192.168.100.200",
            "1.20.3.40",
        ] {
            let address = parse_ipv4(text).unwrap();
            assert_eq!(ipv4_text(address), text);
            assert_eq!(ipv4_text(address), Ipv4Addr::from(address).to_string());
        }
    }

    #[test]
    fn a_network_parses_into_its_first_address_and_length_and_displays_back() {
        let vpc = net("10.0.0.0/16");
        assert_eq!((vpc.address, vpc.length), (0x0a00_0000, 16));
        assert_eq!(vpc.to_string(), "10.0.0.0/16");
        for text in ["0.0.0.0/0", "10.0.1.16/28", "10.0.1.17/32", "100.64.0.0/10"] {
            assert_eq!(net(text).to_string(), text);
        }
        assert_eq!(
            Ipv4Net::new(Ipv4Addr::new(10, 0, 0, 0), 16),
            Ok(vpc),
            "from an Ipv4Addr"
        );
        assert_eq!(Ipv4Net::from_bits(0x0a00_0000, 16), Ok(vpc));
        assert_eq!(Ipv4Net::try_from((Ipv4Addr::new(10, 0, 0, 0), 16)), Ok(vpc));
        assert_eq!(
            <(Ipv4Addr, u8)>::from(vpc),
            (Ipv4Addr::new(10, 0, 0, 0), 16)
        );
    }

    #[test]
    fn bits_past_the_length_are_refused_with_the_network_they_belong_to() {
        let refused = "10.0.1.1/28".parse::<Ipv4Net>();
        assert_eq!(
            refused,
            Err(NetError::HostBits(Ipv4Addr::new(10, 0, 1, 1), 28))
        );
        assert_eq!(
            refused.unwrap_err().to_string(),
            "10.0.1.1/28 has bits set past its length (the network is 10.0.1.0/28)"
        );
        assert_eq!(
            Ipv4Net::new(Ipv4Addr::new(10, 0, 0, 1), 0),
            Err(NetError::HostBits(Ipv4Addr::new(10, 0, 0, 1), 0))
        );
        let received = Ipv4Net {
            address: 0x0a00_0101,
            length: 28,
        };
        assert_eq!(
            received.check(),
            Err(NetError::HostBits(Ipv4Addr::new(10, 0, 1, 1), 28))
        );
    }

    #[test]
    fn a_length_over_32_is_refused() {
        assert_eq!("10.0.0.0/33".parse::<Ipv4Net>(), Err(NetError::Length(33)));
        assert_eq!(
            "10.0.0.0/255".parse::<Ipv4Net>(),
            Err(NetError::Length(255))
        );
        assert_eq!(
            "10.0.0.0/999".parse::<Ipv4Net>(),
            Err(NetError::Length(999))
        );
        assert_eq!(Ipv4Net::from_bits(0, 33), Err(NetError::Length(33)));
        assert_eq!(Ipv4Net::containing(0u32, 40), Err(NetError::Length(40)));
        let received = Ipv4Net {
            address: 0,
            length: 200,
        };
        assert_eq!(received.check(), Err(NetError::Length(200)));
        assert_eq!(
            NetError::Length(33).to_string(),
            "prefix length 33 is over 32"
        );
    }

    #[test]
    fn text_that_is_not_a_network_is_refused_as_such() {
        for bad in [
            "10.0.0.0",
            "10.0.0.0/",
            "10.0.0/16",
            "10.0.0.0/x",
            "10.0.0.0/+8",
            "10.0.0.0/08",
            "10.0.0.0/16/2",
            "10.0.0.0/1000",
            " 10.0.0.0/16",
            "",
        ] {
            assert_eq!(
                bad.parse::<Ipv4Net>(),
                Err(NetError::Network(bad.into())),
                "{bad}"
            );
        }
        assert_eq!(
            NetError::Network("10.0.0.0".into()).to_string(),
            "\"10.0.0.0\" is not an IPv4 network (a.b.c.d/n)"
        );
    }

    #[test]
    fn containing_clears_the_bits_past_the_length() {
        assert_eq!(
            Ipv4Net::containing(Ipv4Addr::new(10, 0, 1, 17), 28),
            Ok(net("10.0.1.16/28"))
        );
        assert_eq!(
            Ipv4Net::containing(parse_ipv4("10.0.1.17").unwrap(), 32),
            Ok(net("10.0.1.17/32"))
        );
        assert_eq!(Ipv4Net::containing(u32::MAX, 0), Ok(net("0.0.0.0/0")));
    }

    #[test]
    fn membership_mask_and_size() {
        let subnet = net("10.0.1.0/24");
        assert!(subnet.contains(Ipv4Addr::new(10, 0, 1, 255)));
        assert!(subnet.contains(parse_ipv4("10.0.1.0").unwrap()));
        assert!(!subnet.contains(Ipv4Addr::new(10, 0, 2, 0)));
        assert!(!subnet.contains(Ipv4Addr::new(192, 168, 7, 7)));
        assert!(net("0.0.0.0/0").contains(Ipv4Addr::new(192, 168, 7, 7)));
        assert!(subnet.contains_net(&net("10.0.1.16/28")));
        assert!(subnet.contains_net(&subnet));
        assert!(!subnet.contains_net(&net("10.0.0.0/16")));
        assert!(!subnet.contains_net(&net("10.0.2.16/28")));
        assert_eq!(subnet.netmask(), Ipv4Addr::new(255, 255, 255, 0));
        assert_eq!(net("0.0.0.0/0").netmask(), Ipv4Addr::UNSPECIFIED);
        assert_eq!(subnet.addr(), Ipv4Addr::new(10, 0, 1, 0));
        assert_eq!(subnet.size(), 256);
        assert_eq!(net("0.0.0.0/0").size(), 1 << 32);
        assert_eq!(net("10.0.1.17/32").size(), 1);
    }

    #[test]
    fn networks_compare_by_address_then_length() {
        let mut nets = [net("10.0.1.0/24"), net("10.0.0.0/24"), net("10.0.0.0/16")];
        nets.sort();
        assert_eq!(
            nets.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["10.0.0.0/16", "10.0.0.0/24", "10.0.1.0/24"]
        );
        assert_ne!(net("10.0.0.0/16"), net("10.0.0.0/24"));
        let set: std::collections::HashSet<Ipv4Net> =
            [net("10.0.0.0/16"), net("10.0.0.0/16")].into();
        assert_eq!(set.len(), 1);
    }
}
