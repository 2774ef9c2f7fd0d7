//! The integration tests: one binary, a module per area, so wasmtime and
//! kube are linked once. Each needs the components built by `cargo xtask
//! providers` or a real server the test starts itself (moto, stub servers on
//! 127.0.0.1, kubectl and helm for the deploy renders); a missing one fails
//! loudly.

mod allocation;
mod aws_credentials;
mod aws_ec2_stub;
mod aws_moto;
mod azure_arm_stub;
mod azure_credentials;
mod contained_guests;
mod deploy;
mod egress_tls;
mod endpoint_gc;
mod engine;
mod guest_floods;
mod guest_logs;
mod images;
mod kubernetes;
mod leak_gc;
mod lying_guests;
mod misbehaving_guests;
mod mock_provider;
mod module_cache;
mod oci_registry;
mod private_registry;
mod refused_sends;
mod release;
mod rss;
mod shared_stores;
mod wit_versions;
