//! The datapath's tc program, attached to each pod's host-side veth on its
//! ingress hook (the traffic the pod sends). It holds the pod to its own
//! source addresses: the decision is `agent_ebpf_common::verdict`, plain
//! code unit-tested on the host; this file only binds it to the packet, the
//! maps and the per-CPU counters.
//!
//! Built for `bpfel-unknown-none` by `cargo xtask ebpf`; loaded by the
//! `ipam-datapath` crate, which pins the maps and checks their layout.

#![no_std]
#![no_main]

use agent_ebpf_common::maps::{COUNTERS_MAX_ENTRIES, ENDPOINTS_MAX_ENTRIES};
use agent_ebpf_common::{
    verdict, EndpointCounters, EndpointEntry, EndpointKey, PacketBytes, Verdict,
};
use aya_ebpf::bindings::BPF_NOEXIST;
use aya_ebpf::macros::{classifier, map};
use aya_ebpf::maps::PerCpuHashMap;
use aya_ebpf::programs::TcContext;

/// Source address to the endpoint it belongs to (written by the agent),
/// with each CPU's count of what passed from it: a passed packet costs this
/// one lookup.
#[map(name = "ENDPOINTS")]
static ENDPOINTS: PerCpuHashMap<EndpointKey, EndpointEntry> =
    PerCpuHashMap::with_max_entries(ENDPOINTS_MAX_ENTRIES, 0);

/// Per pod interface (ifindex) and CPU: drops by reason, and what passed
/// without an endpoint entry (ARP, neighbour discovery).
#[map(name = "EP_COUNTERS")]
static EP_COUNTERS: PerCpuHashMap<u32, EndpointCounters> =
    PerCpuHashMap::with_max_entries(COUNTERS_MAX_ENTRIES, 0);

/// The frame behind a tc context. A read within the linear data is a
/// direct packet access, bounds-checked against `data_end` where the
/// verifier sees it; a read past it (non-linear data, or a truncated frame)
/// goes through `bpf_skb_load_bytes`, which the kernel bounds-checks and
/// fails past the end. Either way nothing is read out of bounds.
struct Frame<'a>(&'a TcContext);

impl PacketBytes for Frame<'_> {
    #[inline(always)]
    fn read<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        let start = self.0.data() + offset;
        if start + N <= self.0.data_end() {
            // SAFETY: [start, start + N) lies within the packet's linear
            // data, as the comparison above (checked by the verifier too)
            // shows; [u8; N] has no alignment or validity requirement.
            return Some(unsafe { core::ptr::read_unaligned(start as *const [u8; N]) });
        }
        self.0.load::<[u8; N]>(offset).ok()
    }

    #[inline(always)]
    fn read_at_computed<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        self.0.load::<[u8; N]>(offset).ok()
    }
}

#[classifier]
pub fn from_endpoint(ctx: TcContext) -> i32 {
    // SAFETY: `ctx.skb.skb` is the kernel's context pointer for this run,
    // valid for the whole program; `ifindex` is a readable __sk_buff field.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let mut found: *mut EndpointEntry = core::ptr::null_mut();
    let judged = verdict(&Frame(&ctx), ifindex, |key| {
        let entry = ENDPOINTS.get_ptr_mut(key)?;
        found = entry;
        // SAFETY: the lookup's pointer to this CPU's value of a live entry;
        // the endpoint is copied out at once, and a concurrent update by the
        // agent can at worst make this one packet see the old or the new one.
        Some(unsafe { (*entry).info })
    });
    if judged == Verdict::Pass && !found.is_null() {
        // SAFETY: as above; tc programs do not migrate between CPUs while
        // they run, so nothing else writes this CPU's value now. (An entry
        // the agent deletes meanwhile may be reused for another address
        // before this count lands: one packet counted to the wrong
        // endpoint, the price of not taking a lock per packet.)
        unsafe { (*found).record_pass(ctx.len()) };
    } else {
        count(ifindex, judged, ctx.len());
    }
    judged.tc_action()
}

/// A new interface entry's first value. Inserted from this static rather
/// than built on the stack: zeroing a stack value compiles to a byte loop
/// with variable stack offsets, which the verifier refuses to a loader
/// without CAP_PERFMON.
static FRESH_COUNTERS: EndpointCounters = EndpointCounters::ZERO;

/// Counts a packet that has no endpoint entry to count it: a drop, or a
/// non-IP frame passed.
#[inline(always)]
fn count(ifindex: u32, judged: Verdict, length: u32) {
    let counters = match EP_COUNTERS.get_ptr_mut(ifindex) {
        Some(counters) => counters,
        None => {
            // Fails if another CPU made the entry in between (then the
            // lookup finds theirs) or if the map is full (then this packet
            // goes uncounted).
            #[allow(
                clippy::needless_borrows_for_generic_args,
                reason = "by value the static would be copied onto the stack first"
            )]
            let _ = EP_COUNTERS.insert(ifindex, &FRESH_COUNTERS, u64::from(BPF_NOEXIST));
            match EP_COUNTERS.get_ptr_mut(ifindex) {
                Some(counters) => counters,
                None => return,
            }
        }
    };
    // SAFETY: the pointer is this CPU's slot of a live entry, and tc
    // programs do not migrate between CPUs while they run.
    unsafe { (*counters).record(judged, length) };
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier proves no panic path is reachable; this only satisfies
    // the compiler.
    loop {}
}
