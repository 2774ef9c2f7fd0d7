//! Microsoft Entra ID access tokens for Azure Resource Manager, resolved by
//! the host in `DefaultAzureCredential`'s order: a service principal's client
//! secret in the environment, workload identity (a Kubernetes service-account
//! token in `AZURE_FEDERATED_TOKEN_FILE`, read again on every fetch since the
//! kubelet rotates it, exchanged as a client assertion), then the VM's
//! managed identity through IMDS. The guest receives `access-token` (a bearer
//! token for ARM) with its expiry through the credentials import, and
//! [`start`] fetches a new one before that; the guest never reaches Entra ID
//! or the metadata address itself. Entra ID's certificate must chain to the
//! config's `trust`: the webpki roots, plus the operator's `--egress-ca-file`
//! CAs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use ipam_cloud::credentials::Credentials;
use ipam_http_client::{request, TrustRoots};

use super::imds::DEFAULT_ENDPOINT as DEFAULT_IMDS_ENDPOINT;
use crate::form::form_encode;
use crate::refresh::{wall_clock_unix, RefreshingSource};

/// The credentials key of the bearer token.
pub const ACCESS_TOKEN: &str = "access-token";
/// Entra ID in the public cloud (`AZURE_AUTHORITY_HOST` overrides it).
pub const DEFAULT_AUTHORITY_HOST: &str = "https://login.microsoftonline.com/";
/// The scope asked of Entra ID: Azure Resource Manager.
pub const ARM_SCOPE: &str = "https://management.azure.com/.default";
/// The resource asked of the IMDS token endpoint: Azure Resource Manager.
pub const ARM_RESOURCE: &str = "https://management.azure.com/";
/// The IMDS identity endpoint's API version.
pub const IMDS_TOKEN_API_VERSION: &str = "2018-02-01";
/// How long one token request may take.
pub const TOKEN_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

const CLIENT_ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// The most of an error answer an error carries.
const ERROR_TEXT_CHARS: usize = 300;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AzureCredentialError {
    #[error("no Azure credentials: set AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET, or AZURE_FEDERATED_TOKEN_FILE (workload identity), or run where the IMDS managed identity answers ({0})")]
    NoSource(String),
    #[error("{variable} is set but {missing} is not: {source_name} needs both")]
    Incomplete {
        source_name: &'static str,
        variable: &'static str,
        missing: &'static str,
    },
    #[error("reading the federated token file {path}: {message}")]
    TokenFile { path: String, message: String },
    #[error("{source_name} {url}: {message}")]
    Request {
        source_name: &'static str,
        url: String,
        message: String,
    },
    #[error("{source_name} {url}: HTTP {status}: {error}")]
    Refused {
        source_name: &'static str,
        url: String,
        status: u16,
        error: String,
    },
    #[error("{source_name} {url}: the token answer {problem}")]
    Answer {
        source_name: &'static str,
        url: String,
        problem: TokenAnswerError,
    },
}

/// What is wrong with a token endpoint's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenAnswerError {
    #[error("is not a JSON object: {0}")]
    NotJson(String),
    #[error("has no access_token")]
    NoAccessToken,
    #[error("has token_type {0:?}, not Bearer")]
    NotBearer(String),
    #[error("has no expiry (expires_on or expires_in)")]
    NoExpiry,
    #[error("has {field} {value:?}, not a count of seconds")]
    BadExpiry { field: &'static str, value: String },
    #[error("expired already (expires_on {expires_on}, now {now})")]
    Expired { expires_on: u64, now: u64 },
}

/// Where to look; the endpoints can be pointed at local stubs.
#[derive(Debug, Clone)]
pub struct AzureCredentialConfig {
    /// The environment as seen at start (AZURE_* variables).
    pub env: BTreeMap<String, String>,
    /// Entra ID's base URL, ending in `/` (`AZURE_AUTHORITY_HOST`, which
    /// the workload identity webhook sets; the public cloud's by default).
    pub authority_host: String,
    /// IMDS (`AZURE_POD_IDENTITY_AUTHORITY_HOST`, as the Azure SDKs read
    /// it; `http://169.254.169.254` by default).
    pub imds_endpoint: String,
    /// What Entra ID's certificate must chain to: the webpki roots by
    /// default, plus the operator's extra CAs (an authority host behind a
    /// private CA).
    pub trust: TrustRoots,
}

