//! The maps the program and the loader share. Every key and value is
//! `#[repr(C)]` with explicit padding fields, so no byte of a key is left
//! undefined (the kernel hashes all of them).

/// The layout generation of the maps below. The loader pins maps under a
/// folder named after it; bump it whenever a key, value or size changes.
pub const LAYOUT_VERSION: u32 = 2;

/// The endpoint map's name in the object and its pin: [`EndpointKey`] to
/// [`EndpointEntry`], a `BPF_MAP_TYPE_PERCPU_HASH`. Per CPU so that the one
/// lookup a passed packet costs also finds where to count it: every CPU's
/// copy holds the same [`EndpointInfo`] and that CPU's own traffic.
pub const ENDPOINTS_MAP: &str = "ENDPOINTS";
/// Endpoint entries per node: pods' and the host's addresses, both families.
pub const ENDPOINTS_MAX_ENTRIES: u32 = 4096;

/// The counter map's name in the object and its pin: the ifindex of a pod's
/// host-side veth (`u32`) to [`EndpointCounters`], a
/// `BPF_MAP_TYPE_PERCPU_HASH`: what is not counted in an endpoint entry,
/// that is drops and passed frames other than IP (ARP, neighbour
/// discovery). Keyed by interface, not address: a packet with a spoofed or
/// unparsable source still belongs to the pod that sent it.
pub const COUNTERS_MAP: &str = "EP_COUNTERS";
/// Counter entries per node: one per pod interface.
pub const COUNTERS_MAX_ENTRIES: u32 = 1024;

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
        map_type: BPF_MAP_TYPE_PERCPU_HASH,
        key_size: core::mem::size_of::<EndpointKey>() as u32,
        value_size: core::mem::size_of::<EndpointEntry>() as u32,
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

/// An endpoint map key: an address and its family. In memory, 16 address
/// bytes in network order (an IPv4 address in the first four, the rest
/// zero), the family tag, then three zero bytes.
///
/// Held as five words rather than as byte arrays: the eBPF build turns the
/// zeroing of byte arrays into calls to a byte-at-a-time `memset`, which
/// cost more than the map lookup itself; whole words are plain stores. The
/// bytes, and so the map's layout, are the same either way.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EndpointKey {
    /// The address bytes, four to a word in memory order.
    address: [u32; 4],
    /// The family tag in the first byte, zeros in the other three.
    family: u32,
}

impl EndpointKey {
    #[inline(always)]
    pub const fn ipv4(address: [u8; 4]) -> Self {
        Self {
            address: [u32::from_ne_bytes(address), 0, 0, 0],
            family: family_word(FAMILY_IPV4),
        }
    }

    #[inline(always)]
    pub const fn ipv6(address: [u8; 16]) -> Self {
        let a = address;
        Self {
            address: [
                u32::from_ne_bytes([a[0], a[1], a[2], a[3]]),
                u32::from_ne_bytes([a[4], a[5], a[6], a[7]]),
                u32::from_ne_bytes([a[8], a[9], a[10], a[11]]),
                u32::from_ne_bytes([a[12], a[13], a[14], a[15]]),
            ],
            family: family_word(FAMILY_IPV6),
        }
    }

    /// [`FAMILY_IPV4`] or [`FAMILY_IPV6`] for keys made here; anything else
    /// for bytes read back from a map someone else wrote.
    pub const fn family(&self) -> u8 {
        self.family.to_ne_bytes()[0]
    }

    /// The 16 address bytes in network order.
    pub fn address(&self) -> [u8; 16] {
        let mut bytes = [0; 16];
        for (chunk, word) in bytes.chunks_exact_mut(4).zip(self.address) {
            chunk.copy_from_slice(&word.to_ne_bytes());
        }
        bytes
    }
}

/// Keys sort by their address bytes, then family, as the bytes read (not
/// by the words' native values).
impl Ord for EndpointKey {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        (self.address(), self.family()).cmp(&(other.address(), other.family()))
    }
}

impl PartialOrd for EndpointKey {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The family tag as the key's last word holds it: the tag's byte first.
const fn family_word(family: u8) -> u32 {
    u32::from_ne_bytes([family, 0, 0, 0])
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

/// One CPU's endpoint map value: the endpoint (the same on every CPU) and
/// the IP packets this CPU passed from its address.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EndpointEntry {
    pub info: EndpointInfo,
    /// Zero: puts the counters on their 8-byte alignment without padding
    /// the compiler would leave undefined.
    pub reserved: u32,
    /// Packets passed.
    pub packets: u64,
    /// Bytes passed (whole frames, Ethernet header included).
    pub bytes: u64,
}

impl EndpointEntry {
    /// A fresh entry: `info`, nothing counted yet.
    pub const fn new(info: EndpointInfo) -> Self {
        Self {
            info,
            reserved: 0,
            packets: 0,
            bytes: 0,
        }
    }

    /// Counts one passed packet of `length` bytes.
    #[inline(always)]
    pub fn record_pass(&mut self, length: u32) {
        self.packets = self.packets.wrapping_add(1);
        self.bytes = self.bytes.wrapping_add(u64::from(length));
    }

    /// This CPU's traffic as counters (no drops: those are the
    /// interface's).
    pub const fn traffic(&self) -> EndpointCounters {
        EndpointCounters {
            packets: self.packets,
            bytes: self.bytes,
            drops: [0; DropReason::COUNT],
        }
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

/// Counters of one pod interface: in the counter map one CPU's (the loader
/// sums the CPUs', and adds the traffic of the interface's endpoint
/// entries).
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
        assert_eq!(MapLayout::ENDPOINTS.value_size, 12 + 4 + 8 + 8);
        assert_eq!(MapLayout::COUNTERS.value_size, 8 * (2 + 5));
    }

    #[test]
    fn ipv4_keys_zero_the_unused_bytes() {
        let key = EndpointKey::ipv4([10, 0, 0, 7]);
        assert_eq!(key.family(), FAMILY_IPV4);
        assert_eq!(key.address()[..4], [10, 0, 0, 7]);
        assert_eq!(key.address()[4..], [0; 12]);
        assert_ne!(key, EndpointKey::ipv6(key.address()));
    }

    #[test]
    fn keys_have_the_byte_layout_the_map_holds() {
        let key = EndpointKey::ipv6([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(key.address()[0], 0xfd);
        assert_eq!(key.family(), FAMILY_IPV6);
        // SAFETY: EndpointKey is #[repr(C)] of five u32 words, 20 bytes
        // with no padding; reading them as bytes is reading initialised
        // memory.
        let bytes: [u8; 20] = unsafe { core::mem::transmute(key) };
        let mut want = [0u8; 20];
        want[0] = 0xfd;
        want[15] = 7;
        want[16] = FAMILY_IPV6;
        assert_eq!(bytes, want);
    }

    #[test]
    fn keys_sort_by_their_bytes() {
        let low = EndpointKey::ipv4([10, 0, 0, 7]);
        let high = EndpointKey::ipv4([10, 0, 1, 1]);
        assert!(low < high);
        assert!(EndpointKey::ipv4([9, 255, 255, 255]) < low);
    }

    #[test]
    fn endpoint_entries_count_passed_traffic() {
        let mut entry = EndpointEntry::new(EndpointInfo::pod(7, 1));
        entry.record_pass(60);
        entry.record_pass(100);
        assert_eq!(entry.info, EndpointInfo::pod(7, 1));
        let traffic = entry.traffic();
        assert_eq!((traffic.packets, traffic.bytes), (2, 160));
        assert_eq!(traffic.drops, [0; DropReason::COUNT]);
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
