//! Address bookkeeping of one IPv4 subnet, as AWS does it: the first four
//! addresses and the last are reserved; /28 prefixes are aligned blocks of
//! sixteen addresses that are all free.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use ipam_provider_sdk::Ipv4Net;

pub const PREFIX_LEN: u8 = 28;
const PREFIX_SIZE: u32 = 1 << (32 - PREFIX_LEN as u32);
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

impl AddressPool {
    /// The pool of a subnet of /16 to /28.
    pub fn new(cidr: Ipv4Net) -> Result<Self, String> {
        cidr.check().map_err(|e| e.to_string())?;
        if !(16..=28).contains(&cidr.length) {
            return Err(format!("{cidr}: subnets must be /16 to /28"));
        }
        let network = cidr.address;
        Ok(Self {
            network,
            size: 1 << (32 - u32::from(cidr.length)),
            taken: BTreeSet::new(),
            low_water: network + RESERVED_AT_START,
        })
    }

    fn usable(&self, addr: u32) -> bool {
        addr >= self.network + RESERVED_AT_START && addr < self.network + self.size - 1
    }

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
        let addr =
            (self.low_water..self.network + self.size - 1).find(|a| !self.taken.contains(a))?;
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

    pub fn free_prefixes(&self) -> u32 {
        (0..self.size / PREFIX_SIZE)
            .filter(|k| self.block_free(self.network + k * PREFIX_SIZE))
            .count() as u32
    }

    /// The lowest wholly free /28, as its first address.
    pub fn take_prefix(&mut self) -> Option<Ipv4Addr> {
        let start = (0..self.size / PREFIX_SIZE)
            .map(|k| self.network + k * PREFIX_SIZE)
            .find(|&start| self.block_free(start))?;
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

    impl AddressPool {
        fn of(cidr: &str) -> Result<Self, String> {
            Self::new(cidr.parse().map_err(|e| format!("{e}"))?)
        }
    }

    #[test]
    fn reserves_aws_addresses() {
        let mut pool = AddressPool::of("10.0.0.0/28").unwrap();
        assert_eq!(pool.available(), 11);
        assert_eq!(pool.take_any(), Some(Ipv4Addr::new(10, 0, 0, 4)));
        assert!(
            !pool.take(Ipv4Addr::new(10, 0, 0, 15)),
            "broadcast is reserved"
        );
        assert_eq!(
            pool.free_prefixes(),
            0,
            "the only block holds reserved addresses"
        );
    }

    #[test]
    fn fragmentation_exhausts_prefixes_before_addresses() {
        let mut pool = AddressPool::of("10.0.0.0/26").unwrap();
        assert_eq!(
            pool.free_prefixes(),
            2,
            "blocks .16 and .32; .0 and .48 hold reserved"
        );
        pool.take(Ipv4Addr::new(10, 0, 0, 20));
        pool.take(Ipv4Addr::new(10, 0, 0, 40));
        assert_eq!(pool.free_prefixes(), 0);
        assert!(pool.available() > 0);
        assert_eq!(pool.take_prefix(), None);
    }

    #[test]
    fn the_lowest_free_address_comes_back_after_a_release() {
        let mut pool = AddressPool::of("10.0.0.0/24").unwrap();
        let a = pool.take_any().unwrap();
        let b = pool.take_any().unwrap();
        assert_eq!(
            (a, b),
            (Ipv4Addr::new(10, 0, 0, 4), Ipv4Addr::new(10, 0, 0, 5))
        );
        pool.release(a);
        assert_eq!(pool.take_any(), Some(a));
        assert_eq!(pool.take_any(), Some(Ipv4Addr::new(10, 0, 0, 6)));
        let p = pool.take_prefix().unwrap();
        pool.release_prefix(p);
        assert!(pool.take(Ipv4Addr::new(10, 0, 0, 7)));
        assert_eq!(pool.take_any(), Some(Ipv4Addr::new(10, 0, 0, 8)));
    }

    #[test]
    fn prefix_round_trip() {
        let mut pool = AddressPool::of("10.0.0.0/24").unwrap();
        let before = pool.available();
        let p = pool.take_prefix().unwrap();
        assert_eq!(p, Ipv4Addr::new(10, 0, 0, 16));
        assert_eq!(pool.available(), before - 16);
        pool.release_prefix(p);
        assert_eq!(pool.available(), before);
    }

    #[test]
    fn rejects_bad_cidrs() {
        assert!(AddressPool::of("10.0.0.1/24").is_err());
        assert!(AddressPool::of("10.0.0.0/8").is_err());
        assert!(AddressPool::of("nope").is_err());
    }
}
