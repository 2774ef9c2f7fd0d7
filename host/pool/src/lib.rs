//! The IPAM decisions as plain functions over plain data (Cilium's pool
//! algorithm, then better): watermarks, where addresses go and come from,
//! allocation and release plans for one node from its cached instance, the
//! release handshake, the interfaces status agents read, the order nodes are
//! worked in, and the arithmetic of token buckets and backoff. No I/O: time
//! and randomness come in as parameters, and nothing here depends on tokio,
//! wasmtime, kube or HTTP. The engine (`ipam-engine`) executes what these
//! decide.

pub mod agent;
pub mod allocation;
pub mod backoff;
pub mod handshake;
pub mod interfaces_status;
pub mod ipam_mode;
pub mod node_view;
pub mod pool;
pub mod rate_buckets;
pub mod release_plan;
pub mod room;
pub mod schedule;
pub mod select;
pub mod tags;
pub mod token_bucket;
pub mod watermarks;

pub use ipam_mode::IpamMode;
pub use node_view::NodeView;
