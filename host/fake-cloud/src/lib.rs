//! An in-process fake cloud implementing [`ipam_cloud::CloudApi`] in plain
//! Rust, so the engine's tests run without wasmtime. Its cloud is the wasm
//! mock provider's own state machine (`providers/mock`, crate
//! `mock-provider`), compiled natively: the same rules, in one
//! implementation, as the component the simulations and integration tests
//! run (see `providers/mock/README.md`):
//!
//! - per-instance-type limits: interfaces per instance, IPv4 slots per
//!   interface (the primary address counts, a /28 takes one), prefix
//!   delegation;
//! - create-interface refuses a taken device index (conflict) and a full
//!   instance (interface-limit), attaches the interface at once with the
//!   request's tags, and assigns all or nothing;
//! - subnets hand out their lowest free address first, reserving AWS's first
//!   four and last address (subnet-full; insufficient-prefixes when no
//!   aligned /28 is free), and assign-ips answers address-limit when the
//!   interface has no slot left;
//! - delete-interface and unassign-ips are idempotent; the primary interface
//!   cannot be deleted; unknown ids are not-found.
//!
//! The mock's answers are SDK (WIT-generated) types, converted to the
//! `ipam-cloud` model in one module, as the provider runtime converts a
//! component's. On top, what tests need: a [`FakeCloudBuilder`] to declare
//! the cloud (the mock's settings), [`FakeCloud::standard`] for a ready-made
//! one, call counts per [`ipam_cloud::Operation`], injected failures and
//! leaked creates (the mock's faults), and settable capabilities.

mod builder;
mod calls;
mod convert;
mod fake;
mod standard;

pub use builder::{FakeCloudBuilder, InstanceSpec, SubnetSpec};
pub use fake::{FakeCloud, PROVIDER_NAME};
pub use standard::{
    standard_instance, standard_subnet, standard_zone, M5_LARGE, STANDARD_INSTANCE_TYPE,
    STANDARD_SECURITY_GROUP, STANDARD_VPC,
};

#[cfg(test)]
mod tests;
