//! The IPAM engine's parts. `watermarks`, `select` and `release` are pure
//! decisions over plain data (design.md section 4); `cache` is the engine's
//! picture of the cloud; `node` is the CiliumNode model and `store` the
//! `NodeStore` trait with its in-memory implementation. The engine that
//! applies the decisions to nodes through a `CloudApi` builds on them.

pub mod allocate;
pub mod cache;
pub mod engine;
pub mod gc;
pub mod maintain;
pub mod node;
pub mod reclaim;
pub mod release;
pub mod schedule;
pub mod select;
pub mod store;
pub mod watermarks;
