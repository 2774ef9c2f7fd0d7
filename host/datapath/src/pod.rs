//! aya reads and writes map entries as `aya::Pod`; the shared types live in
//! a `no_std` crate without aya, so they are wrapped here.

use agent_ebpf_common::{EndpointCounters, EndpointInfo, EndpointKey};

#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyPod(pub EndpointKey);

#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct InfoPod(pub EndpointInfo);

#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct CountersPod(pub EndpointCounters);

// SAFETY: EndpointKey is #[repr(C)] of a [u8; 16], a u8 and a [u8; 3]: no
// padding, and every bit pattern is a valid value.
unsafe impl aya::Pod for KeyPod {}
// SAFETY: EndpointInfo is #[repr(C)] of three u32: no padding, and every bit
// pattern is a valid value.
unsafe impl aya::Pod for InfoPod {}
// SAFETY: EndpointCounters is #[repr(C)] of u64s and a [u64; N]: no padding,
// and every bit pattern is a valid value.
unsafe impl aya::Pod for CountersPod {}
