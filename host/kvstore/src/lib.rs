//! The operator's kvstore side, on etcd's v3 API, in the layout Cilium's
//! agents and clustermesh peers read (`cilium/...`).
//!
//! - [`store`]: the [`SharedStore`] trait every duty writes through, with
//!   the etcd implementation and an in-memory one ([`memory`]) for tests.

pub mod error;
pub mod identity_gc;
pub mod layout;
pub mod lock_sweeper;
pub mod memory;
pub mod store;
#[cfg(test)]
mod test_store;

pub use error::KvError;
pub use store::{HeldLock, KeyValue, SharedStore};
