//! The EC2 client: the SDK over wasi:http, with wstd's sleep for retries and
//! timeouts, and the host's credentials.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::future;
use aws_sdk_ec2::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::config::timeout::TimeoutConfig;
use aws_sdk_ec2::config::{
    BehaviorVersion, ConfigBag, Credentials, IdentityCache, Intercept, ProvideCredentials, Region,
    RuntimeComponents, SharedAsyncSleep,
};
use aws_sdk_ec2::error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_wasm::wasi::{WasiHttpClientBuilder, WasiSleep};
use ipam_provider_sdk::{get_credentials, Error};

use crate::ec2_actions;
use crate::settings::Settings;

pub fn build(settings: &Settings) -> aws_sdk_ec2::Client {
    aws_sdk_ec2::Client::from_conf(config(settings).build())
}

/// The client's configuration: wasi:http, wstd's sleep, the host's
/// credentials, the settings' retries, timeouts and endpoint, and the
/// action list's guard.
fn config(settings: &Settings) -> aws_sdk_ec2::config::Builder {
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
        .identity_cache(IdentityCache::no_cache())
        .interceptor(ListedActionsOnly);
    if let Some(endpoint) = &settings.endpoint {
        config = config.endpoint_url(endpoint.trim_end_matches('/'));
    }
    config
}

/// Refuses, before it is serialized or sent, a request for an EC2 action
/// missing from `ec2_actions::SENT`, the list the IAM policy is checked
/// against.
#[derive(Debug)]
struct ListedActionsOnly;

impl Intercept for ListedActionsOnly {
    fn name(&self) -> &'static str {
        "ListedActionsOnly"
    }

    fn read_before_serialization(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let action = cfg
            .load::<Metadata>()
            .map(Metadata::name)
            .ok_or("the SDK named no operation for this request")?;
        ec2_actions::check(action)?;
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    //! The client as `config` makes it, with a recording HTTP client in
    //! place of wasi:http, a sleep that never ends in place of wstd's, and
    //! fixed credentials in place of the host's.

    use std::future::Future;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Waker};

    use aws_sdk_ec2::config::{AsyncSleep, HttpClient, Sleep};
    use aws_smithy_runtime_api::client::http::{
        HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
    };
    use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
    use aws_smithy_runtime_api::http::{Response, StatusCode};
    use aws_smithy_types::body::SdkBody;

    use super::*;

    /// Answers every request with an empty DescribeVpcs page and keeps the
    /// `Action=` of each.
    #[derive(Debug, Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl Recorder {
        fn actions(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    impl HttpConnector for Recorder {
        fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
            let body = String::from_utf8_lossy(request.body().bytes().unwrap_or_default());
            let action = body
                .split('&')
                .find_map(|pair| pair.strip_prefix("Action="))
                .unwrap_or("none")
                .to_string();
            self.0.lock().unwrap().push(action);
            let page = "<DescribeVpcsResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><vpcSet/></DescribeVpcsResponse>";
            let response = Response::new(StatusCode::try_from(200).unwrap(), SdkBody::from(page));
            HttpConnectorFuture::ready(Ok(response))
        }
    }

    impl HttpClient for Recorder {
        fn http_connector(
            &self,
            _settings: &HttpConnectorSettings,
            _components: &RuntimeComponents,
        ) -> SharedHttpConnector {
            SharedHttpConnector::new(self.clone())
        }
    }

    /// The recorder answers at once: no timeout may fire.
    #[derive(Debug)]
    struct NeverWakes;

    impl AsyncSleep for NeverWakes {
        fn sleep(&self, _duration: Duration) -> Sleep {
            Sleep::new(std::future::pending())
        }
    }

    /// Polls a future whose I/O is all ready to its end.
    fn finish<F: Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut context = Context::from_waker(Waker::noop());
        for _ in 0..1000 {
            if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
                return output;
            }
        }
        panic!("the request did not finish on a recorder that answers at once");
    }

    fn client(recorder: &Recorder) -> aws_sdk_ec2::Client {
        let settings = Settings::parse(r#"{"region": "us-east-1"}"#).unwrap();
        let conf = config(&settings)
            .http_client(recorder.clone())
            .sleep_impl(SharedAsyncSleep::new(NeverWakes))
            .credentials_provider(Credentials::new("AKID", "SECRET", None, None, "test"))
            .build();
        aws_sdk_ec2::Client::from_conf(conf)
    }

    #[test]
    fn a_listed_action_is_sent() {
        let recorder = Recorder::default();
        let answer = finish(client(&recorder).describe_vpcs().send());
        assert!(answer.is_ok(), "{answer:?}");
        assert_eq!(recorder.actions(), ["DescribeVpcs"]);
    }

    #[test]
    fn an_unlisted_action_is_refused_before_anything_is_sent() {
        let recorder = Recorder::default();
        let answer = finish(client(&recorder).describe_tags().send());
        let error = crate::errors::from_sdk("DescribeTags", answer.unwrap_err());
        let text = format!("{error:?}");
        assert!(
            text.contains("EC2 action DescribeTags is not in the provider's action list"),
            "{text}"
        );
        assert!(recorder.actions().is_empty(), "{:?}", recorder.actions());
    }
}
