//! The engine end to end against the in-process fake cloud
//! (`ipam-fake-cloud`) and the in-memory node store, on tokio's paused clock:
//! the behaviours `tests/integration/engine.rs` checks through the wasm mock,
//! without wasmtime, and those the mock cannot easily stage (a device-index
//! conflict, a leaked create, a tight rate limit).

mod agents;
mod converge;
mod faults;
mod rate_limits;
mod release;
mod support;
mod surge;
