//! How one provider is run: its settings, egress, resolver, credentials and
//! the limits on each call.

use std::sync::Arc;
use std::time::Duration;

use ipam_cloud::answer::RefusalSink;
use ipam_cloud::credentials::{CredentialSource, StaticCredentials};
use ipam_http_client::TrustRoots;

use crate::resolve::{Resolver, SystemResolver};

/// Limits applied to every call into a provider.
#[derive(Debug, Clone, Copy)]
pub struct CallLimits {
    /// Wall-clock limit of one call, and (in epoch ticks) of the guest's CPU.
    pub timeout: Duration,
    /// Cap on one instance's linear memory.
    pub memory_bytes: usize,
}

impl Default for CallLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            memory_bytes: 128 << 20,
        }
    }
}

/// How one provider is run.
#[derive(Clone)]
pub struct ProviderConfig {
    /// The provider's settings, a JSON document it validates itself.
    pub settings: String,
    /// Allowed origins, `scheme://host[:port]`.
    pub egress: Vec<String>,
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
}

impl ProviderConfig {
    /// These settings, no egress, the system resolver, the webpki roots, no
    /// credentials, the default limits.
    pub fn new(settings: impl Into<String>) -> Self {
        Self {
            settings: settings.into(),
            egress: Vec::new(),
            resolver: Arc::new(SystemResolver),
            trust: TrustRoots::webpki(),
            credentials: Arc::new(StaticCredentials::default()),
            limits: CallLimits::default(),
            refusals: None,
        }
    }
}
