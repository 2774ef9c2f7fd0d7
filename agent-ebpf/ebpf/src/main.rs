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
    verdict, EndpointCounters, EndpointInfo, EndpointKey, PacketBytes, Verdict,
};
use aya_ebpf::bindings::BPF_NOEXIST;
use aya_ebpf::macros::{classifier, map};
use aya_ebpf::maps::{HashMap, PerCpuHashMap};
use aya_ebpf::programs::TcContext;

/// Source address to the endpoint it belongs to; written by the agent.
#[map(name = "ENDPOINTS")]
static ENDPOINTS: HashMap<EndpointKey, EndpointInfo> =
    HashMap::with_max_entries(ENDPOINTS_MAX_ENTRIES, 0);

/// Per pod interface (ifindex) and CPU: packets and bytes passed, drops by
/// reason.
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
    let judged = verdict(&Frame(&ctx), ifindex, |key| {
        // SAFETY: the value is copied out at once; a concurrent update can
        // at worst make this one packet see the old or the new entry.
        unsafe { ENDPOINTS.get(key) }.copied()
    });
    count(ifindex, judged, ctx.len());
    judged.tc_action()
}

#[inline(always)]
fn count(ifindex: u32, judged: Verdict, length: u32) {
    if let Some(counters) = EP_COUNTERS.get_ptr_mut(ifindex) {
        // SAFETY: the pointer is this CPU's slot of a live entry, and tc
        // programs do not migrate between CPUs while they run.
        unsafe { (*counters).record(judged, length) };
        return;
    }
    let mut first = EndpointCounters::ZERO;
    first.record(judged, length);
    if EP_COUNTERS
        .insert(ifindex, first, u64::from(BPF_NOEXIST))
        .is_err()
    {
        // Another CPU made the entry in between: count in our slot of it.
        if let Some(counters) = EP_COUNTERS.get_ptr_mut(ifindex) {
            // SAFETY: as above.
            unsafe { (*counters).record(judged, length) };
        }
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier proves no panic path is reachable; this only satisfies
    // the compiler.
    loop {}
}