impl AzureCredentialConfig {
    /// From this process's environment, with the webpki roots.
    pub fn from_env() -> Self {
        Self::from_vars(std::env::vars().filter(|(k, _)| k.starts_with("AZURE_")))
    }

    /// From the given variables (the environment, or a test's), with the
    /// webpki roots.
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        let env: BTreeMap<String, String> = vars
            .into_iter()
            .filter(|(_, v)| !v.trim().is_empty())
            .collect();
        let mut authority_host = env
            .get("AZURE_AUTHORITY_HOST")
            .cloned()
            .unwrap_or_else(|| DEFAULT_AUTHORITY_HOST.into());
        if !authority_host.ends_with('/') {
            authority_host.push('/');
        }
        let imds_endpoint = env
            .get("AZURE_POD_IDENTITY_AUTHORITY_HOST")
            .map(|e| e.trim_end_matches('/').to_string())
            .unwrap_or_else(|| DEFAULT_IMDS_ENDPOINT.into());
        Self {
            env,
            authority_host,
            imds_endpoint,
            trust: TrustRoots::webpki(),
        }
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(String::as_str)
    }
}

/// The source the chain settles on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AzureSource {
    /// A service principal's secret (AZURE_CLIENT_SECRET).
    ClientSecret {
        tenant_id: String,
        client_id: String,
        secret: String,
    },
    /// Workload identity: the federated token file as client assertion.
    WorkloadIdentity {
        tenant_id: String,
        client_id: String,
        token_file: String,
    },
    /// The VM's managed identity through IMDS; a user-assigned one when
    /// `client_id` is set.
    ManagedIdentity { client_id: Option<String> },
}

impl AzureSource {
    fn name(&self) -> &'static str {
        match self {
            AzureSource::ClientSecret { .. } => "client secret",
            AzureSource::WorkloadIdentity { .. } => "workload identity",
            AzureSource::ManagedIdentity { .. } => "managed identity",
        }
    }
}

/// `DefaultAzureCredential`'s order: the client secret, workload identity,
/// then managed identity. A source half configured is an error naming the
/// missing variable, not a fall through to the next.
pub fn choose(config: &AzureCredentialConfig) -> Result<AzureSource, AzureCredentialError> {
    let needs = |source_name, variable, missing: &'static str| {
        config
            .var(missing)
            .map(str::to_string)
            .ok_or(AzureCredentialError::Incomplete {
                source_name,
                variable,
                missing,
            })
    };
    if let Some(secret) = config.var("AZURE_CLIENT_SECRET") {
        let source_name = "the client secret";
        return Ok(AzureSource::ClientSecret {
            tenant_id: needs(source_name, "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID")?,
            client_id: needs(source_name, "AZURE_CLIENT_SECRET", "AZURE_CLIENT_ID")?,
            secret: secret.to_string(),
        });
    }
    if let Some(token_file) = config.var("AZURE_FEDERATED_TOKEN_FILE") {
        let source_name = "workload identity";
        return Ok(AzureSource::WorkloadIdentity {
            tenant_id: needs(source_name, "AZURE_FEDERATED_TOKEN_FILE", "AZURE_TENANT_ID")?,
            client_id: needs(source_name, "AZURE_FEDERATED_TOKEN_FILE", "AZURE_CLIENT_ID")?,
            token_file: token_file.to_string(),
        });
    }
    Ok(AzureSource::ManagedIdentity {
        client_id: config.var("AZURE_CLIENT_ID").map(str::to_string),
    })
}

fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{k}={}", form_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A count of seconds that token endpoints send as a number or, IMDS and
/// older Entra endpoints, as a string of digits.
fn seconds(doc: &serde_json::Value, field: &'static str) -> Result<Option<u64>, TokenAnswerError> {
    let bad = |value: &serde_json::Value| TokenAnswerError::BadExpiry {
        field,
        value: value.to_string(),
    };
    match doc.get(field) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| bad(&doc[field])),
        Some(serde_json::Value::String(s)) => s
            .trim()
            .parse::<u64>()
            .map(Some)
            .map_err(|_| bad(&doc[field])),
        Some(other) => Err(bad(other)),
    }
}

