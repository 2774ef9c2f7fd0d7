//! Credentials a provider gets through the `host` import. The host resolves
//! them; a provider never reads files, environment or instance metadata.

use std::collections::BTreeMap;

/// Credentials as handed to a guest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    pub values: BTreeMap<String, String>,
    /// Unix seconds after which the guest must ask again.
    pub expires_at: Option<u64>,
}

/// A source of credentials. `current` is called from inside a guest call, so
/// it must be cheap: a source that refreshes does so in the background and
/// serves what it has.
pub trait CredentialSource: Send + Sync {
    fn current(&self) -> Result<Credentials, String>;
}

/// Fixed values from configuration (a mounted Secret, for now).
#[derive(Debug, Clone, Default)]
pub struct StaticCredentials(pub Credentials);

impl CredentialSource for StaticCredentials {
    fn current(&self) -> Result<Credentials, String> {
        if self.0.values.is_empty() {
            return Err("no credentials are configured for this provider".to_string());
        }
        Ok(self.0.clone())
    }
}
