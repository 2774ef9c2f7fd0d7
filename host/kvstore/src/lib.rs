//! The operator's kvstore side, on etcd's v3 API, in the layout Cilium's
//! agents and clustermesh peers read (`cilium/...`).
//!
//! - [`config`]: endpoints, TLS, username and password, leases' TTLs, the
//!   operator's request rate; Cilium's `etcd.config` file is read as is.
//! - [`client`]: one connection, every request rate-limited and timed out;
//!   prefix listings paged at one revision.
//! - [`session`]: leases kept alive by us, replaced when etcd lost them.
//! - [`watch`]: list-then-watch of a prefix into a local cache that never
//!   misses an event (a compacted or broken watch relists and synthesizes
//!   the deletes it missed).
//! - [`store`]: the [`SharedStore`] trait every duty writes through;
//!   [`etcd_store`] implements it on etcd (keys on the session lease
//!   written again on a new lease, locks as etcd concurrency mutexes), and
//!   [`memory`] in memory for tests.
//! - [`heartbeat`]: `cilium/.heartbeat` and the CiliumClusterConfig;
//!   [`heartbeat_metrics`]: when it was last written.
//! - [`lock_sweeper`]: identity lock holders unchanged for two sweeps go.
//! - [`identity_gc`]: identities no agent uses go on their second round.
//! - [`layout`]: the keys, and the rules for reading them.

pub mod client;
pub mod config;
pub mod error;
pub mod etcd_store;
pub mod heartbeat;
pub mod heartbeat_metrics;
pub mod identity_gc;
pub mod layout;
mod limiter;
pub mod lock_sweeper;
pub mod memory;
pub mod mesh;
pub mod session;
pub mod store;
#[cfg(test)]
mod test_store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod watch;

pub use error::KvError;
pub use store::{HeldLock, KeyValue, SharedStore};