/// A token answer (Entra ID's or IMDS's) read at `now` (unix seconds): the
/// bearer token and when it expires. `expires_on` (absolute) wins over
/// `expires_in` (relative) when both are given.
pub fn parse_token(body: &[u8], now: u64) -> Result<Credentials, TokenAnswerError> {
    let doc: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| TokenAnswerError::NotJson(e.to_string()))?;
    if !doc.is_object() {
        return Err(TokenAnswerError::NotJson(format!("a JSON {}", kind(&doc))));
    }
    let token = doc
        .get("access_token")
        .and_then(|t| t.as_str())
        .filter(|t| !t.trim().is_empty())
        .ok_or(TokenAnswerError::NoAccessToken)?;
    if let Some(token_type) = doc.get("token_type").and_then(|t| t.as_str()) {
        if !token_type.eq_ignore_ascii_case("bearer") {
            return Err(TokenAnswerError::NotBearer(token_type.into()));
        }
    }
    let expires_on = match seconds(&doc, "expires_on")? {
        Some(at) => at,
        None => {
            let within = seconds(&doc, "expires_in")?.ok_or(TokenAnswerError::NoExpiry)?;
            now.saturating_add(within)
        }
    };
    if expires_on <= now {
        return Err(TokenAnswerError::Expired { expires_on, now });
    }
    Ok(Credentials {
        values: BTreeMap::from([(ACCESS_TOKEN.to_string(), token.trim().to_string())]),
        expires_at: Some(expires_on),
    })
}

fn kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Array(_) => "array",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Null => "null",
        serde_json::Value::Object(_) => "object",
    }
}

/// An error answer's `error` and `error_description` (both endpoints use
/// OAuth 2.0's error shape), or its text when it has none.
fn error_text(body: &[u8]) -> String {
    let doc: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        doc.as_ref()
            .and_then(|d| d.get(name))
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    let text = match (field("error"), field("error_description")) {
        (Some(error), Some(description)) => format!("{error}: {description}"),
        (Some(error), None) => error,
        _ => String::from_utf8_lossy(body).into_owned(),
    };
    text.chars().take(ERROR_TEXT_CHARS).collect()
}

/// A federated token file's contents.
fn read_token_file(path: &str) -> Result<String, AzureCredentialError> {
    let fail = |message: String| AzureCredentialError::TokenFile {
        path: path.to_string(),
        message,
    };
    let token = std::fs::read_to_string(path)
        .map_err(|e| fail(e.to_string()))?
        .trim()
        .to_string();
    if token.is_empty() {
        return Err(fail("empty".into()));
    }
    Ok(token)
}

/// One token request and its answer read.
async fn token_request(
    trust: &TrustRoots,
    source_name: &'static str,
    method: Method,
    url: String,
    headers: &[(&str, String)],
    body: String,
) -> Result<Credentials, AzureCredentialError> {
    let failed = |message: String| AzureCredentialError::Request {
        source_name,
        url: url.clone(),
        message,
    };
    let reply = tokio::time::timeout(
        TOKEN_REQUEST_TIMEOUT,
        request(trust, method, &url, headers, Bytes::from(body)),
    )
    .await
    .map_err(|_| failed(format!("no answer within {TOKEN_REQUEST_TIMEOUT:?}")))?
    .map_err(|e| failed(e.message))?;
    if !reply.status.is_success() {
        return Err(AzureCredentialError::Refused {
            source_name,
            url,
            status: reply.status.as_u16(),
            error: error_text(&reply.body),
        });
    }
    parse_token(&reply.body, wall_clock_unix()).map_err(|problem| AzureCredentialError::Answer {
        source_name,
        url,
        problem,
    })
}

/// Entra ID's token endpoint of `tenant_id` (v2.0, client credentials).
/// A token from Entra ID's token endpoint of `tenant_id`, for the form
/// `body` of a client-secret or workload-identity request.
async fn entra_token(
    config: &AzureCredentialConfig,
    source_name: &'static str,
    tenant_id: &str,
    body: String,
) -> Result<Credentials, AzureCredentialError> {
    let form_header = [(FORM.0, FORM.1.to_string())];
    let url = entra_token_url(config, tenant_id);
    token_request(
        &config.trust,
        source_name,
        Method::POST,
        url,
        &form_header,
        body,
    )
    .await
}

fn entra_token_url(config: &AzureCredentialConfig, tenant_id: &str) -> String {
    format!(
        "{}{}/oauth2/v2.0/token",
        config.authority_host,
        form_encode(tenant_id)
    )
}

