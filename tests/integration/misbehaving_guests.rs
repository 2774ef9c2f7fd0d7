//! Each deliberately bad guest gives its own typed error, and the same host
//! then serves a good call on the same provider.

use ipam_tests as common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{component, config, misbehave, runtime, still_serves};
use ipam_cloud::credentials::{Credentials, StaticCredentials};
use ipam_cloud::{CloudApi, CloudError, ProviderError};
use ipam_provider_module::ModuleError;
use ipam_provider_runtime::egress::EgressError;
use ipam_provider_runtime::resolve::StaticResolver;
use ipam_provider_runtime::special_address::{Special, SpecialKind};
use ipam_provider_runtime::{LoadError, ProviderRuntime, RuntimeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn trap_is_reported_with_the_guest_panic_and_the_instance_replaced() {
    let provider = misbehave(serde_json::json!({"mode": "trap"}), |_| {}).await;
    let created = provider.instances_created();
    match provider.get_vpcs().await {
        Err(CloudError::Trap {
            operation, message, ..
        }) => {
            assert_eq!(operation, "get-vpcs");
            assert!(
                message.contains("deliberate trap"),
                "the guest's panic message is in the error: {message}"
            );
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    still_serves(&provider).await;
    assert_eq!(
        provider.instances_created(),
        created + 1,
        "the trapped instance was replaced by a fresh one"
    );
}

#[tokio::test]
async fn an_endless_loop_times_out() {
    let provider = misbehave(serde_json::json!({"mode": "loop"}), |c| {
        c.limits.timeout = Duration::from_millis(300)
    })
    .await;
    assert!(
        matches!(
            provider.get_vpcs().await,
            Err(CloudError::Timeout {
                operation: "get-vpcs",
                ..
            })
        ),
        "an endless loop is a timeout"
    );
    still_serves(&provider).await;
}

#[tokio::test]
async fn unbounded_memory_growth_hits_the_cap() {
    let provider = misbehave(serde_json::json!({"mode": "grow-memory"}), |c| {
        c.limits.memory_bytes = 32 << 20
    })
    .await;
    match provider.get_vpcs().await {
        Err(CloudError::MemoryLimit { limit_bytes, .. }) => assert_eq!(limit_bytes, 32 << 20),
        other => panic!("expected the memory limit, got {other:?}"),
    }
    still_serves(&provider).await;
}

#[tokio::test]
async fn a_host_not_on_the_allow_list_is_denied() {
    let settings = serde_json::json!({"mode": "fetch", "url": "http://127.0.0.1:9/"});
    let provider = misbehave(settings, |c| c.egress = vec!["http://127.0.0.1:10".into()]).await;
    match provider.get_vpcs().await {
        Err(CloudError::EgressDenied {
            destination,
            reason,
            ..
        }) => {
            assert!(
                destination.starts_with("http://127.0.0.1:9"),
                "{destination}"
            );
            assert!(
                reason.contains("not on the provider's egress allow-list"),
                "{reason}"
            );
        }
        other => panic!("expected egress denied, got {other:?}"),
    }
    still_serves(&provider).await;
}

#[tokio::test]
async fn the_metadata_address_is_denied_even_when_allow_listed() {
    let settings =
        serde_json::json!({"mode": "fetch", "url": "http://169.254.169.254/latest/meta-data/"});
    let provider = misbehave(settings, |c| {
        c.egress = vec!["http://169.254.169.254".into()]
    })
    .await;
    match provider.get_vpcs().await {
        Err(CloudError::EgressDenied { reason, .. }) => {
            let expected = EgressError::ForbiddenAddress {
                address: "169.254.169.254".parse().unwrap(),
                why: Special {
                    kind: SpecialKind::LinkLocalV4,
                    carried: None,
                },
            };
            assert_eq!(reason, expected.to_string());
        }
        other => panic!("expected egress denied, got {other:?}"),
    }
    still_serves(&provider).await;
}

fn resolving(name: &str, address: &str) -> Arc<StaticResolver> {
    Arc::new(StaticResolver(
        [(name.to_string(), vec![address.parse().unwrap()])].into(),
    ))
}

/// A server on 127.0.0.1 that answers one request with `200 hello` and
/// returns what it received.
async fn one_response_server() -> (u16, tokio::task::JoinHandle<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buffer = vec![0u8; 4096];
        let n = socket.read(&mut buffer).await.unwrap();
        let response = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello";
        socket.write_all(response).await.unwrap();
        String::from_utf8_lossy(&buffer[..n]).to_string()
    });
    (port, server)
}

/// A server on 127.0.0.1 that accepts one connection, reads the request,
/// hands it over and never answers; the connection stays open until the
/// returned task is aborted.
async fn silent_server() -> (
    u16,
    tokio::sync::oneshot::Receiver<String>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (read, request) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buffer = vec![0u8; 4096];
        let n = socket.read(&mut buffer).await.unwrap();
        let _ = read.send(String::from_utf8_lossy(&buffer[..n]).to_string());
        std::future::pending::<()>().await;
        drop(socket);
    });
    (port, request, server)
}

