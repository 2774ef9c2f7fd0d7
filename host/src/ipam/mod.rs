//! The IPAM engine's decisions. `watermarks`, `select` and `release` are pure functions
//! over plain data (design.md section 4); the engine that applies them to
//! nodes through a `CloudApi` builds on them.

pub mod release;
pub mod select;
pub mod watermarks;
