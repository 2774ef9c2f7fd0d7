//! The provider runtime: provider components run under wasmtime and exposed
//! to the rest of the host as [`ipam_cloud::CloudApi`] ([`WasmProvider`]):
//! one engine with epoch deadlines, the compiled-component disk cache, the
//! bindings of every served WIT version (`wit/`, one module per version), a
//! pool of instances per provider with a memory cap, a host-resource budget,
//! a log budget and a deadline on every call, wasi:http behind a fail-closed egress
//! allow-list (one refusal rule for special addresses) with a pinned sender,
//! requests that end with the call that made them and a per-call body
//! budget, and modules pulled from OCI registries by digest.

mod answers;
mod body_budget;
mod compile_cache;
mod config;
mod denials;
pub mod egress;
mod guest_text;
pub mod host_budget;
mod http_hooks;
pub mod log_budget;
pub mod oci;
mod pinned_send;
mod prepared;
mod registry_challenge;
pub mod registry_logins;
pub mod resolve;
mod runtime;
pub mod special_address;
mod state;
mod wasm_provider;
mod wit;

pub use compile_cache::Origin as ModuleOrigin;
pub use config::{BudgetSink, CallLimits, ProviderConfig};
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