#[tokio::test]
async fn a_guest_blocked_on_a_server_that_never_answers_is_stopped_by_the_call_deadline() {
    let (port, request, server) = silent_server().await;
    let limit = Duration::from_secs(1);
    let settings =
        serde_json::json!({"mode": "fetch", "url": format!("http://127.0.0.1:{port}/hang")});
    let provider = misbehave(settings, |c| {
        c.egress = vec![format!("http://127.0.0.1:{port}")];
        c.limits.timeout = limit;
    })
    .await;
    let created = provider.instances_created();
    let started = Instant::now();
    let outcome = provider.get_vpcs().await;
    let took = started.elapsed();
    match outcome {
        Err(CloudError::Timeout {
            operation: "get-vpcs",
            limit: reported,
            ..
        }) => assert_eq!(reported, limit),
        other => panic!("expected the call's deadline, got {other:?}"),
    }
    // The pinned sender would give up on its own only after 30 s without a
    // first byte: ending well before that means the call's deadline did it.
    assert!(
        took < Duration::from_secs(15),
        "the call ended only after {took:?}"
    );
    let request = request.await.expect("the server read a request");
    assert!(
        request.starts_with("GET /hang HTTP/1.1"),
        "the guest was waiting on the answer, not on the connection: {request}"
    );
    still_serves(&provider).await;
    assert_eq!(
        provider.instances_created(),
        created + 1,
        "the stopped instance was replaced by a fresh one"
    );
    server.abort();
}

#[tokio::test]
async fn an_allow_listed_name_that_resolves_to_a_metadata_address_is_denied() {
    let settings = serde_json::json!({"mode": "fetch", "url": "http://metadata.test/latest/"});
    let provider = misbehave(settings, |c| {
        c.egress = vec!["http://metadata.test".into()];
        c.resolver = resolving("metadata.test", "169.254.169.254");
    })
    .await;
    match provider.get_vpcs().await {
        Err(CloudError::EgressDenied { reason, .. }) => {
            assert!(
                reason.starts_with("169.254.169.254 is link-local"),
                "{reason}"
            )
        }
        other => panic!("expected egress denied, got {other:?}"),
    }
    still_serves(&provider).await;
}

#[tokio::test]
async fn the_connection_goes_to_the_checked_address() {
    // `api.test` exists only in the provider's static table: the request can
    // reach the server only if the connection uses the address the egress
    // check resolved, not a second look-up of its own.
    let (port, server) = one_response_server().await;
    let settings =
        serde_json::json!({"mode": "fetch", "url": format!("http://api.test:{port}/pinned")});
    let provider = misbehave(settings, |c| {
        c.egress = vec![format!("http://api.test:{port}")];
        c.resolver = resolving("api.test", "127.0.0.1");
    })
    .await;
    let vpcs = provider
        .get_vpcs()
        .await
        .expect("reached through the checked address");
    assert_eq!(vpcs[0].id, "200 hello");
    let request = server.await.unwrap();
    assert!(request.starts_with("GET /pinned HTTP/1.1"), "{request}");
    assert!(
        request
            .to_ascii_lowercase()
            .contains(&format!("host: api.test:{port}")),
        "{request}"
    );
}

