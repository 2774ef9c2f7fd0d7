//! Address bookkeeping of one IPv4 subnet, as AWS does it and as the wasm
//! mock provider mirrors it (`providers/mock/src/pool.rs`): the first four
//! addresses and the last are reserved, the lowest free address is handed out
//! first, and a /28 prefix is an aligned block of sixteen addresses that are
//! all free. Same rules, same answers: a test written against the fake sees
//! the addresses the mock would give.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

/// Length of a delegated prefix.
pub const PREFIX_LEN: u8 = 28;
const PREFIX_SIZE: u32 = 1 << (32 - PREFIX_LEN as u32);
/// AWS keeps the network address, the router, DNS and one for future use.
const RESERVED_AT_START: u32 = 4;

#[derive(Debug, Clone)]
pub struct AddressPool {
    network: u32,
    size: u32,
    taken: BTreeSet<u32>,
    /// Every usable address below this is taken: the search for the lowest
    /// free address starts here, so filling a large subnet stays linear.
    low_water: u32,
}

/// Parse "a.b.c.d/n", refusing host bits (a subnet's CIDR names a network).
pub fn parse_network(cidr: &str) -> Result<Ipv4Net, String> {
    let net: Ipv4Net = cidr.parse().map_err(|_| format!("{cidr}: not a CIDR"))?;
    if net.trunc() != net {
        return Err(format!("{cidr}: host bits set"));
    }
    Ok(net)
}

/// A /28 as the WIT writes it ("10.0.0.16/28").
pub fn prefix_text(start: Ipv4Addr) -> String {
    format!("{start}/{PREFIX_LEN}")
}

impl AddressPool {
    /// Subnets are /16 to /28, as on AWS.
    pub fn new(cidr: &str) -> Result<Self, String> {
        let net = parse_network(cidr)?;
        if !(16..=28).contains(&net.prefix_len()) {
            return Err(format!("{cidr}: subnets must be /16 to /28"));
        }
        let network = u32::from(net.network());
        Ok(Self {
            network,
            size: 1 << (32 - u32::from(net.prefix_len())),
            taken: BTreeSet::new(),
            low_water: network + RESERVED_AT_START,
        })
    }

    fn end(&self) -> u32 {
        // The last address is the broadcast address: reserved.
        self.network + self.size - 1
    }

    fn usable(&self, addr: u32) -> bool {
        addr >= self.network + RESERVED_AT_START && addr < self.end()
    }

    /// Free addresses (what get-subnets reports as available).
    pub fn available(&self) -> u32 {
        self.size - RESERVED_AT_START - 1 - self.taken.len() as u32
    }

    /// Mark an address as taken; false if it is not usable or already taken.
    pub fn take(&mut self, addr: Ipv4Addr) -> bool {
        let addr = u32::from(addr);
        self.usable(addr) && self.taken.insert(addr)
    }

    /// The lowest free address.
    pub fn take_any(&mut self) -> Option<Ipv4Addr> {
        let addr = (self.low_water..self.end()).find(|a| !self.taken.contains(a))?;
        self.taken.insert(addr);
        self.low_water = addr + 1;
        Some(Ipv4Addr::from(addr))
    }

    pub fn release(&mut self, addr: Ipv4Addr) {
        let addr = u32::from(addr);
        if self.taken.remove(&addr) {
            self.low_water = self.low_water.min(addr);
        }
    }

    fn block_free(&self, start: u32) -> bool {
        (start..start + PREFIX_SIZE).all(|a| self.usable(a) && !self.taken.contains(&a))
    }

    fn blocks(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.size / PREFIX_SIZE).map(|k| self.network + k * PREFIX_SIZE)
    }

    /// Aligned /28 blocks whose every address is free.
    pub fn free_prefixes(&self) -> u32 {
        self.blocks()
            .filter(|&start| self.block_free(start))
            .count() as u32
    }

    /// The lowest wholly free /28, as its first address.
    pub fn take_prefix(&mut self) -> Option<Ipv4Addr> {
        let start = self.blocks().find(|&start| self.block_free(start))?;
        self.taken.extend(start..start + PREFIX_SIZE);
        Some(Ipv4Addr::from(start))
    }

    pub fn release_prefix(&mut self, start: Ipv4Addr) {
        let start = u32::from(start);
        for a in start..start + PREFIX_SIZE {
            self.taken.remove(&a);
        }
        self.low_water = self
            .low_water
            .min(start.max(self.network + RESERVED_AT_START));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Ipv4Addr {
        text.parse().unwrap()
    }

    #[test]
    fn reserves_the_first_four_and_the_last_address() {
        let mut pool = AddressPool::new("10.0.0.0/28").unwrap();
        assert_eq!(pool.available(), 11);
        assert_eq!(pool.take_any(), Some(ip("10.0.0.4")));
        assert!(!pool.take(ip("10.0.0.15")), "broadcast is reserved");
        assert!(!pool.take(ip("10.0.0.3")), "reserved at the start");
        assert_eq!(
            pool.free_prefixes(),
            0,
            "the only block holds reserved addresses"
        );
    }

    #[test]
    fn the_lowest_free_address_comes_back_after_a_release() {
        let mut pool = AddressPool::new("10.0.0.0/24").unwrap();
        let a = pool.take_any().unwrap();
        let b = pool.take_any().unwrap();
        assert_eq!((a, b), (ip("10.0.0.4"), ip("10.0.0.5")));
        pool.release(a);
        assert_eq!(pool.take_any(), Some(a));
        assert_eq!(pool.take_any(), Some(ip("10.0.0.6")));
    }

    #[test]
    fn fragmentation_exhausts_prefixes_before_addresses() {
        let mut pool = AddressPool::new("10.0.0.0/26").unwrap();
        assert_eq!(
            pool.free_prefixes(),
            2,
            "blocks .16 and .32; .0 and .48 hold reserved"
        );
        assert!(pool.take(ip("10.0.0.20")));
        assert!(pool.take(ip("10.0.0.40")));
        assert_eq!(pool.free_prefixes(), 0);
        assert!(pool.available() > 0);
        assert_eq!(pool.take_prefix(), None);
    }

    #[test]
    fn a_prefix_round_trip_gives_every_address_back() {
        let mut pool = AddressPool::new("10.0.0.0/24").unwrap();
        let before = pool.available();
        let p = pool.take_prefix().unwrap();
        assert_eq!(prefix_text(p), "10.0.0.16/28");
        assert_eq!(pool.available(), before - 16);
        pool.release_prefix(p);
        assert_eq!(pool.available(), before);
    }

    #[test]
    fn rejects_bad_cidrs() {
        for bad in [
            "10.0.0.1/24",
            "10.0.0.0/8",
            "10.0.0.0/29",
            "nope",
            "10.0.0.0",
        ] {
            assert!(AddressPool::new(bad).is_err(), "{bad}");
        }
    }
}
