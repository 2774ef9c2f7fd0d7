//! aya reads and writes map entries as `aya::Pod`; the shared types live in
//! a `no_std` crate without aya, so they are wrapped here.

use agent_ebpf_common::{EndpointCounters, EndpointEntry, EndpointKey};

#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyPod(pub EndpointKey);

#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct EntryPod(pub EndpointEntry);

#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct CountersPod(pub EndpointCounters);

// SAFETY: EndpointKey is #[repr(C)] of five u32 words: no
// padding, and every bit pattern is a valid value.
unsafe impl aya::Pod for KeyPod {}
// SAFETY: EndpointEntry is #[repr(C)] of four u32 (the endpoint's three and
// a reserved one) then two u64: no padding, and every bit pattern is a
// valid value.
unsafe impl aya::Pod for EntryPod {}
// SAFETY: EndpointCounters is #[repr(C)] of u64s and a [u64; N]: no padding,
// and every bit pattern is a valid value.
unsafe impl aya::Pod for CountersPod {}
