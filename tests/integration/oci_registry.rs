//! Provider modules from an OCI registry: a stub registry on 127.0.0.1
//! (plain HTTP, named as a loopback registry) with a bearer-token challenge
//! and a redirected blob, serving the mock component. What runs is what the
//! digest pinned; a tampered layer is refused; a second pull comes from the
//! cache; the token is asked with the login of the credentials file, as
//! ECR and ACR expect. The real registry with TLS and a password is in
//! `private_registry`.

use ipam_tests as common;

use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use ipam_provider_module::sha256_hex;
use ipam_provider_runtime::oci::{pull, OciError, OciReference, RegistryAccess};
use ipam_provider_runtime::registry_logins::{Login, RegistryLogins};
use ipam_provider_runtime::TrustRoots;

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

struct Registry {
    manifest: Bytes,
    blob: Bytes,
    requests: AtomicUsize,
    port: AtomicU16,
    /// The `Authorization` the token endpoint wants (None: anonymous).
    token_login: Option<String>,
    /// The token requests' queries.
    token_queries: std::sync::Mutex<Vec<String>>,
}

impl Registry {
    fn answer(&self, request: &common::StubRequest) -> Response<Full<Bytes>> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let port = self.port.load(Ordering::SeqCst);
        let path = request.path.as_str();
        let authorized = request
            .headers
            .get("authorization")
            .is_some_and(|v| v == "Bearer t0k");
        let reply = |status: StatusCode, body: Bytes| {
            Response::builder()
                .status(status)
                .body(Full::new(body))
                .unwrap()
        };
        if path == "/token" {
            self.token_queries
                .lock()
                .unwrap()
                .push(request.query.clone());
            let sent = request.headers.get("authorization").map(|v| v.as_bytes());
            if let Some(wanted) = &self.token_login {
                if sent != Some(wanted.as_bytes()) {
                    return reply(StatusCode::UNAUTHORIZED, Bytes::new());
                }
            }
            return reply(StatusCode::OK, Bytes::from_static(br#"{"token": "t0k"}"#));
        }
        if path.starts_with("/storage/") {
            return reply(StatusCode::OK, self.blob.clone());
        }
        if !authorized {
            return Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header(
                    "www-authenticate",
                    format!(r#"Bearer realm="http://127.0.0.1:{port}/token",service="stub",scope="repository:providers/mock:pull""#),
                )
                .body(Full::new(Bytes::new()))
                .unwrap();
        }
        if path.contains("/manifests/") {
            return reply(StatusCode::OK, self.manifest.clone());
        }
        if path.contains("/blobs/") {
            return Response::builder()
                .status(StatusCode::TEMPORARY_REDIRECT)
                .header("location", format!("http://127.0.0.1:{port}/storage/blob"))
                .body(Full::new(Bytes::new()))
                .unwrap();
        }
        reply(StatusCode::NOT_FOUND, Bytes::new())
    }
}

/// A registry serving `blob` as the layer of a manifest for `module`,
/// handing tokens to anyone.
async fn registry(module: &[u8], blob: &[u8]) -> (Arc<Registry>, OciReference) {
    registry_with_login(module, blob, None).await
}

/// [`registry`] whose token endpoint wants `login`.
async fn registry_with_login(
    module: &[u8],
    blob: &[u8],
    login: Option<&Login>,
) -> (Arc<Registry>, OciReference) {
    let layer = sha256(module);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": sha256(b"{}"), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": layer, "size": module.len()}]
    }))
    .unwrap();
    let registry = Arc::new(Registry {
        manifest: Bytes::from(manifest.clone()),
        blob: Bytes::copy_from_slice(blob),
        requests: AtomicUsize::new(0),
        port: AtomicU16::new(0),
        token_login: login.map(Login::basic_authorization),
        token_queries: Default::default(),
    });
    let serving = registry.clone();
    let address = common::stub_server(move |request| serving.answer(&request)).await;
    // The registry's answers name its own port (token realm, redirects).
    let port = address.port();
    registry.port.store(port, Ordering::SeqCst);
    let reference = format!(
        "oci://127.0.0.1:{port}/providers/mock@{}",
        sha256(&manifest)
    )
    .parse()
    .unwrap();
    (registry, reference)
}

