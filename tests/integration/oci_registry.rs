//! Provider modules from an OCI registry: a stub registry on 127.0.0.1 with
//! a bearer-token challenge and a redirected blob, serving the mock
//! component. What runs is what the digest pinned; a tampered layer is
//! refused; a second pull comes from the cache.

use ipam_tests as common;

use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use ipam_provider_module::sha256_hex;
use ipam_provider_runtime::oci::{pull, OciError, OciReference};
use ipam_provider_runtime::TrustRoots;

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

struct Registry {
    manifest: Bytes,
    blob: Bytes,
    requests: AtomicUsize,
    port: AtomicU16,
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

/// A registry serving `blob` as the layer of a manifest for `module`.
async fn registry(module: &[u8], blob: &[u8]) -> (Arc<Registry>, OciReference) {
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

#[tokio::test]
async fn a_pinned_module_is_pulled_verified_and_cached() {
    let module = common::component("mock");
    let (registry, reference) = registry(&module, &module).await;
    let cache = tempfile::tempdir().unwrap();
    let pulled = pull(&reference, cache.path(), &TrustRoots::webpki())
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
        pull(&reference, cache.path(), &TrustRoots::webpki())
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
        pull(&reference, cache.path(), &TrustRoots::webpki()).await,
        Err(OciError::DigestMismatch { .. })
    ));
    // A reference pinning some other manifest than the registry serves.
    let (_registry, good) = registry(&module, &module).await;
    let other = OciReference {
        digest: sha256(b"not the manifest"),
        ..good
    };
    assert!(matches!(
        pull(&other, cache.path(), &TrustRoots::webpki()).await,
        Err(OciError::DigestMismatch { .. })
    ));
}
