//! Fixtures of the integration tests and benchmarks, one of each: the
//! components built by `cargo xtask providers`, one provider runtime per
//! process, provider configs, nodes, engine parts, stub HTTP servers, an ARM
//! stub (`arm_stub`), a recording proxy, moto, a fake Kubernetes API
//! server, a real OCI registry with TLS and a password (`registry`), and
//! Cilium's operator metrics to check a `/metrics` page against
//! (`cilium_metrics`).

pub mod arm_stub;
pub mod cilium_metrics;
pub mod ec2_proxy;
pub mod moto;
pub mod registry;
pub mod registry_token;

pub use ipam_fake_apiserver as fake_apiserver;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use ipam_ciliumnode::CiliumNode;
use ipam_cloud::CloudApi;
use ipam_engine::{InstanceCache, Maintainer, MaintenanceSettings, MemoryNodeStore, Metrics};
use ipam_provider_runtime::{
    CallLimits, ProviderConfig, ProviderRuntime, RuntimeConfig, WasmProvider,
};

/// Where `cargo xtask providers` put the components: `$IPAM_COMPONENTS_DIR`,
/// else `target/components` of this checkout.
pub fn components_dir() -> PathBuf {
    match std::env::var_os("IPAM_COMPONENTS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/components"),
    }
}

/// A built component's bytes. Fails loudly when the build step was skipped.
pub fn component(name: &str) -> Vec<u8> {
    let path: PathBuf = components_dir().join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}. Build the components first: cargo xtask providers (cargo xtask test does)",
            path.display()
        )
    })
}

/// One runtime (engine, linker, compile cache) for the whole test binary.
pub fn runtime() -> &'static ProviderRuntime {
    static RUNTIME: OnceLock<(tempfile::TempDir, ProviderRuntime)> = OnceLock::new();
    let (_, runtime) = RUNTIME.get_or_init(|| {
        let cache = tempfile::tempdir().expect("temp dir");
        let config = RuntimeConfig {
            cache_dir: Some(cache.path().to_path_buf()),
            ..RuntimeConfig::default()
        };
        let runtime = ProviderRuntime::new(config).expect("runtime");
        (cache, runtime)
    });
    runtime
}

pub fn config(settings: &str) -> ProviderConfig {
    let mut config = ProviderConfig::new(settings);
    config.limits = CallLimits {
        timeout: Duration::from_secs(2),
        memory_bytes: 64 << 20,
        ..CallLimits::default()
    };
    config
}

pub const MOCK_SETTINGS: &str = include_str!("../../providers/mock/default-settings.yaml");

/// The misbehave component with these settings, its config adjusted first.
pub async fn misbehave(
    settings: serde_json::Value,
    adjust: impl FnOnce(&mut ProviderConfig),
) -> WasmProvider {
    let mut config = config(&settings.to_string());
    adjust(&mut config);
    runtime()
        .load(&component("misbehave"), config)
        .await
        .expect("misbehave loads")
}

/// The good call a misbehave test makes after the bad one, on the same
/// provider.
pub async fn still_serves(provider: &WasmProvider) {
    let subnets = provider
        .get_subnets()
        .await
        .expect("a good call after a bad one succeeds");
    assert_eq!(subnets.len(), 1, "the behaving guest's one subnet");
}

/// The value of credential `key` a guest got from `source` through the host
/// import (the misbehave guest in credentials mode answers get-vpcs with it).
pub async fn credential_seen_by_guest(
    source: std::sync::Arc<dyn ipam_cloud::credentials::CredentialSource>,
    key: &str,
) -> String {
    let settings = serde_json::json!({"mode": "credentials", "key": key});
    let provider = misbehave(settings, |config| config.credentials = source).await;
    provider
        .get_vpcs()
        .await
        .expect("credentials reached the guest")[0]
        .id
        .clone()
}

/// Loading `component` with each of these settings fails as invalid
/// argument, the error (causes included) mentioning the setting named.
pub async fn assert_settings_refused(component_name: &str, cases: &[(serde_json::Value, &str)]) {
    for (settings, mentions) in cases {
        let mut config = config(&settings.to_string());
        config.limits.timeout = Duration::from_secs(30);
        let error = runtime()
            .load(&component(component_name), config)
            .await
            .err()
            .unwrap_or_else(|| panic!("{settings} was accepted"));
        let text = format!("{error:#}");
        assert!(
            text.contains("invalid argument") && text.contains(mentions),
            "{settings}: {text}"
        );
    }
}

/// Provider settings from YAML, as JSON text (what providers receive).
pub fn json(yaml: &str) -> String {
    ipam_provider_runtime::settings_json(yaml).expect("test settings are YAML")
}

pub async fn mock(settings_yaml: &str) -> WasmProvider {
    runtime()
        .load(&component("mock"), config(&json(settings_yaml)))
        .await
        .expect("mock loads")
}

