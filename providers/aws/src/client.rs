//! The EC2 client: the SDK over wasi:http, with wstd's sleep for retries and
//! timeouts, and the host's credentials.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::future;
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::config::timeout::TimeoutConfig;
use aws_sdk_ec2::config::{
    BehaviorVersion, Credentials, IdentityCache, ProvideCredentials, Region, SharedAsyncSleep,
};
use aws_smithy_wasm::wasi::{WasiHttpClientBuilder, WasiSleep};
use ipam_provider_sdk::{get_credentials, Error};

use crate::settings::Settings;

pub fn build(settings: &Settings) -> aws_sdk_ec2::Client {
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_millis(settings.attempt_timeout_ms))
        .operation_attempt_timeout(Duration::from_millis(settings.attempt_timeout_ms))
        .operation_timeout(Duration::from_millis(settings.operation_timeout_ms))
        .build();
    let mut config = aws_sdk_ec2::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(settings.region.clone()))
        .http_client(WasiHttpClientBuilder::new().build())
        .sleep_impl(SharedAsyncSleep::new(WasiSleep))
        .retry_config(RetryConfig::standard().with_max_attempts(settings.max_attempts))
        .timeout_config(timeouts)
        .credentials_provider(HostCredentials)
        // The host caches credentials and refreshes them before they expire;
        // a second cache here would only hold on to stale ones.
        .identity_cache(IdentityCache::no_cache());
    if let Some(endpoint) = &settings.endpoint {
        config = config.endpoint_url(endpoint.trim_end_matches('/'));
    }
    aws_sdk_ec2::Client::from_conf(config.build())
}

/// Credentials from the host's `get-credentials`, asked for on every request.
#[derive(Debug)]
struct HostCredentials;

impl ProvideCredentials for HostCredentials {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::ready(load().map_err(CredentialsError::not_loaded))
    }
}

fn load() -> Result<Credentials, String> {
    let credentials = get_credentials().map_err(|why| format!("the host has none: {why}"))?;
    let value = |key: &str| {
        credentials
            .values
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let access_key_id = value("access-key-id")
        .ok_or("the host's credentials have no access-key-id (is --credentials-source aws set?)")?;
    let secret_access_key =
        value("secret-access-key").ok_or("the host's credentials have no secret-access-key")?;
    let expiry = credentials
        .expires_at
        .map(|seconds| UNIX_EPOCH + Duration::from_secs(seconds));
    Ok(Credentials::new(
        access_key_id,
        secret_access_key,
        value("session-token"),
        expiry,
        "ipam-operator-host",
    ))
}

/// Fail early, and as `unauthorized`, when the host has no usable
/// credentials (the SDK would report it as a request it could not build).
pub fn check_credentials() -> Result<(), Error> {
    let credentials =
        load().map_err(|why| Error::Unauthorized(format!("AWS credentials: {why}")))?;
    match credentials.expiry() {
        Some(expiry) if expiry <= SystemTime::now() => Err(Error::Unauthorized(
            "AWS credentials: the host's credentials have expired".to_string(),
        )),
        _ => Ok(()),
    }
}
