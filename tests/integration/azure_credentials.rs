//! Entra ID tokens resolved by the host (`ipam_clouds::azure::credentials`)
//! reach a guest through the credentials import: a workload identity token
//! and a client secret exchanged with a local Entra ID stub, a managed
//! identity token from a local IMDS stub (stubs on 127.0.0.1, shaped after
//! Microsoft's token endpoint references; `host/clouds/tests` checks the
//! requests field by field). With the Azure provider's default egress, the
//! guest itself reaches neither IMDS nor Entra ID.

use ipam_tests as common;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use ipam_cloud::credentials::CredentialSource;
use ipam_cloud::{CloudApi, CloudError};
use ipam_clouds::azure::credentials::{self, AzureCredentialConfig, ACCESS_TOKEN};
use ipam_clouds::Cloud;

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const CLIENT: &str = "6a8b9c0d-1111-2222-3333-444455556666";

/// A token endpoint stub answering `token` to the requests `accept` takes,
/// 401 invalid_client to the rest; its base URL.
async fn token_endpoint(
    accept: impl Fn(&common::StubRequest) -> bool + Send + Sync + 'static,
    token: &'static str,
) -> String {
    let address = common::stub_server(move |request| {
        let (status, body) = if accept(&request) {
            (
                StatusCode::OK,
                serde_json::json!({"token_type": "Bearer", "expires_in": "3599",
                    "access_token": token})
                .to_string(),
            )
        } else {
            (
                StatusCode::UNAUTHORIZED,
                r#"{"error":"invalid_client","error_description":"AADSTS7000215"}"#.to_string(),
            )
        };
        Response::builder()
            .status(status)
            .body(Full::new(Bytes::from(body)))
            .expect("stub response")
    })
    .await;
    format!("http://{address}")
}

fn config(vars: &[(&str, &str)]) -> AzureCredentialConfig {
    AzureCredentialConfig::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
}

fn body_has(request: &common::StubRequest, field: &str) -> bool {
    String::from_utf8_lossy(&request.body)
        .split('&')
        .any(|pair| pair == field)
}

#[tokio::test]
async fn a_workload_identity_token_reaches_the_guest() {
    let entra = token_endpoint(
        |r| {
            r.path == format!("/{TENANT}/oauth2/v2.0/token")
                && body_has(r, "client_assertion=eyJ.federated.sig")
        },
        "arm-token-workload-identity",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("azure-identity-token");
    std::fs::write(&file, "eyJ.federated.sig\n").unwrap();
    let file = file.display().to_string();
    let source = credentials::start(config(&[
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_FEDERATED_TOKEN_FILE", &file),
        ("AZURE_AUTHORITY_HOST", &entra),
    ]))
    .await
    .expect("Entra ID answered");
    assert!(source.current().unwrap().expires_at.is_some());
    assert_eq!(
        common::credential_seen_by_guest(source, ACCESS_TOKEN).await,
        "arm-token-workload-identity"
    );
}

#[tokio::test]
async fn a_client_secret_token_reaches_the_guest() {
    let entra = token_endpoint(
        |r| body_has(r, "client_secret=s3cret"),
        "arm-token-client-secret",
    )
    .await;
    let source = credentials::start(config(&[
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_CLIENT_SECRET", "s3cret"),
        ("AZURE_AUTHORITY_HOST", &entra),
    ]))
    .await
    .expect("Entra ID answered");
    assert_eq!(
        common::credential_seen_by_guest(source, ACCESS_TOKEN).await,
        "arm-token-client-secret"
    );
}

#[tokio::test]
async fn a_managed_identity_token_reaches_the_guest() {
    let imds = token_endpoint(
        |r| {
            r.path == "/metadata/identity/oauth2/token"
                && r.headers.get("metadata").is_some_and(|v| v == "true")
        },
        "arm-token-managed-identity",
    )
    .await;
    let source = credentials::start(config(&[("AZURE_POD_IDENTITY_AUTHORITY_HOST", &imds)]))
        .await
        .expect("IMDS answered");
    assert_eq!(
        common::credential_seen_by_guest(source, ACCESS_TOKEN).await,
        "arm-token-managed-identity"
    );
}

#[tokio::test]
async fn with_the_azure_default_egress_the_guest_reaches_neither_imds_nor_entra() {
    let egress = Cloud::Azure
        .default_egress(r#"{"subscription-id": "s"}"#)
        .unwrap();
    assert_eq!(egress, ["https://management.azure.com"]);
    for (url, host) in [
        (
            "http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https://management.azure.com/",
            "169.254.169.254",
        ),
        (
            "https://login.microsoftonline.com/common/oauth2/v2.0/token",
            "login.microsoftonline.com",
        ),
    ] {
        let mut config =
            common::config(&serde_json::json!({"mode": "fetch", "url": url}).to_string());
        config.egress = egress.clone();
        let provider = common::runtime()
            .load(&common::component("misbehave"), config)
            .await
            .expect("misbehave loads");
        match provider.get_vpcs().await {
            Err(CloudError::EgressDenied { destination, .. }) => {
                assert!(destination.contains(host), "{destination} for {url}")
            }
            other => panic!("{url}: expected egress denied, got {other:?}"),
        }
    }
}
