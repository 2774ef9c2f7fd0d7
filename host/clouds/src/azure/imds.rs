//! The Azure Instance Metadata Service: one GET of
//! `<endpoint>/metadata/instance?api-version=2021-02-01` carrying
//! `Metadata: true` (IMDS answers 400 without it, and refuses any request
//! carrying `X-Forwarded-For`, which this client never sends), bounded by a
//! timeout. No retry: the caller (the node agent's registration) decides
//! whether and when to ask again.

use std::time::Duration;

use bytes::Bytes;
use http::Method;
use ipam_http_client::{request, TrustRoots};

use super::instance_facts::{AzureInstanceFacts, AzureInstanceFactsError};

/// The API version whose instance document [`AzureInstanceFacts`] reads.
pub const API_VERSION: &str = "2021-02-01";
/// IMDS's address inside every Azure VM.
pub const DEFAULT_ENDPOINT: &str = "http://169.254.169.254";
/// How long one request may take (IMDS answers locally, from the host).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The most of an error answer's body an error carries.
const ERROR_BODY_CHARS: usize = 200;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AzureImdsError {
    #[error("Azure IMDS {url}: {message}")]
    Request { url: String, message: String },
    #[error("Azure IMDS {url}: no answer within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("Azure IMDS {url}: HTTP {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error(transparent)]
    Facts(#[from] AzureInstanceFactsError),
}

/// An Azure IMDS endpoint.
#[derive(Debug, Clone)]
pub struct AzureImds {
    base: String,
    timeout: Duration,
    /// Plain http on Azure; the roots serve an https endpoint put in its
    /// place.
    trust: TrustRoots,
}

impl Default for AzureImds {
    fn default() -> Self {
        Self::new(DEFAULT_ENDPOINT, TrustRoots::webpki())
    }
}

impl AzureImds {
    /// `endpoint` is `scheme://host[:port]` (a local stub in tests).
    pub fn new(endpoint: &str, trust: TrustRoots) -> Self {
        Self {
            base: endpoint.trim_end_matches('/').to_string(),
            timeout: DEFAULT_TIMEOUT,
            trust,
        }
    }

    pub fn with_timeout(self, timeout: Duration) -> Self {
        Self { timeout, ..self }
    }

    /// The instance document, read and checked.
    pub async fn instance_facts(&self) -> Result<AzureInstanceFacts, AzureImdsError> {
        let url = format!("{}/metadata/instance?api-version={API_VERSION}", self.base);
        let answer = tokio::time::timeout(
            self.timeout,
            request(
                &self.trust,
                Method::GET,
                &url,
                &[("Metadata", "true".into())],
                Bytes::new(),
            ),
        )
        .await
        .map_err(|_| AzureImdsError::Timeout {
            url: url.clone(),
            timeout: self.timeout,
        })?
        .map_err(|e| AzureImdsError::Request {
            url: url.clone(),
            message: e.message,
        })?;
        if !answer.status.is_success() {
            return Err(AzureImdsError::Status {
                url,
                status: answer.status.as_u16(),
                body: String::from_utf8_lossy(&answer.body)
                    .chars()
                    .take(ERROR_BODY_CHARS)
                    .collect(),
            });
        }
        Ok(AzureInstanceFacts::from_json(&answer.body)?)
    }
}
