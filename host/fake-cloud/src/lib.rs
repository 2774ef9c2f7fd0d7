//! An in-process fake cloud implementing [`ipam_cloud::CloudApi`] in plain
//! Rust, so the engine's tests run without wasmtime. It follows the wasm mock
//! provider's rules (`providers/mock`) where they matter to the engine, and
//! the WIT contract (`wit/0.1.0/provider.wit`) for every operation:
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
//! On top, what tests need: a [`FakeCloudBuilder`] to declare the cloud,
//! [`FakeCloud::standard`] for a ready-made one, call counts per
//! [`ipam_cloud::Operation`], injected failures and leaked creates, and
//! settable capabilities.

mod addresses;
mod builder;
mod calls;
mod fake;
mod faults;
mod standard;
mod world;

pub use builder::{FakeCloudBuilder, InstanceSpec, SubnetSpec};
pub use fake::{FakeCloud, PROVIDER_NAME};
pub use standard::{
    standard_instance, standard_subnet, standard_zone, M5_LARGE, STANDARD_INSTANCE_TYPE,
    STANDARD_SECURITY_GROUP, STANDARD_VPC,
};

#[cfg(test)]
mod tests;