/// The IMDS identity endpoint's URL for an ARM token.
fn imds_token_url(config: &AzureCredentialConfig, client_id: Option<&str>) -> String {
    let mut url = format!(
        "{}/metadata/identity/oauth2/token?api-version={IMDS_TOKEN_API_VERSION}&resource={}",
        config.imds_endpoint,
        form_encode(ARM_RESOURCE)
    );
    if let Some(client_id) = client_id {
        url.push_str(&format!("&client_id={}", form_encode(client_id)));
    }
    url
}

const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

/// A token from `source` now.
pub async fn fetch(
    source: &AzureSource,
    config: &AzureCredentialConfig,
) -> Result<Credentials, AzureCredentialError> {
    match source {
        AzureSource::ClientSecret {
            tenant_id,
            client_id,
            secret,
        } => {
            let body = form(&[
                ("client_id", client_id),
                ("grant_type", "client_credentials"),
                ("client_secret", secret),
                ("scope", ARM_SCOPE),
            ]);
            entra_token(config, source.name(), tenant_id, body).await
        }
        AzureSource::WorkloadIdentity {
            tenant_id,
            client_id,
            token_file,
        } => {
            let assertion = read_token_file(token_file)?;
            let body = form(&[
                ("client_id", client_id),
                ("grant_type", "client_credentials"),
                ("client_assertion_type", CLIENT_ASSERTION_TYPE),
                ("client_assertion", &assertion),
                ("scope", ARM_SCOPE),
            ]);
            entra_token(config, source.name(), tenant_id, body).await
        }
        AzureSource::ManagedIdentity { client_id } => {
            let url = imds_token_url(config, client_id.as_deref());
            let headers = [("Metadata", "true".to_string())];
            // Unreachable IMDS: most likely not on Azure, and nothing else
            // configured. A refusal or a bad answer is said as it is.
            token_request(
                &config.trust,
                source.name(),
                Method::GET,
                url,
                &headers,
                String::new(),
            )
            .await
            .map_err(|e| match e {
                AzureCredentialError::Request { .. } => {
                    AzureCredentialError::NoSource(e.to_string())
                }
                other => other,
            })
        }
    }
}

