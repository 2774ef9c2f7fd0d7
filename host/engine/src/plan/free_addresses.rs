//! Addresses the dry run answers with. A planned assign or create must give
//! the engine addresses it can put in a pool, distinct from every address
//! the cloud listed and from each other, inside the subnet: the plan then
//! counts them as the engine would count real ones. Which addresses the
//! cloud would really pick is not knowable without asking it, so the plan
//! reports counts, never these addresses.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use ipam_cloud::Ipv4Net;

/// Addresses of one subnet not yet seen in the cloud's listing nor handed
/// out by the dry run. The first four and the last address of a subnet are
/// skipped, as AWS and Azure reserve them.
#[derive(Debug, Default)]
pub struct FreeAddresses {
    taken: BTreeSet<Ipv4Addr>,
}

/// Addresses a subnet reserves at its start (network, router, DNS, future).
const RESERVED_AT_START: u32 = 4;

impl FreeAddresses {
    /// Mark addresses the cloud listed as taken.
    pub fn taken(&mut self, addresses: impl IntoIterator<Item = Ipv4Addr>) {
        self.taken.extend(addresses);
    }

    /// Mark every address of listed prefixes as taken.
    pub fn taken_prefixes<'a>(&mut self, prefixes: impl IntoIterator<Item = &'a Ipv4Net>) {
        for prefix in prefixes {
            self.taken.extend(every_address(prefix));
        }
    }

    fn usable(cidr: Ipv4Net) -> impl Iterator<Item = Ipv4Addr> {
        let first = u32::from(cidr.network()).saturating_add(RESERVED_AT_START);
        let last = u32::from(cidr.broadcast()).saturating_sub(1);
        (first..=last).map(Ipv4Addr::from)
    }

    /// `count` free addresses of `cidr`, now taken; `None` (nothing taken)
    /// when the subnet has fewer.
    pub fn addresses(&mut self, cidr: Ipv4Net, count: u32) -> Option<Vec<Ipv4Addr>> {
        let picked: Vec<Ipv4Addr> = Self::usable(cidr)
            .filter(|a| !self.taken.contains(a))
            .take(usize::try_from(count).ok()?)
            .collect();
        if picked.len() != usize::try_from(count).ok()? {
            return None;
        }
        self.taken.extend(picked.iter().copied());
        Some(picked)
    }

    /// `count` aligned /28 blocks of `cidr` whose every address is free and
    /// outside the reserved ones, now taken; `None` when there are fewer.
    pub fn prefixes(&mut self, cidr: Ipv4Net, count: u32) -> Option<Vec<Ipv4Net>> {
        let usable: BTreeSet<Ipv4Addr> = Self::usable(cidr).collect();
        let picked: Vec<Ipv4Net> = cidr
            .subnets(28)
            .into_iter()
            .flatten()
            .filter(|block| {
                every_address(block).all(|a| usable.contains(&a) && !self.taken.contains(&a))
            })
            .take(usize::try_from(count).ok()?)
            .collect();
        if picked.len() != usize::try_from(count).ok()? {
            return None;
        }
        self.taken_prefixes(&picked);
        Some(picked)
    }
}

/// Every address of a prefix, network and broadcast included.
fn every_address(prefix: &Ipv4Net) -> impl Iterator<Item = Ipv4Addr> {
    (u32::from(prefix.network())..=u32::from(prefix.broadcast())).map(Ipv4Addr::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> Ipv4Net {
        text.parse().unwrap()
    }

    fn ip(text: &str) -> Ipv4Addr {
        text.parse().unwrap()
    }

    #[test]
    fn addresses_skip_the_reserved_the_listed_and_the_handed_out() {
        let mut free = FreeAddresses::default();
        free.taken([ip("10.0.0.4"), ip("10.0.0.6")]);
        assert_eq!(
            free.addresses(net("10.0.0.0/28"), 2),
            Some(vec![ip("10.0.0.5"), ip("10.0.0.7")])
        );
        assert_eq!(
            free.addresses(net("10.0.0.0/28"), 1),
            Some(vec![ip("10.0.0.8")]),
            "what the dry run handed out is not handed out again"
        );
    }

    #[test]
    fn a_subnet_with_too_few_gives_nothing_and_takes_nothing() {
        let mut free = FreeAddresses::default();
        // A /28 has 16 addresses: 4 reserved at the start, 1 at the end.
        assert_eq!(free.addresses(net("10.0.0.0/28"), 12), None);
        assert_eq!(
            free.addresses(net("10.0.0.0/28"), 11).map(|a| a.len()),
            Some(11)
        );
        assert_eq!(
            free.addresses(net("10.0.0.0/28"), 1),
            None,
            "the subnet is full"
        );
    }

    #[test]
    fn prefixes_are_whole_free_blocks_clear_of_reserved_and_taken_addresses() {
        let mut free = FreeAddresses::default();
        free.taken([ip("10.0.0.20")]);
        // 10.0.0.0/28 holds the reserved addresses, 10.0.0.16/28 a taken
        // one, 10.0.0.48/28 the subnet's last address.
        assert_eq!(
            free.prefixes(net("10.0.0.0/26"), 1),
            Some(vec![net("10.0.0.32/28")])
        );
        assert_eq!(free.prefixes(net("10.0.0.0/26"), 1), None);
        assert_eq!(
            free.addresses(net("10.0.0.0/26"), 1),
            Some(vec![ip("10.0.0.4")]),
            "the prefix's addresses are taken, the others are not"
        );
        let mut listed = FreeAddresses::default();
        listed.taken_prefixes(&[net("10.0.1.16/28")]);
        assert_eq!(
            listed.prefixes(net("10.0.1.0/26"), 2),
            None,
            "only one whole block is left"
        );
        assert_eq!(
            listed.prefixes(net("10.0.1.0/26"), 1),
            Some(vec![net("10.0.1.32/28")])
        );
    }
}
