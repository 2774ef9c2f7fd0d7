//! Entra ID tokens resolved by the host, against local stubs written from
//! Microsoft's reference documentation:
//! - Entra ID's v2.0 token endpoint (`POST /{tenant}/oauth2/v2.0/token`,
//!   client credentials grant, form encoded): with `client_secret`, or with
//!   `client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer`
//!   and the federated token as `client_assertion` (workload identity); the
//!   answer carries `token_type`, `expires_in` (a number) and
//!   `access_token`; errors are 400/401 with `error` and
//!   `error_description` (`AADSTS…`).
//! - The IMDS identity endpoint (`GET /metadata/identity/oauth2/token?
//!   api-version=2018-02-01&resource=…[&client_id=…]`), which needs
//!   `Metadata: true` (400 without) and refuses `X-Forwarded-For`; its
//!   answer has `expires_in` and `expires_on` as strings; an unknown
//!   identity is 400 `invalid_request` / "Identity not found".
//!
//! Entra ID behind a private CA (a proxy, a private authority host) is
//! reached only with that CA among the config's trust roots.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipam_cloud::credentials::CredentialSource;
use ipam_clouds::azure::credentials::{
    self, AzureCredentialConfig, AzureCredentialError, TokenAnswerError, ACCESS_TOKEN,
};
use ipam_http_client::testing::PrivateCa;
use support::{Handler, StubRequest};

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const CLIENT: &str = "6a8b9c0d-1111-2222-3333-444455556666";
const ARM_SCOPE: &str = "https://management.azure.com/.default";
const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// Long enough for a fetch over 127.0.0.1 on the slowest machine; only a
/// failing test waits it out.
const AT_MOST: Duration = Duration::from_secs(60);

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("ascii");
                out.push(u8::from_str_radix(hex, 16).expect("percent escape"));
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).expect("utf-8")
}

/// `a=b&c=d`, decoded.
fn pairs(text: &str) -> BTreeMap<String, String> {
    text.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (percent_decode(k), percent_decode(v)))
        .collect()
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn config(vars: &[(&str, &str)]) -> AzureCredentialConfig {
    AzureCredentialConfig::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
}

fn entra_error(status: u16, error: &str, description: &str) -> (u16, String) {
    (
        status,
        serde_json::json!({"error": error, "error_description": description,
            "error_codes": [7000215], "timestamp": "2026-11-25 11:00:00Z",
            "trace_id": "0000", "correlation_id": "1111"})
        .to_string(),
    )
}

/// Entra ID's token endpoint for [`TENANT`]: answers request `n` with
/// `token-<n>` valid for `lifetime(n)` seconds when `credential_ok` accepts
/// the form, else 401 invalid_client. Every accepted form is told on `seen`.
fn entra(
    credential_ok: impl Fn(&BTreeMap<String, String>) -> bool + Send + Sync + 'static,
    lifetime: impl Fn(usize) -> u64 + Send + Sync + 'static,
    seen: tokio::sync::mpsc::UnboundedSender<BTreeMap<String, String>>,
) -> Arc<Handler> {
    let count = AtomicUsize::new(0);
    Arc::new(move |request: &StubRequest| {
        if request.method != "POST" || request.target != format!("/{TENANT}/oauth2/v2.0/token") {
            return entra_error(404, "invalid_request", "AADSTS90002: Tenant not found.");
        }
        if request.header("content-type") != Some("application/x-www-form-urlencoded") {
            return entra_error(400, "invalid_request", "AADSTS900144: The request body must contain the following parameter: 'grant_type'.");
        }
        let form = pairs(&request.body);
        let grant_ok = form.get("grant_type").map(String::as_str) == Some("client_credentials")
            && form.get("client_id").map(String::as_str) == Some(CLIENT)
            && form.get("scope").map(String::as_str) == Some(ARM_SCOPE);
        if !grant_ok {
            return entra_error(400, "invalid_request", "AADSTS90014: missing field");
        }
        if !credential_ok(&form) {
            return entra_error(
                401,
                "invalid_client",
                "AADSTS7000215: Invalid client secret provided.",
            );
        }
        let _ = seen.send(form);
        let n = count.fetch_add(1, Ordering::SeqCst);
        (
            200,
            serde_json::json!({"token_type": "Bearer", "expires_in": lifetime(n),
                "ext_expires_in": lifetime(n), "access_token": format!("token-{n}")})
            .to_string(),
        )
    })
}

async fn next<T>(seen: &mut tokio::sync::mpsc::UnboundedReceiver<T>, what: &str) -> T {
    tokio::time::timeout(AT_MOST, seen.recv())
        .await
        .unwrap_or_else(|_| panic!("no {what} within {AT_MOST:?}"))
        .expect("the stub is running")
}