/// The stub's registry over plain HTTP, anonymous.
fn plain(reference: &OciReference) -> RegistryAccess {
    RegistryAccess::new(TrustRoots::webpki())
        .with_plain_http(std::slice::from_ref(&reference.registry))
        .expect("127.0.0.1 is loopback")
}

#[tokio::test]
async fn a_pinned_module_is_pulled_verified_and_cached() {
    let module = common::component("mock");
    let (registry, reference) = registry(&module, &module).await;
    let cache = tempfile::tempdir().unwrap();
    let pulled = pull(&reference, cache.path(), &plain(&reference))
        .await
        .expect("pulled");
    assert_eq!(pulled, module);
    let asked = registry.requests.load(Ordering::SeqCst);
    assert!(
        asked >= 5,
        "challenge, token, manifest, blob, redirect: {asked}"
    );
    // It loads and answers like the file it came from.
    let provider = common::runtime()
        .load(
            &pulled,
            common::config(&common::json(common::MOCK_SETTINGS)),
        )
        .await
        .expect("loads");
    assert_eq!(ipam_cloud::CloudApi::info(&provider).name, "mock");
    // The second pull is the cache's.
    assert_eq!(
        pull(&reference, cache.path(), &plain(&reference))
            .await
            .unwrap(),
        module
    );
    assert_eq!(registry.requests.load(Ordering::SeqCst), asked);
}

#[tokio::test]
async fn a_tampered_layer_or_another_manifest_is_refused() {
    let module = common::component("mock");
    let mut tampered = module.clone();
    tampered[100] ^= 1;
    let (_registry, reference) = registry(&module, &tampered).await;
    let cache = tempfile::tempdir().unwrap();
    assert!(matches!(
        pull(&reference, cache.path(), &plain(&reference)).await,
        Err(OciError::DigestMismatch { .. })
    ));
    // A reference pinning some other manifest than the registry serves.
    let (_registry, good) = registry(&module, &module).await;
    let other = OciReference {
        digest: sha256(b"not the manifest"),
        ..good
    };
    assert!(matches!(
        pull(&other, cache.path(), &plain(&other)).await,
        Err(OciError::DigestMismatch { .. })
    ));
}

#[tokio::test]
async fn the_token_is_asked_with_the_login_for_the_registry() {
    let module = common::component("mock");
    let login = Login::new("AWS", "ecr-password");
    let (registry, reference) = registry_with_login(&module, &module, Some(&login)).await;
    let logins = |login: Login| RegistryLogins::new([(reference.registry.clone(), login)]);
    let cache = tempfile::tempdir().unwrap();
    let pulled = pull(
        &reference,
        cache.path(),
        &plain(&reference).with_logins(logins(login.clone())),
    )
    .await
    .expect("pulled with the login");
    assert_eq!(pulled, module);
    assert_eq!(
        registry.token_queries.lock().unwrap()[0],
        "service=stub&scope=repository:providers/mock:pull"
    );
    // Without a login, or with another password, the token is refused and
    // the error says which.
    let empty = tempfile::tempdir().unwrap();
    let error = pull(&reference, empty.path(), &plain(&reference))
        .await
        .expect_err("no login");
    assert!(
        matches!(error, OciError::NoCredentials { ref challenge, .. } if challenge == "Bearer"),
        "{error}"
    );
    let error = pull(
        &reference,
        empty.path(),
        &plain(&reference).with_logins(logins(Login::new("AWS", "expired"))),
    )
    .await
    .expect_err("a wrong password");
    assert!(
        matches!(error, OciError::Refused { ref username, .. } if username == "AWS"),
        "{error}"
    );
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_loopback_registry_not_named_for_plain_http_is_spoken_to_over_https() {
    let module = common::component("mock");
    let (registry, reference) = registry(&module, &module).await;
    let cache = tempfile::tempdir().unwrap();
    let error = pull(
        &reference,
        cache.path(),
        &RegistryAccess::new(TrustRoots::webpki()),
    )
    .await
    .expect_err("a plain HTTP server does not answer a TLS handshake");
    assert!(
        matches!(error, OciError::Http { ref url, .. } if url.starts_with("https://127.0.0.1:")),
        "{error}"
    );
    assert_eq!(registry.requests.load(Ordering::SeqCst), 0);
}
