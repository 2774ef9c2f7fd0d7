//! Why a call on a cloud failed: the provider's own typed error, the host
//! stopping a misbehaving or unreachable provider, or the host refusing an
//! answer it cannot believe.

use std::time::Duration;

use crate::answer::BadField;

/// The typed error a provider returned (the WIT `error` variant).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("throttled (retry after {0:?})")]
    Throttled(Duration),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("interface limit: {0}")]
    InterfaceLimit(String),
    #[error("address limit: {0}")]
    AddressLimit(String),
    #[error("subnet full: {0}")]
    SubnetFull(String),
    #[error("insufficient prefixes: {0}")]
    InsufficientPrefixes(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    #[error("transient: {0}")]
    Transient(String),
    #[error("{0}")]
    Other(String),
}

/// Why a call on a cloud failed. Only [`CloudError::Provider`] comes from the
/// provider's own logic; the others are the host stopping a misbehaving or
/// unreachable provider. None of them is fatal to the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudError {
    #[error("provider {provider}: {error}")]
    Provider {
        provider: String,
        error: ProviderError,
    },
    #[error("provider {provider} trapped in {operation}: {message}")]
    Trap {
        provider: String,
        operation: &'static str,
        message: String,
    },
    #[error("provider {provider} did not finish {operation} within {limit:?}")]
    Timeout {
        provider: String,
        operation: &'static str,
        limit: Duration,
    },
    #[error("provider {provider} exceeded its memory cap of {limit_bytes} bytes in {operation}")]
    MemoryLimit {
        provider: String,
        operation: &'static str,
        limit_bytes: usize,
    },
    #[error("provider {provider}: egress to {destination} denied: {reason}")]
    EgressDenied {
        provider: String,
        destination: String,
        reason: String,
    },
    #[error("provider {provider}: host error in {operation}: {message}")]
    Host {
        provider: String,
        operation: &'static str,
        message: String,
    },
    /// The provider answered something malformed or impossible; none of it
    /// was believed.
    #[error("provider {provider} answered {operation} with a bad {}: {}", bad.field, bad.detail)]
    BadAnswer {
        provider: String,
        operation: &'static str,
        bad: BadField,
    },
}

/// Every value [`CloudError::response_code`] (or a success, `ok`) can take.
pub const RESPONSE_CODES: &[&str] = &[
    "ok",
    "throttled",
    "not-found",
    "interface-limit",
    "address-limit",
    "subnet-full",
    "insufficient-prefixes",
    "conflict",
    "invalid-argument",
    "unauthorized",
    "transient",
    "other",
    "trap",
    "timeout",
    "memory-limit",
    "egress-denied",
    "host",
    "bad-answer",
];

impl CloudError {
    /// A short label for metrics: the WIT error case, or what the host did.
    pub fn response_code(&self) -> &'static str {
        match self {
            CloudError::Provider { error, .. } => match error {
                ProviderError::Throttled(_) => "throttled",
                ProviderError::NotFound(_) => "not-found",
                ProviderError::InterfaceLimit(_) => "interface-limit",
                ProviderError::AddressLimit(_) => "address-limit",
                ProviderError::SubnetFull(_) => "subnet-full",
                ProviderError::InsufficientPrefixes(_) => "insufficient-prefixes",
                ProviderError::Conflict(_) => "conflict",
                ProviderError::InvalidArgument(_) => "invalid-argument",
                ProviderError::Unauthorized(_) => "unauthorized",
                ProviderError::Transient(_) => "transient",
                ProviderError::Other(_) => "other",
            },
            CloudError::Trap { .. } => "trap",
            CloudError::Timeout { .. } => "timeout",
            CloudError::MemoryLimit { .. } => "memory-limit",
            CloudError::EgressDenied { .. } => "egress-denied",
            CloudError::Host { .. } => "host",
            CloudError::BadAnswer { .. } => "bad-answer",
        }
    }

    /// The provider's typed error, when that is what this is.
    pub fn provider_error(&self) -> Option<&ProviderError> {
        match self {
            CloudError::Provider { error, .. } => Some(error),
            _ => None,
        }
    }
}
