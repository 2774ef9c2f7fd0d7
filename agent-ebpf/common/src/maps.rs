//! The maps the program and the loader share. Every key and value is
//! `#[repr(C)]` with explicit padding fields, so no byte of a key is left
//! undefined (the kernel hashes all of them).

/// The layout generation of the maps below. The loader pins maps under a
/// folder named after it; bump it whenever a key, value or size changes.
pub const LAYOUT_VERSION: u32 = 1;

/// The endpoint map's name in the object and its pin: [`EndpointKey`] to
/// [`EndpointInfo`], a `BPF_MAP_TYPE_HASH`.
pub const ENDPOINTS_MAP: &str = "ENDPOINTS";
/// Endpoint entries per node: pods' and the host's addresses, both families.
pub const ENDPOINTS_MAX_ENTRIES: u32 = 4096;

/// The counter map's name in the object and its pin: the ifindex of a pod's
/// host-side veth (`u32`) to [`EndpointCounters`], a
/// `BPF_MAP_TYPE_PERCPU_HASH`. Keyed by interface, not address: a packet
/// with a spoofed or unparsable source still belongs to the pod that sent it.
pub const COUNTERS_MAP: &str = "EP_COUNTERS";
/// Counter entries per node: one per pod interface.
pub const COUNTERS_MAX_ENTRIES: u32 = 1024;

/// `BPF_MAP_TYPE_HASH`, from the kernel's uapi.
pub const BPF_MAP_TYPE_HASH: u32 = 1;
/// `BPF_MAP_TYPE_PERCPU_HASH`, from the kernel's uapi.
pub const BPF_MAP_TYPE_PERCPU_HASH: u32 = 5;

/// What a pinned map must look like to be reused as one of ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapLayout {
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
}

impl MapLayout {
    /// The endpoint map as this program defines it.
    pub const ENDPOINTS: Self = Self {
        map_type: BPF_MAP_TYPE_HASH,
        key_size: core::mem::size_of::<EndpointKey>() as u32,
        value_size: core::mem::size_of::<EndpointInfo>() as u32,
        max_entries: ENDPOINTS_MAX_ENTRIES,
    };

    /// The counter map as this program defines it.
    pub const COUNTERS: Self = Self {
        map_type: BPF_MAP_TYPE_PERCPU_HASH,
        key_size: core::mem::size_of::<u32>() as u32,
        value_size: core::mem::size_of::<EndpointCounters>() as u32,
        max_entries: COUNTERS_MAX_ENTRIES,
    };
}

/// Address family tag of an [`EndpointKey`].
pub const FAMILY_IPV4: u8 = 4;
/// Address family tag of an [`EndpointKey`].
pub const FAMILY_IPV6: u8 = 6;

/// An endpoint map key: an address and its family. An IPv4 address takes
/// the first four bytes of `address`, the rest zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointKey {
    address: [u8; 16],
    family: u8,
    reserved: [u8; 3],
}

impl EndpointKey {
    pub const fn ipv4(address: [u8; 4]) -> Self {
        let mut bytes = [0; 16];
        bytes[0] = address[0];
        bytes[1] = address[1];
        bytes[2] = address[2];
        bytes[3] = address[3];
        Self {
            address: bytes,
            family: FAMILY_IPV4,
            reserved: [0; 3],
        }
    }

    pub const fn ipv6(address: [u8; 16]) -> Self {
        Self {
            address,
            family: FAMILY_IPV6,
            reserved: [0; 3],
        }
    }

    /// [`FAMILY_IPV4`] or [`FAMILY_IPV6`] for keys made here; anything else
    /// for bytes read back from a map someone else wrote.
    pub const fn family(&self) -> u8 {
        self.family
    }

    pub const fn address(&self) -> &[u8; 16] {
        &self.address
    }
}

/// [`EndpointInfo::flags`]: the address is the host's own (Cilium's
/// `ENDPOINT_F_HOST`, kept in step by its `SyncHostIPs`), not a pod's. A pod
/// sending from it is spoofing.
pub const ENDPOINT_FLAG_HOST: u32 = 1;

/// An endpoint map value: where the address lives.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EndpointInfo {
    /// The ifindex of the pod's host-side veth; 0 for host addresses.
    pub ifindex: u32,
    /// The cloud interface (ENI device number, Azure NIC index) the address
    /// was allocated from.
    pub interface_number: u32,
    /// `ENDPOINT_FLAG_*` bits.
    pub flags: u32,
}

impl EndpointInfo {
    /// A pod's address, on the veth with this ifindex.
    pub const fn pod(ifindex: u32, interface_number: u32) -> Self {
        Self {
            ifindex,
            interface_number,
            flags: 0,
        }
    }

    /// One of the host's own addresses.
    pub const fn host() -> Self {
        Self {
            ifindex: 0,
            interface_number: 0,
            flags: ENDPOINT_FLAG_HOST,
        }
    }

    pub const fn is_host(&self) -> bool {
        self.flags & ENDPOINT_FLAG_HOST != 0
    }
}