#[tokio::test]
async fn an_allow_listed_origin_is_reached_through_wasi_http() {
    let (port, server) = one_response_server().await;
    let settings =
        serde_json::json!({"mode": "fetch", "url": format!("http://127.0.0.1:{port}/ping")});
    let provider = misbehave(settings, |c| {
        c.egress = vec![format!("http://127.0.0.1:{port}")]
    })
    .await;
    let vpcs = provider.get_vpcs().await.expect("allowed egress works");
    assert_eq!(vpcs[0].id, "200 hello");
    let request = server.await.unwrap();
    assert!(request.starts_with("GET /ping HTTP/1.1"), "{request}");
}

#[tokio::test]
async fn credentials_reach_the_guest_through_the_host_import() {
    let settings = serde_json::json!({"mode": "credentials", "key": "access-key-id"});
    let provider = misbehave(settings, |c| {
        let values = [("access-key-id".to_string(), "AKIDEXAMPLE".to_string())].into();
        c.credentials = Arc::new(StaticCredentials(Credentials {
            values,
            expires_at: Some(4_000_000_000),
        }));
    })
    .await;
    assert_eq!(provider.get_vpcs().await.unwrap()[0].id, "AKIDEXAMPLE");
}

#[tokio::test]
async fn missing_credentials_are_the_guests_typed_error() {
    let provider = misbehave(
        serde_json::json!({"mode": "credentials", "key": "access-key-id"}),
        |_| {},
    )
    .await;
    let error = provider.get_vpcs().await.unwrap_err();
    assert!(
        matches!(error.provider_error(), Some(ProviderError::Unauthorized(_))),
        "{error}"
    );
}

#[tokio::test]
async fn bad_settings_fail_the_load_with_the_providers_message() {
    let error = runtime()
        .load(&component("misbehave"), config(r#"{"mode": "dance"}"#))
        .await
        .unwrap_err();
    match error {
        LoadError::Start(CloudError::Provider {
            error: ProviderError::InvalidArgument(message),
            ..
        }) => {
            assert!(message.contains("dance"), "{message}")
        }
        other => panic!("expected invalid-argument, got {other}"),
    }
}

async fn mock_serves_a_call() {
    let provider = common::mock(common::MOCK_SETTINGS).await;
    assert_eq!(provider.get_vpcs().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_module_for_an_unknown_wit_version_is_refused_before_compiling() {
    // A runtime of this test's own, so that no other test's compiles (they
    // share `runtime()` and run in parallel) land on the counter read here;
    // without a disk cache, any compile of this module would be counted.
    let runtime = ProviderRuntime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let error = runtime
        .load(&component("future-wit"), config("{}"))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, LoadError::Module(ModuleError::UnsupportedWitVersion { found }) if found == "0.9.0"),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("0.9.0") && message.contains("0.1.0"),
        "names both versions: {message}"
    );
    assert_eq!(runtime.compiles(), 0, "nothing was compiled");
    // The counter does count on this runtime: a served module is compiled.
    runtime
        .prepare(&component("misbehave"))
        .expect("misbehave is prepared");
    assert_eq!(runtime.compiles(), 1);
    mock_serves_a_call().await;
}

#[tokio::test]
async fn a_file_that_is_not_wasm_is_refused() {
    let error = runtime()
        .load(b"#!/bin/sh\necho not wasm\n", config("{}"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, LoadError::Module(ModuleError::NotWasm)),
        "{error}"
    );
    mock_serves_a_call().await;
}
