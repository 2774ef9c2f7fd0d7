//! What the datapath's eBPF program (`agent-ebpf`) and its user-space
//! loader (`ipam-datapath`) share, `no_std` so both can build it:
//!
//! - [`maps`]: the map names, sizes and layout version, and their
//!   `#[repr(C)]` keys and values ([`EndpointKey`], [`EndpointEntry`] with
//!   its [`EndpointInfo`], [`EndpointCounters`]), so both sides agree byte
//!   for byte.
//! - [`packet`]: parsing Ethernet, ARP, IPv4 and IPv6 (and spotting
//!   neighbour and multicast listener discovery) through [`PacketBytes`],
//!   which the eBPF program backs with bounds-checked direct packet access
//!   and `bpf_skb_load_bytes` past the linear data (so a truncated packet
//!   is an error, never an out-of-bounds read) and the host's tests with a
//!   byte slice.
//! - [`verdict`]: the decision for one packet from a pod: pass it, or drop
//!   it for a [`DropReason`].
//!
//! All of it is plain functions over plain data, unit-tested on the host.

#![cfg_attr(not(test), no_std)]

pub mod maps;
pub mod packet;
pub mod verdict;

pub use maps::{
    DropReason, EndpointCounters, EndpointEntry, EndpointInfo, EndpointKey, MapLayout,
    COUNTERS_MAP, ENDPOINTS_MAP, LAYOUT_VERSION,
};
pub use packet::{PacketBytes, ParseError, Parsed};
pub use verdict::{verdict, Verdict};
