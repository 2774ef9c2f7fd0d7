//! The provider runtime: provider components run under wasmtime and exposed
//! to the rest of the host as [`ipam_cloud::CloudApi`] ([`WasmProvider`]):
//! one engine with epoch deadlines, the compiled-component disk cache, the
//! bindings of every served WIT version (`wit/`, one module per version), a
//! pool of instances per provider with a memory cap and a deadline on every
//! call, wasi:http behind a fail-closed egress allow-list with a pinned
//! sender, and modules pulled from OCI registries by digest.

mod answers;
mod compile_cache;
mod config;
pub mod egress;
mod http_hooks;
pub mod oci;
mod pinned_send;
mod prepared;
pub mod resolve;
mod runtime;
mod state;
mod wasm_provider;
mod wit;

pub use compile_cache::Origin as ModuleOrigin;
pub use config::{CallLimits, ProviderConfig};
pub use ipam_http_client::{TrustError, TrustRoots};
pub use prepared::PreparedModule;
pub use runtime::{default_cache_dir, LoadError, ProviderRuntime, RuntimeConfig};
pub use wasm_provider::WasmProvider;
pub use wit::{LinkError, UnservedVersion};

/// Provider settings as providers receive them: a YAML or JSON document
/// (what an operator writes in a ConfigMap) turned into JSON text.
pub fn settings_json(text: &str) -> Result<String, serde_yaml::Error> {
    Ok(serde_yaml::from_str::<serde_json::Value>(text)?.to_string())
}
