//! The provider runtime: provider components run under wasmtime, exposed to
//! the rest of the host as [`crate::cloud::CloudApi`].

pub mod aws_credentials;
pub mod aws_egress;
mod cache;
pub mod credentials;
pub mod egress;
mod host_http;
mod http_hooks;
pub mod module;
pub mod oci;
mod pinned_send;
pub mod resolve;
mod runtime;
mod state;
mod v0_1_0;
mod wasm_provider;

use std::path::{Path, PathBuf};

pub use cache::Origin as ModuleOrigin;
pub use runtime::{
    default_cache_dir, CallLimits, LoadError, PreparedModule, ProviderConfig, ProviderRuntime,
    RuntimeConfig,
};
pub use wasm_provider::WasmProvider;

/// Provider settings as providers receive them: a YAML or JSON document
/// (what an operator writes in a ConfigMap) turned into JSON text.
pub fn settings_json(text: &str) -> Result<String, serde_yaml::Error> {
    Ok(serde_yaml::from_str::<serde_json::Value>(text)?.to_string())
}

/// Where `cargo xtask providers` puts the components it builds:
/// `$IPAM_COMPONENTS_DIR`, else `target/components` in this source tree.
pub fn components_dir() -> PathBuf {
    match std::env::var_os("IPAM_COMPONENTS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/components"),
    }
}

/// A module argument: a path to a file, or the bare name of a component in
/// [`components_dir`] (`mock` is `components_dir()/mock.wasm`).
pub fn resolve_module(arg: &str) -> PathBuf {
    let path = Path::new(arg);
    let bare = !arg.contains(std::path::MAIN_SEPARATOR) && path.extension().is_none();
    if bare && !path.exists() {
        components_dir().join(format!("{arg}.wasm"))
    } else {
        path.to_path_buf()
    }
}