/// Resolve a token once (an error here stops the operator from starting
/// without credentials), then keep it fresh: a new one 5 minutes before
/// each expires.
pub async fn start(
    config: AzureCredentialConfig,
) -> Result<Arc<RefreshingSource>, AzureCredentialError> {
    let source = choose(&config)?;
    tracing::info!(source = source.name(), "resolving Azure credentials");
    let config = Arc::new(config);
    RefreshingSource::start("azure", move || {
        let source = source.clone();
        let config = config.clone();
        async move { fetch(&source, &config).await }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> AzureCredentialConfig {
        AzureCredentialConfig::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    const TENANT: (&str, &str) = ("AZURE_TENANT_ID", "72f988bf-86f1-41af-91ab-2d7cd011db47");
    const CLIENT: (&str, &str) = ("AZURE_CLIENT_ID", "6a8b9c0d-1111-2222-3333-444455556666");

    #[test]
    fn the_chain_prefers_the_secret_then_workload_identity_then_managed_identity() {
        let secret = ("AZURE_CLIENT_SECRET", "s3cret");
        let file = (
            "AZURE_FEDERATED_TOKEN_FILE",
            "/var/run/secrets/azure/tokens/azure-identity-token",
        );
        assert!(matches!(
            choose(&config(&[TENANT, CLIENT, secret, file])),
            Ok(AzureSource::ClientSecret { ref secret, .. }) if secret == "s3cret"
        ));
        assert!(matches!(
            choose(&config(&[TENANT, CLIENT, file])),
            Ok(AzureSource::WorkloadIdentity { ref token_file, .. }) if token_file.ends_with("azure-identity-token")
        ));
        assert_eq!(
            choose(&config(&[CLIENT])),
            Ok(AzureSource::ManagedIdentity {
                client_id: Some(CLIENT.1.into())
            })
        );
        assert_eq!(
            choose(&config(&[("AZURE_CLIENT_SECRET", " ")])),
            Ok(AzureSource::ManagedIdentity { client_id: None }),
            "a blank variable is no variable"
        );
    }

    #[test]
    fn a_half_configured_source_names_what_is_missing() {
        let table = [
            (
                vec![CLIENT, ("AZURE_FEDERATED_TOKEN_FILE", "/t")],
                "AZURE_TENANT_ID",
            ),
            (
                vec![TENANT, ("AZURE_FEDERATED_TOKEN_FILE", "/t")],
                "AZURE_CLIENT_ID",
            ),
            (
                vec![TENANT, ("AZURE_CLIENT_SECRET", "s")],
                "AZURE_CLIENT_ID",
            ),
        ];
        for (vars, missing_var) in table {
            match choose(&config(&vars)) {
                Err(AzureCredentialError::Incomplete { missing, .. }) => {
                    assert_eq!(missing, missing_var, "{vars:?}")
                }
                other => panic!("{vars:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn endpoints_from_the_environment() {
        let default = config(&[]);
        assert_eq!(default.authority_host, "https://login.microsoftonline.com/");
        assert_eq!(default.imds_endpoint, "http://169.254.169.254");
        let sovereign = config(&[
            ("AZURE_AUTHORITY_HOST", "https://login.microsoftonline.us"),
            (
                "AZURE_POD_IDENTITY_AUTHORITY_HOST",
                "http://127.0.0.1:8080/",
            ),
        ]);
        assert_eq!(
            entra_token_url(&sovereign, "tenant-1"),
            "https://login.microsoftonline.us/tenant-1/oauth2/v2.0/token"
        );
        assert_eq!(
            imds_token_url(&sovereign, Some("c-1")),
            "http://127.0.0.1:8080/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https%3A%2F%2Fmanagement.azure.com%2F&client_id=c-1"
        );
    }

    #[test]
    fn token_answers() {
        let now = 1_700_000_000;
        let ok = |token: &str, at: u64| {
            Ok(Credentials {
                values: BTreeMap::from([(ACCESS_TOKEN.to_string(), token.to_string())]),
                expires_at: Some(at),
            })
        };
        let table: Vec<(&str, Result<Credentials, TokenAnswerError>)> = vec![
            // Entra ID v2.0: expires_in a number.
            (
                r#"{"token_type":"Bearer","expires_in":3599,"ext_expires_in":3599,"access_token":"eyJ0.a"}"#,
                ok("eyJ0.a", now + 3599),
            ),
            // IMDS: strings, expires_on absolute and preferred.
            (
                r#"{"access_token":"eyJ0.b","refresh_token":"","expires_in":"86399","expires_on":"1700003600","not_before":"1699999700","resource":"https://management.azure.com/","token_type":"Bearer"}"#,
                ok("eyJ0.b", 1_700_003_600),
            ),
            (
                r#"{"access_token":"eyJ0.c","expires_in":"60"}"#,
                ok("eyJ0.c", now + 60),
            ),
            (r#"{"expires_in":60}"#, Err(TokenAnswerError::NoAccessToken)),
            (
                r#"{"access_token":"","expires_in":60}"#,
                Err(TokenAnswerError::NoAccessToken),
            ),
            (r#"{"access_token":"t"}"#, Err(TokenAnswerError::NoExpiry)),
            (
                r#"{"access_token":"t","expires_in":"soon"}"#,
                Err(TokenAnswerError::BadExpiry {
                    field: "expires_in",
                    value: "\"soon\"".into(),
                }),
            ),
            (
                r#"{"access_token":"t","expires_in":-5}"#,
                Err(TokenAnswerError::BadExpiry {
                    field: "expires_in",
                    value: "-5".into(),
                }),
            ),
            (
                r#"{"access_token":"t","expires_on":"1600000000"}"#,
                Err(TokenAnswerError::Expired {
                    expires_on: 1_600_000_000,
                    now,
                }),
            ),
            (
                r#"{"access_token":"t","token_type":"pop","expires_in":60}"#,
                Err(TokenAnswerError::NotBearer("pop".into())),
            ),
            (
                r#"["access_token"]"#,
                Err(TokenAnswerError::NotJson("a JSON array".into())),
            ),
        ];
        for (body, want) in table {
            assert_eq!(parse_token(body.as_bytes(), now), want, "{body}");
        }
        assert!(matches!(
            parse_token(b"<html>", now),
            Err(TokenAnswerError::NotJson(_))
        ));
    }

    #[test]
    fn error_answers_keep_the_oauth_error() {
        assert_eq!(
            error_text(br#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided.","error_codes":[7000215]}"#),
            "invalid_client: AADSTS7000215: Invalid client secret provided."
        );
        assert_eq!(error_text(b"Bad Gateway"), "Bad Gateway");
        assert_eq!(
            form(&[("scope", ARM_SCOPE), ("a", "b c")]),
            "scope=https%3A%2F%2Fmanagement.azure.com%2F.default&a=b%20c"
        );
    }
}
