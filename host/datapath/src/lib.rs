//! User space of the datapath's eBPF program (`agent-ebpf`): the node agent
//! drives it through [`Datapath`].
//!
//! - [`ensure_bpffs`] mounts bpffs where it is not mounted.
//! - [`Datapath::load`] loads the object built by `cargo xtask ebpf`, with
//!   its maps pinned under a versioned folder ([`PinDir`]). A pinned map is
//!   reused only if its type, key size, value size and max entries are this
//!   build's ([`check_pin`]; aya itself reopens a pin without looking);
//!   otherwise it is re-created and the [`LoadReport`] says so.
//! - [`Datapath::attach`] puts the tc program on a pod's host-side veth with
//!   a pinned tcx link (reusing one pinned by an earlier run);
//!   [`Datapath::detach`] removes it.
//! - [`Datapath::set_endpoint`], [`Datapath::remove_endpoint`] and
//!   [`Datapath::sync_host_addresses`] keep the endpoint map in step;
//!   [`Datapath::counters`] reads the per-CPU counters summed.
//! - [`endpoint_key`] and [`key_address`] convert between addresses and
//!   map keys; [`interface_index`] finds an interface's ifindex.
//! - [`Datapath::test_run`] runs the program on a crafted frame with
//!   `BPF_PROG_TEST_RUN`.
//!
//! The decisions (pin reuse, host address sync, the packet verdict in
//! `agent-ebpf-common`) are plain functions, table-tested; the rest is I/O.

mod address;
mod bpffs;
mod datapath;
mod error;
mod host_addresses;
mod layout;
mod pins;
mod pod;

pub use address::{endpoint_key, key_address};
pub use agent_ebpf_common::{
    DropReason, EndpointCounters, EndpointInfo, EndpointKey, MapLayout, Verdict, COUNTERS_MAP,
    ENDPOINTS_MAP,
};
pub use bpffs::{ensure_bpffs, is_bpffs, Bpffs, DEFAULT_BPFFS};
pub use datapath::{interface_index, Attached, Datapath, LoadReport, TestRunOutcome, PROGRAM};
pub use error::DatapathError;
pub use host_addresses::{plan_host_sync, HostSync};
pub use layout::{check_pin, MapOutcome, PinCheck};
pub use pins::PinDir;