#[tokio::test]
async fn workload_identity_exchanges_the_token_file_and_reads_it_again_on_refresh() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("azure-identity-token");
    std::fs::write(&token_file, "eyJ.first.sig\n").unwrap();
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let valid = Arc::new(Mutex::new("eyJ.first.sig".to_string()));
    let accepted = valid.clone();
    let rotate = token_file.clone();
    let handler = entra(
        move |form| {
            form.get("client_assertion_type").map(String::as_str) == Some(JWT_BEARER)
                && form.get("client_assertion") == Some(&*accepted.lock().unwrap())
                && !form.contains_key("client_secret")
        },
        // The first token expires within the 5 minutes the refresh runs
        // ahead, so a refresh follows at once; meanwhile the kubelet rotates
        // the file and Entra ID accepts only the new token.
        move |n| {
            if n == 0 {
                *valid.lock().unwrap() = "eyJ.rotated.sig".into();
                std::fs::write(&rotate, "eyJ.rotated.sig\n").unwrap();
                300
            } else {
                3599
            }
        },
        seen_tx,
    );
    let entra = support::serve(handler).await;
    let path = token_file.display().to_string();
    let source = credentials::start(config(&[
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_FEDERATED_TOKEN_FILE", &path),
        ("AZURE_AUTHORITY_HOST", &entra.url),
    ]))
    .await
    .expect("Entra ID answered");
    let first = next(&mut seen, "first exchange").await;
    assert_eq!(first["client_assertion"], "eyJ.first.sig");
    let refreshed = next(&mut seen, "refresh").await;
    assert_eq!(
        refreshed["client_assertion"], "eyJ.rotated.sig",
        "the refresh read the token file again"
    );
    // The refresher stores what it fetched before it waits again.
    let deadline = tokio::time::Instant::now() + AT_MOST;
    loop {
        let current = source.current().unwrap();
        if current.values[ACCESS_TOKEN] == "token-1" {
            let expires_at = current.expires_at.expect("an expiry");
            assert!(
                expires_at >= now() + 3500 && expires_at <= now() + 3600,
                "{expires_at}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "token-1 never stored"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(entra.requests().len(), 2);
}

#[tokio::test]
async fn a_client_secret_is_exchanged_and_a_wrong_one_is_a_typed_refusal() {
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let handler = entra(
        |form| {
            form.get("client_secret").map(String::as_str) == Some("s3cret~with/odd+chars")
                && !form.contains_key("client_assertion")
        },
        |_| 3599,
        seen_tx,
    );
    let entra = support::serve(handler).await;
    let vars = |secret: &'static str| {
        config(&[
            ("AZURE_TENANT_ID", TENANT),
            ("AZURE_CLIENT_ID", CLIENT),
            ("AZURE_CLIENT_SECRET", secret),
            ("AZURE_AUTHORITY_HOST", &entra.url),
        ])
    };
    let source = credentials::start(vars("s3cret~with/odd+chars"))
        .await
        .expect("Entra ID answered");
    assert_eq!(
        next(&mut seen, "exchange").await["grant_type"],
        "client_credentials"
    );
    let current = source.current().unwrap();
    assert_eq!(current.values[ACCESS_TOKEN], "token-0");
    assert!(current.expires_at.unwrap() > now() + 3000);

    match credentials::start(vars("wrong")).await.err() {
        Some(AzureCredentialError::Refused { status, error, .. }) => {
            assert_eq!(status, 401);
            assert!(
                error.contains("invalid_client") && error.contains("AADSTS7000215"),
                "{error}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn entra_id_behind_a_private_ca_is_reached_only_with_that_ca_trusted() {
    let ca = PrivateCa::new("private Entra ID CA");
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let handler = entra(
        |form| form.get("client_secret").map(String::as_str) == Some("s3cret"),
        |_| 3599,
        seen_tx,
    );
    let entra = support::serve_tls(handler, ca.acceptor(&["127.0.0.1"])).await;
    assert!(entra.url.starts_with("https://127.0.0.1:"), "{}", entra.url);
    let webpki_only = config(&[
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_CLIENT_SECRET", "s3cret"),
        ("AZURE_AUTHORITY_HOST", &entra.url),
    ]);

    match credentials::start(webpki_only.clone()).await.err() {
        Some(AzureCredentialError::Request {
            source_name,
            message,
            ..
        }) => {
            assert_eq!(source_name, "client secret");
            assert!(message.contains("UnknownIssuer"), "{message}");
        }
        other => panic!("expected the certificate refused, got {other:?}"),
    }
    assert!(
        entra.requests().is_empty(),
        "nothing is sent before the certificate verifies"
    );

    let trusting = AzureCredentialConfig {
        trust: ca.trust(),
        ..webpki_only
    };
    let source = credentials::start(trusting)
        .await
        .expect("Entra ID answered over TLS");
    assert_eq!(next(&mut seen, "exchange").await["client_secret"], "s3cret");
    assert_eq!(source.current().unwrap().values[ACCESS_TOKEN], "token-0");
}

/// IMDS's identity endpoint for a VM whose one identity is `known_client`
/// (`None`: system-assigned): token `n` lives `lifetimes[n]` seconds; past
/// the list, IMDS answers 500 (busy).
fn imds(known_client: Option<&'static str>, lifetimes: Vec<u64>) -> Arc<Handler> {
    let count = AtomicUsize::new(0);
    Arc::new(move |request: &StubRequest| {
        if request.header("x-forwarded-for").is_some() {
            return (403, "Forbidden".into());
        }
        if request.header("metadata") != Some("true") {
            return (
                400,
                r#"{"error":"invalid_request","error_description":"Required metadata header not specified"}"#.into(),
            );
        }
        let Some(query) = request
            .target
            .strip_prefix("/metadata/identity/oauth2/token?")
            .filter(|_| request.method == "GET")
        else {
            return (404, "Not Found".into());
        };
        let query = pairs(query);
        if query.get("api-version").map(String::as_str) != Some("2018-02-01") {
            return (
                400,
                r#"{"error":"invalid_request","error_description":"Invalid API version"}"#.into(),
            );
        }
        if query.get("resource").map(String::as_str) != Some("https://management.azure.com/") {
            return (400, r#"{"error":"invalid_resource","error_description":"AADSTS500011: resource not found"}"#.into());
        }
        if query.get("client_id").map(String::as_str) != known_client {
            return (
                400,
                r#"{"error":"invalid_request","error_description":"Identity not found"}"#.into(),
            );
        }
        let n = count.fetch_add(1, Ordering::SeqCst);
        let Some(lifetime) = lifetimes.get(n) else {
            return (
                500,
                r#"{"error":"unknown","error_description":"IMDS is busy"}"#.into(),
            );
        };
        let issued = now();
        (
            200,
            serde_json::json!({"access_token": format!("mi-token-{n}"), "client_id": CLIENT,
                "expires_in": lifetime.to_string(), "expires_on": (issued + lifetime).to_string(),
                "ext_expires_in": lifetime.to_string(), "not_before": issued.to_string(),
                "resource": "https://management.azure.com/", "token_type": "Bearer"})
            .to_string(),
        )
    })
}

#[tokio::test]
async fn managed_identity_comes_from_imds_and_is_refreshed_before_expiry() {
    // Token 0 expires within the refresh margin, so token 1 is fetched at
    // once; token 1 lives an hour, so no third request comes in this test
    // (a failed refresh keeping what is held is refresh.rs's own test).
    let imds = support::serve(imds(Some(CLIENT), vec![300, 3600])).await;
    let source = credentials::start(config(&[
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_POD_IDENTITY_AUTHORITY_HOST", &imds.url),
    ]))
    .await
    .expect("IMDS answered");
    let deadline = tokio::time::Instant::now() + AT_MOST;
    while source.current().unwrap().values[ACCESS_TOKEN] != "mi-token-1" {
        assert!(tokio::time::Instant::now() < deadline, "no refresh");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let expires_at = source.current().unwrap().expires_at.unwrap();
    assert!(expires_at > now() + 3500, "{expires_at}");
    let requests = imds.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests
        .iter()
        .all(|r| r.header("metadata") == Some("true")));
}

#[tokio::test]
async fn bad_imds_answers_are_typed_errors() {
    // A system-assigned identity asked for where only a user-assigned one
    // exists: IMDS's "Identity not found".
    let imds_stub = support::serve(imds(Some(CLIENT), vec![3600])).await;
    let error = credentials::start(config(&[(
        "AZURE_POD_IDENTITY_AUTHORITY_HOST",
        &imds_stub.url,
    )]))
    .await
    .err();
    assert!(
        matches!(&error, Some(AzureCredentialError::Refused { status: 400, error, .. }) if error.contains("Identity not found")),
        "{error:?}"
    );
    // An answer without a token, and one that is not JSON.
    for (body, want) in [
        (
            r#"{"token_type":"Bearer","expires_in":"3599"}"#,
            TokenAnswerError::NoAccessToken,
        ),
        (
            r#"{"access_token":"t","expires_in":"an hour"}"#,
            TokenAnswerError::BadExpiry {
                field: "expires_in",
                value: "\"an hour\"".into(),
            },
        ),
    ] {
        let body = body.to_string();
        let stub = support::serve(Arc::new(move |_: &StubRequest| (200, body.clone()))).await;
        match credentials::start(config(&[("AZURE_POD_IDENTITY_AUTHORITY_HOST", &stub.url)]))
            .await
            .err()
        {
            Some(AzureCredentialError::Answer { problem, .. }) => assert_eq!(problem, want),
            other => panic!("{other:?}"),
        }
    }
    // Nothing configured and no IMDS: says what could be set.
    let closed = support::closed().await;
    let error = credentials::start(config(&[("AZURE_POD_IDENTITY_AUTHORITY_HOST", &closed)]))
        .await
        .err()
        .expect("no source");
    assert!(
        matches!(error, AzureCredentialError::NoSource(_)),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("AZURE_FEDERATED_TOKEN_FILE"),
        "{error}"
    );
}

#[tokio::test]
async fn a_missing_token_file_is_named() {
    let error = credentials::start(config(&[
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        (
            "AZURE_FEDERATED_TOKEN_FILE",
            "/nonexistent/azure-identity-token",
        ),
        ("AZURE_AUTHORITY_HOST", "http://127.0.0.1:9/"),
    ]))
    .await
    .err();
    assert!(
        matches!(&error, Some(AzureCredentialError::TokenFile { path, .. }) if path == "/nonexistent/azure-identity-token"),
        "{error:?}"
    );
}
