//! The engine end to end against the in-process fake cloud
//! (`ipam-fake-cloud`: the wasm mock's state machine, run natively) and the
//! in-memory node store, on tokio's paused clock: the behaviours
//! `tests/integration/engine.rs` checks through the wasm mock component,
//! without wasmtime, and those a test stages mid-run through the fake's
//! handle, which the component takes only from its settings (a device-index
//! conflict, a leaked create, a tight rate limit).

mod agents;
mod converge;
mod crd_schema;
mod engine_loop;
mod faults;
mod instance_cache;
mod maintainer;
mod plan;
mod prefixes;
mod rate_limits;
mod release;
mod steered;
mod support;
mod surge;
mod triggers;
mod trouble;
