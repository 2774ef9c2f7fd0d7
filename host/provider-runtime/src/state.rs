//! The data of one provider instance's store: WASI that grants nothing but
//! clocks and random, wasi:http behind the egress hook, the memory cap, the
//! host-resource budget (the table's entry cap and [`HostBudget`]), the
//! per-call budget of the guest's log ([`LogBudget`]), and what the `host`
//! imports (log, credentials) serve from (each WIT version's
//! module implements its own `host` interface over this).

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::ResourceLimiter;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use ipam_cloud::credentials::{CredentialSource, Credentials};

use crate::config::CallLimits;
use crate::denials::DenialLog;
use crate::host_budget::{HostBudget, HEADER_SET_BYTES};
use crate::http_hooks::EgressHooks;
use crate::log_budget::LogBudget;

/// How much of a guest's stderr (panic messages) is kept for error reports.
const STDERR_CAPTURE_BYTES: usize = 16 * 1024;

/// Caps linear memory; remembers that it refused, so the trap that follows is
/// reported as a memory-limit error.
pub struct MemoryCap {
    pub limit_bytes: usize,
    pub hit: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit_bytes {
            self.hit = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

pub struct StoreState {
    provider: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    hooks: EgressHooks,
    pub memory: MemoryCap,
    pub budget: HostBudget,
    pub stderr: MemoryOutputPipe,
    logs: LogBudget,
    credentials: Arc<dyn CredentialSource>,
}

impl StoreState {
    pub fn new(
        provider: Arc<str>,
        hooks: EgressHooks,
        limits: &CallLimits,
        credentials: Arc<dyn CredentialSource>,
    ) -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE_BYTES);
        // No preopened directories, no environment, no arguments, no sockets:
        // Rust's std references wasi:cli and wasi:filesystem, so they are
        // linked, but they give the guest nothing.
        let wasi = WasiCtx::builder()
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(limits.host_entries);
        let mut http = WasiHttpCtx::new();
        // wasi:http's own limit traps; the budget's check (a header error the
        // guest can handle) comes first, this is the net under it.
        http.set_field_size_limit(2 * HEADER_SET_BYTES);
        Self {
            provider,
            wasi,
            table,
            http,
            hooks,
            memory: MemoryCap {
                limit_bytes: limits.memory_bytes,
                hit: false,
            },
            budget: HostBudget::new(limits.host_entries, limits.host_bytes),
            stderr,
            logs: LogBudget::default(),
            credentials,
        }
    }

    /// Tag this instance's logs with the provider's declared name.
    pub fn rename(&mut self, provider: Arc<str>) {
        self.provider = provider;
    }

    /// A line the guest logs (the `host` import of every WIT version),
    /// tagged with the provider's declared name: cut, and dropped once the
    /// call's log budget is spent.
    pub fn guest_log(&mut self, level: tracing::Level, message: &str) {
        let Some(message) = self.logs.admit(message) else {
            return;
        };
        let provider: &str = &self.provider;
        match level {
            tracing::Level::TRACE => tracing::trace!(provider, "{message}"),
            tracing::Level::DEBUG => tracing::debug!(provider, "{message}"),
            tracing::Level::INFO => tracing::info!(provider, "{message}"),
            tracing::Level::WARN => tracing::warn!(provider, "{message}"),
            tracing::Level::ERROR => tracing::error!(provider, "{message}"),
        }
    }

    /// The call ended: how many of its log lines were dropped.
    pub fn end_log_call(&mut self) -> u64 {
        self.logs.end_call()
    }

    /// What the guest gets when it asks for credentials.
    pub fn credentials(&self) -> Result<Credentials, String> {
        self.credentials.current()
    }

    pub fn denials(&self) -> &DenialLog {
        &self.hooks.denials
    }

    pub fn hooks_mut(&mut self) -> &mut EgressHooks {
        &mut self.hooks
    }

    pub(crate) fn budget_and_table(&mut self) -> (&mut HostBudget, &mut ResourceTable) {
        (&mut self.budget, &mut self.table)
    }

    /// The tail of what the guest wrote to stderr, for error reports.
    pub fn stderr_tail(&self) -> String {
        let bytes = self.stderr.contents();
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim();
        let start = text.char_indices().rev().nth(1000).map_or(0, |(i, _)| i);
        text[start..].to_string()
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}
