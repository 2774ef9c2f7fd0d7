//! One wasmtime [`Engine`] for every provider: epoch interruption driven by a
//! ticker thread, a linker with the imports a provider may use, and the disk
//! cache of compiled components.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ipam_cloud::{CloudError, ProviderInfo};
use ipam_provider_module::{ModuleError, ModuleInfo};
use wasmtime::component::Linker;
use wasmtime::{Config, Engine};

use crate::compile_cache::{self as cache, CacheError, ComponentCache};
use crate::config::ProviderConfig;
use crate::egress::{EgressError, EgressPolicy};
use crate::prepared::PreparedModule;
use crate::state::StoreState;
use crate::wasm_provider::WasmProvider;
use crate::wit::{self, BindingsPre, LinkError};

#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where compiled components are kept; `None` compiles on every load.
    pub cache_dir: Option<PathBuf>,
    /// Granularity of epoch deadlines.
    pub epoch_tick: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: Some(default_cache_dir()),
            epoch_tick: Duration::from_millis(10),
        }
    }
}

/// `$IPAM_CACHE_DIR`, else `$XDG_CACHE_HOME/ipam-operator/components`, else
/// `~/.cache/ipam-operator/components`, else a folder in the temp dir.
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("IPAM_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("ipam-operator").join("components")
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Module(#[from] ModuleError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    // The next three name their cause in their own message and so do not
    // give it as their `source`: a report that walks the chain (anyhow's
    // `{:#}`) would print it twice.
    #[error("linking the component: {0}")]
    Link(LinkError),
    #[error("egress allow-list: {0}")]
    Egress(EgressError),
    #[error("starting the provider: {0}")]
    Start(CloudError),
    #[error("creating the wasmtime engine: {0}")]
    Engine(String),
}

impl From<LinkError> for LoadError {
    fn from(error: LinkError) -> Self {
        LoadError::Link(error)
    }
}

impl From<EgressError> for LoadError {
    fn from(error: EgressError) -> Self {
        LoadError::Egress(error)
    }
}

impl From<CloudError> for LoadError {
    fn from(error: CloudError) -> Self {
        LoadError::Start(error)
    }
}

pub struct ProviderRuntime {
    engine: Engine,
    linker: Linker<StoreState>,
    cache: Option<ComponentCache>,
    compiles: AtomicUsize,
    epoch_tick: Duration,
}

impl ProviderRuntime {
    pub fn new(config: RuntimeConfig) -> Result<Self, LoadError> {
        let mut wasm = Config::new();
        wasm.epoch_interruption(true);
        let engine = Engine::new(&wasm).map_err(|e| LoadError::Engine(format!("{e:#}")))?;
        spawn_epoch_ticker(&engine, config.epoch_tick);

        let link = |e: wasmtime::Error| LoadError::Link(LinkError::Wasmtime(e));
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(link)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(link)?;
        crate::host_budget::add_to_linker(&mut linker).map_err(link)?;
        wit::add_to_linker(&mut linker).map_err(link)?;

        let cache = config
            .cache_dir
            .map(|dir| ComponentCache::new(&engine, dir))
            .transpose()?;
        Ok(Self {
            engine,
            linker,
            cache,
            compiles: AtomicUsize::new(0),
            epoch_tick: config.epoch_tick,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// How many components this runtime compiled (cache hits are not counted).
    pub fn compiles(&self) -> usize {
        self.compiles.load(Ordering::Relaxed)
    }

    /// Check a module's WIT version, then compile it (or load it from the
    /// cache) and link it.
    pub fn prepare(&self, bytes: &[u8]) -> Result<PreparedModule, LoadError> {
        let info = ModuleInfo::read(bytes)?;
        let (component, origin) = match &self.cache {
            Some(cache) => cache.load(&self.engine, bytes, &info.digest)?,
            None => (
                cache::compile(&self.engine, bytes)?,
                cache::Origin::Compiled,
            ),
        };
        if origin == cache::Origin::Compiled {
            self.compiles.fetch_add(1, Ordering::Relaxed);
        }
        let pre = BindingsPre::new(&info.wit_version, &self.linker, &component)?;
        tracing::debug!(digest = %info.digest, ?origin, "provider module ready");
        Ok(PreparedModule { info, origin, pre })
    }

    /// Prepare a module and start a provider from it: one instance is made and
    /// configured now, so bad settings fail here.
    pub async fn load(
        &self,
        bytes: &[u8],
        config: ProviderConfig,
    ) -> Result<WasmProvider, LoadError> {
        let module = self.prepare(bytes)?;
        let egress =
            EgressPolicy::new(&config.egress)?.with_special_addresses(&config.special_addresses);
        Ok(WasmProvider::start(&self.engine, self.epoch_tick, module, egress, config).await?)
    }

    /// A module's declarations and its `info`, without configuring it.
    pub async fn describe(&self, bytes: &[u8]) -> Result<(ModuleInfo, ProviderInfo), LoadError> {
        let module = self.prepare(bytes)?;
        let info = module.info.clone();
        Ok((
            info,
            WasmProvider::describe(&self.engine, self.epoch_tick, module).await?,
        ))
    }
}

/// Advance the engine's epoch every `tick` until the engine is dropped.
fn spawn_epoch_ticker(engine: &Engine, tick: Duration) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(move || loop {
            std::thread::sleep(tick);
            match weak.upgrade() {
                Some(engine) => engine.increment_epoch(),
                None => return,
            }
        })
        .map(drop)
        .unwrap_or_else(|error| tracing::error!(%error, "no epoch ticker: guest CPU loops are bounded by wall-clock timeouts only"));
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::error::Error as _;

    /// A report that walks the source chain (anyhow's `{:#}`) printed the
    /// cause twice when the message named it and it was the source too.
    #[test]
    fn a_load_error_names_its_cause_once() {
        let errors = [
            LoadError::from(CloudError::Timeout {
                provider: "p".into(),
                operation: "configure",
                limit: Duration::from_secs(5),
            }),
            LoadError::from(EgressError::BadOrigin("x".into())),
        ];
        for error in errors {
            assert!(error.source().is_none(), "{error}");
        }
        let error = LoadError::from(CloudError::Timeout {
            provider: "p".into(),
            operation: "configure",
            limit: Duration::from_secs(5),
        });
        assert_eq!(
            error.to_string(),
            "starting the provider: provider p did not finish configure within 5s"
        );
    }
}