/// Why a packet from a pod was dropped; the index into
/// [`EndpointCounters::drops`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Too short for the headers it claims, or a header that is not what
    /// its type says (IP version, IPv4 header length).
    Malformed = 0,
    /// Neither ARP, IPv4 nor IPv6 (VLAN tags included: a tag must not
    /// smuggle a packet past the source check).
    UnknownL3 = 1,
    /// The source address is in no endpoint entry.
    UnknownSource = 2,
    /// The source address is another pod's, on another interface.
    WrongInterface = 3,
    /// The source address is one of the host's.
    HostSource = 4,
}

impl DropReason {
    pub const COUNT: usize = 5;
    pub const ALL: [Self; Self::COUNT] = [
        Self::Malformed,
        Self::UnknownL3,
        Self::UnknownSource,
        Self::WrongInterface,
        Self::HostSource,
    ];

    /// A short name for logs and metric labels.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::UnknownL3 => "unknown_l3",
            Self::UnknownSource => "unknown_source",
            Self::WrongInterface => "wrong_interface",
            Self::HostSource => "host_source",
        }
    }
}

/// One CPU's counters for one pod interface (the loader sums the CPUs').
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EndpointCounters {
    /// Packets passed.
    pub packets: u64,
    /// Bytes passed (whole frames, Ethernet header included).
    pub bytes: u64,
    /// Packets dropped, indexed by [`DropReason`].
    pub drops: [u64; DropReason::COUNT],
}

impl EndpointCounters {
    pub const ZERO: Self = Self {
        packets: 0,
        bytes: 0,
        drops: [0; DropReason::COUNT],
    };

    /// Counts one packet of `length` bytes with its verdict.
    #[inline(always)]
    pub fn record(&mut self, verdict: crate::Verdict, length: u32) {
        match verdict {
            crate::Verdict::Pass => {
                self.packets = self.packets.wrapping_add(1);
                self.bytes = self.bytes.wrapping_add(u64::from(length));
            }
            crate::Verdict::Drop(reason) => {
                let slot = &mut self.drops[reason as usize];
                *slot = slot.wrapping_add(1);
            }
        }
    }

    /// Adds another CPU's counters to these.
    pub fn add(&mut self, other: &Self) {
        self.packets = self.packets.wrapping_add(other.packets);
        self.bytes = self.bytes.wrapping_add(other.bytes);
        for (sum, more) in self.drops.iter_mut().zip(other.drops.iter()) {
            *sum = sum.wrapping_add(*more);
        }
    }

    pub const fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;

    #[test]
    fn layouts_have_no_hidden_padding() {
        assert_eq!(MapLayout::ENDPOINTS.key_size, 20);
        assert_eq!(MapLayout::ENDPOINTS.value_size, 12);
        assert_eq!(MapLayout::COUNTERS.value_size, 8 * (2 + 5));
    }

    #[test]
    fn ipv4_keys_zero_the_unused_bytes() {
        let key = EndpointKey::ipv4([10, 0, 0, 7]);
        assert_eq!(key.family(), FAMILY_IPV4);
        assert_eq!(key.address()[..4], [10, 0, 0, 7]);
        assert_eq!(key.address()[4..], [0; 12]);
        assert_ne!(key, EndpointKey::ipv6(*key.address()));
    }

    #[test]
    fn host_entries_carry_the_flag() {
        assert!(EndpointInfo::host().is_host());
        assert!(!EndpointInfo::pod(7, 1).is_host());
    }

    #[test]
    fn record_and_add() {
        let cases: &[(&[(Verdict, u32)], EndpointCounters)] = &[
            (&[], EndpointCounters::ZERO),
            (
                &[(Verdict::Pass, 60), (Verdict::Pass, 100)],
                EndpointCounters {
                    packets: 2,
                    bytes: 160,
                    drops: [0; 5],
                },
            ),
            (
                &[
                    (Verdict::Drop(DropReason::UnknownSource), 60),
                    (Verdict::Drop(DropReason::HostSource), 60),
                    (Verdict::Drop(DropReason::UnknownSource), 60),
                ],
                EndpointCounters {
                    packets: 0,
                    bytes: 0,
                    drops: [0, 0, 2, 0, 1],
                },
            ),
        ];
        for (packets, want) in cases {
            let mut one_cpu = EndpointCounters::ZERO;
            for (verdict, length) in *packets {
                one_cpu.record(*verdict, *length);
            }
            assert_eq!(one_cpu, *want, "{packets:?}");
            let mut summed = one_cpu;
            summed.add(&one_cpu);
            assert_eq!(summed.packets, 2 * want.packets);
            assert_eq!(summed.bytes, 2 * want.bytes);
            for reason in DropReason::ALL {
                assert_eq!(summed.dropped(reason), 2 * want.dropped(reason));
            }
        }
    }

    #[test]
    fn drop_reasons_index_their_own_slot() {
        for (index, reason) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, index);
        }
    }
}