/// A node of `instance` with pre-allocate `pre_allocate`, otherwise as
/// cilium-agent in ENI mode registers it (`"azure": {}` and all).
pub fn node(name: &str, instance: &str, pre_allocate: u32) -> CiliumNode {
    let mut node = ipam_ciliumnode::go_agent::eni_node(name, instance);
    node.spec.ipam.pre_allocate = Some(pre_allocate);
    node
}

/// [`node`] as cilium-agent in Azure mode registers it (`"eni": {}` and all).
pub fn azure_node(name: &str, instance: &str, pre_allocate: u32) -> CiliumNode {
    let mut node = ipam_ciliumnode::go_agent::azure_node(name, instance);
    node.spec.ipam.pre_allocate = Some(pre_allocate);
    node
}

/// Engine settings for tests: cluster `test`, no release delay unless set.
pub fn engine_settings(prefix_delegation: bool) -> MaintenanceSettings {
    MaintenanceSettings {
        cluster_name: "test".into(),
        prefix_delegation,
        release_delay: Duration::from_secs(30),
        free_interfaces: false,
        max_steps: 20,
        ..MaintenanceSettings::default()
    }
}

/// A maintainer over `cloud` and `store` with the given cache.
pub fn maintainer(
    cloud: std::sync::Arc<dyn CloudApi>,
    cache: std::sync::Arc<InstanceCache>,
    store: std::sync::Arc<MemoryNodeStore>,
    settings: MaintenanceSettings,
) -> Maintainer {
    Maintainer::new(
        cloud,
        cache,
        store,
        settings,
        std::sync::Arc::new(Metrics::new()),
    )
}

/// The parts of a request a stub server answers from, its body read.
pub struct StubRequest {
    pub method: http::Method,
    pub path: String,
    /// The query string without its `?` (empty when none).
    pub query: String,
    pub headers: http::HeaderMap,
    pub body: bytes::Bytes,
}

/// A stub HTTP server on 127.0.0.1 answering every request with `answer`;
/// its address.
pub async fn stub_server<F>(answer: F) -> std::net::SocketAddr
where
    F: Fn(StubRequest) -> http::Response<http_body_util::Full<bytes::Bytes>>
        + Send
        + Sync
        + 'static,
{
    use http_body_util::BodyExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let address = listener.local_addr().expect("address");
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let answer = answer.clone();
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let request = StubRequest {
                                method: parts.method,
                                path: parts.uri.path().to_string(),
                                query: parts.uri.query().unwrap_or_default().to_string(),
                                headers: parts.headers,
                                body,
                            };
                            Ok::<_, std::convert::Infallible>(answer(request))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

/// Test keys handed to the AWS provider by the host.
pub const AWS_ACCESS_KEY_ID: &str = "AKIDTESTHOST";
pub const AWS_SESSION_TOKEN: &str = "session-token-from-the-host";

/// The AWS component with these settings, allowed to reach `endpoint` only,
/// with static test credentials and a deadline that fits EC2 round trips.
pub async fn aws(settings: String, endpoint: &str) -> WasmProvider {
    use ipam_cloud::credentials::{Credentials, StaticCredentials};
    let mut config = config(&settings);
    config.limits.timeout = Duration::from_secs(30);
    config.egress = vec![endpoint.to_string()];
    config.credentials = std::sync::Arc::new(StaticCredentials(Credentials {
        values: [
            ("access-key-id", AWS_ACCESS_KEY_ID),
            ("secret-access-key", "secret-from-the-host"),
            ("session-token", AWS_SESSION_TOKEN),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        expires_at: None,
    }));
    runtime()
        .load(&component("aws"), config)
        .await
        .expect("the aws component loads")
}

/// One request's form parameters (`application/x-www-form-urlencoded`, as
/// EC2's query protocol sends them), in order.
pub type FormParams = Vec<(String, String)>;

/// Decode an `application/x-www-form-urlencoded` body: pairs split on `&`
/// and `=`, `+` as a space, `%XX` escapes as bytes (invalid UTF-8 replaced).
pub fn form_params(body: &[u8]) -> FormParams {
    let decode = |text: &str| {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    match std::str::from_utf8(&bytes[i + 1..i + 3])
                        .ok()
                        .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                    {
                        Some(byte) => {
                            out.push(byte);
                            i += 3;
                            continue;
                        }
                        None => out.push(b'%'),
                    }
                }
                other => out.push(other),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (decode(key), decode(value)))
        .collect()
}

/// Addresses or networks as text, to compare with literals.
pub fn texts<T: ToString>(items: &[T]) -> Vec<String> {
    items.iter().map(ToString::to_string).collect()
}

/// The rate limits the operator keeps to for `cloud`: its declared model
/// (or the shared bucket of a provider that declares none), unadjusted.
pub fn declared_limits(cloud: &dyn CloudApi) -> ipam_cloud::rate::RateLimits {
    use ipam_cloud::rate::{RateLimits, RateSettings};
    RateLimits::of_provider(cloud.info(), &RateSettings::default())
        .expect("the provider declares a whole rate model, or none")
}
