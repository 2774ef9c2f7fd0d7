//! How one provider is run: its settings, egress, resolver, credentials and
//! the limits on each call.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ipam_cloud::answer::RefusalSink;
use ipam_cloud::credentials::{CredentialSource, StaticCredentials};
use ipam_http_client::TrustRoots;

use crate::resolve::{Resolver, SystemResolver};

/// Limits applied to every call into a provider, and to what one instance
/// may hold on the host's side.
#[derive(Debug, Clone, Copy)]
pub struct CallLimits {
    /// Wall-clock limit of one call, and (in epoch ticks) of the guest's CPU.
    pub timeout: Duration,
    /// Cap on one instance's linear memory.
    pub memory_bytes: usize,
    /// Cap on the live entries of one instance's resource table (wasi:http
    /// fields, requests, responses, bodies, streams, pollables, futures).
    pub host_entries: usize,
    /// Cap on the bytes those entries hold (header sets, URLs, buffered
    /// bodies), as [`crate::host_budget`] weighs them.
    pub host_bytes: usize,
    /// Outgoing requests one instance may have open at once; past it a
    /// request fails with wasi:http's `connection-limit-reached`.
    pub concurrent_requests: usize,
    /// Request and response body bytes one call may move; past it the body
    /// stream fails (`HTTP-request-body-size`, `HTTP-response-body-size`).
    pub call_body_bytes: u64,
}

impl Default for CallLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            memory_bytes: 128 << 20,
            host_entries: 1024,
            host_bytes: 8 << 20,
            concurrent_requests: 16,
            call_body_bytes: 64 << 20,
        }
    }
}

/// Told each time an instance goes over its host-resource budget, and of the
/// log lines a call's log budget dropped (a metrics registry counts them);
/// both are logged either way.
pub trait BudgetSink: Send + Sync {
    fn over_budget(&self, provider: &str, over: crate::host_budget::OverBudget);
    /// `lines` of one call's guest log were dropped ([`crate::log_budget`]).
    fn log_lines_dropped(&self, provider: &str, lines: u64);
}

/// How one provider is run.
#[derive(Clone)]
pub struct ProviderConfig {
    /// The provider's settings, a JSON document it validates itself.
    pub settings: String,
    /// Allowed origins, `scheme://host[:port]`.
    pub egress: Vec<String>,
    /// Special addresses (cloud metadata and the like, refused by default
    /// whatever the allow-list says) this provider may reach, each exactly.
    pub special_addresses: Vec<IpAddr>,
    /// How egress host names are resolved (checked, then connected to).
    pub resolver: Arc<dyn Resolver>,
    /// What an https server's certificate must chain to: the webpki roots,
    /// plus the operator's extra CAs where a cloud endpoint has a private one.
    pub trust: TrustRoots,
    pub credentials: Arc<dyn CredentialSource>,
    pub limits: CallLimits,
    /// Told of every answer the host refuses (a metrics registry); refusals
    /// are logged either way.
    pub refusals: Option<Arc<dyn RefusalSink>>,
    /// Told of every time an instance goes over its host-resource budget,
    /// and of the guest log lines each call dropped.
    pub budget_events: Option<Arc<dyn BudgetSink>>,
}

impl ProviderConfig {
    /// These settings, no egress, no special address, the system resolver, the webpki roots, no
    /// credentials, the default limits.
    pub fn new(settings: impl Into<String>) -> Self {
        Self {
            settings: settings.into(),
            egress: Vec::new(),
            special_addresses: Vec::new(),
            resolver: Arc::new(SystemResolver),
            trust: TrustRoots::webpki(),
            credentials: Arc::new(StaticCredentials::default()),
            limits: CallLimits::default(),
            refusals: None,
            budget_events: None,
        }
    }
}
