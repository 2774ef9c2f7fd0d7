//! AWS credentials resolved natively by the host, from the sources a pod on
//! AWS has, in the AWS SDKs' default order: static keys in the environment
//! (a mounted Secret), a web identity token exchanged with STS (IRSA), the
//! container credentials endpoint (EKS Pod Identity's agent), then the
//! instance profile through IMDSv2. The host may reach the metadata
//! address; a guest never can (its egress policy refuses link-local). The
//! guest receives `access-key-id`, `secret-access-key` and, for temporary
//! credentials, `session-token`, with their expiry; [`start`] keeps them
//! fresh through the shared [`RefreshingSource`]. An https endpoint's
//! certificate must chain to the config's `trust`: the webpki roots, plus
//! the operator's `--egress-ca-file` CAs.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http::Method;

use ipam_cloud::credentials::Credentials;
use ipam_http_client::{request, TrustRoots};

use super::imds::Imds;
use crate::form::form_encode;
use crate::refresh::RefreshingSource;

pub const ACCESS_KEY_ID: &str = "access-key-id";
pub const SECRET_ACCESS_KEY: &str = "secret-access-key";
pub const SESSION_TOKEN: &str = "session-token";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AwsCredentialError {
    #[error("no AWS credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE/AWS_ROLE_ARN, AWS_CONTAINER_CREDENTIALS_FULL_URI, or run where IMDS answers ({0})")]
    NoSource(String),
    #[error("reading the token file {path}: {message}")]
    TokenFile { path: String, message: String },
    #[error("{source_name}: {message}")]
    Endpoint {
        source_name: &'static str,
        message: String,
    },
}

/// Where to look; every field can be pointed at a local stub.
#[derive(Debug, Clone)]
pub struct AwsCredentialConfig {
    /// The environment as seen at start (AWS_* variables).
    pub env: BTreeMap<String, String>,
    /// STS endpoint; `https://sts.{region}.amazonaws.com` by default.
    pub sts_endpoint: Option<String>,
    /// IMDS endpoint (AWS_EC2_METADATA_SERVICE_ENDPOINT), default
    /// `http://169.254.169.254`.
    pub imds_endpoint: String,
    /// What an https endpoint (STS, a container endpoint) must chain to:
    /// the webpki roots by default, plus the operator's extra CAs.
    pub trust: TrustRoots,
}

impl AwsCredentialConfig {
    /// From this process's environment, with the webpki roots.
    pub fn from_env() -> Self {
        let env: BTreeMap<String, String> = std::env::vars()
            .filter(|(k, _)| k.starts_with("AWS_"))
            .collect();
        let imds_endpoint = env
            .get("AWS_EC2_METADATA_SERVICE_ENDPOINT")
            .cloned()
            .unwrap_or_else(|| "http://169.254.169.254".into());
        let sts_endpoint = env.get("AWS_ENDPOINT_URL_STS").cloned();
        Self {
            env,
            sts_endpoint,
            imds_endpoint,
            trust: TrustRoots::webpki(),
        }
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.env
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn region(&self) -> &str {
        self.var("AWS_REGION")
            .or(self.var("AWS_DEFAULT_REGION"))
            .unwrap_or("us-east-1")
    }
}

/// The source the chain settles on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AwsSource {
    Environment,
    WebIdentity {
        token_file: String,
        role_arn: String,
        session_name: String,
    },
    /// A container credentials endpoint: EKS Pod Identity's agent
    /// (AWS_CONTAINER_CREDENTIALS_FULL_URI with a token file) or ECS's.
    Container {
        uri: String,
        token_file: Option<String>,
        token: Option<String>,
    },
    InstanceProfile,
}

/// ECS's credentials address, for AWS_CONTAINER_CREDENTIALS_RELATIVE_URI.
const ECS_CREDENTIALS_HOST: &str = "http://169.254.170.2";

/// The SDKs' order: environment keys, web identity, the container endpoint,
/// then IMDS.
pub fn choose(config: &AwsCredentialConfig) -> AwsSource {
    if config.var("AWS_ACCESS_KEY_ID").is_some() && config.var("AWS_SECRET_ACCESS_KEY").is_some() {
        return AwsSource::Environment;
    }
    if let (Some(token_file), Some(role_arn)) = (
        config.var("AWS_WEB_IDENTITY_TOKEN_FILE"),
        config.var("AWS_ROLE_ARN"),
    ) {
        return AwsSource::WebIdentity {
            token_file: token_file.into(),
            role_arn: role_arn.into(),
            session_name: config
                .var("AWS_ROLE_SESSION_NAME")
                .unwrap_or("ipam-operator")
                .into(),
        };
    }
    let uri = config
        .var("AWS_CONTAINER_CREDENTIALS_FULL_URI")
        .map(str::to_string)
        .or_else(|| {
            config
                .var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
                .map(|path| format!("{ECS_CREDENTIALS_HOST}{path}"))
        });
    if let Some(uri) = uri {
        return AwsSource::Container {
            uri,
            token_file: config
                .var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
                .map(str::to_string),
            token: config
                .var("AWS_CONTAINER_AUTHORIZATION_TOKEN")
                .map(str::to_string),
        };
    }
    AwsSource::InstanceProfile
}

fn credentials(
    key: &str,
    secret: &str,
    token: Option<&str>,
    expires_at: Option<u64>,
) -> Credentials {
    let mut values = BTreeMap::from([
        (ACCESS_KEY_ID.to_string(), key.to_string()),
        (SECRET_ACCESS_KEY.to_string(), secret.to_string()),
    ]);
    if let Some(token) = token {
        values.insert(SESSION_TOKEN.to_string(), token.to_string());
    }
    Credentials { values, expires_at }
}

/// RFC 3339 (`2026-11-21T21:00:00Z`) to unix seconds.
fn unix_seconds(text: &str) -> Option<u64> {
    text.trim()
        .parse::<jiff::Timestamp>()
        .ok()
        .and_then(|t| u64::try_from(t.as_second()).ok())
}

/// The text of `<tag>...</tag>` inside `xml` (STS answers are small and flat).
fn xml_text<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(xml[start..end].trim())
}

fn endpoint_error(source_name: &'static str) -> impl Fn(String) -> AwsCredentialError {
    move |message| AwsCredentialError::Endpoint {
        source_name,
        message,
    }
}

async fn web_identity(
    config: &AwsCredentialConfig,
    token_file: &str,
    role_arn: &str,
    session_name: &str,
) -> Result<Credentials, AwsCredentialError> {
    let fail = endpoint_error("STS AssumeRoleWithWebIdentity");
    let token = read_token(token_file)?;
    let endpoint = config
        .sts_endpoint
        .clone()
        .unwrap_or_else(|| format!("https://sts.{}.amazonaws.com", config.region()));
    let body = format!(
        "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn={}&RoleSessionName={}&WebIdentityToken={}",
        form_encode(role_arn),
        form_encode(session_name),
        form_encode(&token)
    );
    let reply = request(
        &config.trust,
        Method::POST,
        &format!("{}/", endpoint.trim_end_matches('/')),
        &[(
            "content-type",
            "application/x-www-form-urlencoded".to_string(),
        )],
        Bytes::from(body),
    )
    .await
    .map_err(|e| fail(e.to_string()))?;
    let xml = String::from_utf8_lossy(&reply.body);
    if !reply.status.is_success() {
        let code = xml_text(&xml, "Code").unwrap_or("unknown error");
        return Err(fail(format!("{}: {code}", reply.status)));
    }
    let field = |tag: &str| {
        xml_text(&xml, tag)
            .map(str::to_string)
            .ok_or_else(|| fail(format!("no {tag} in the answer")))
    };
    Ok(credentials(
        &field("AccessKeyId")?,
        &field("SecretAccessKey")?,
        Some(&field("SessionToken")?),
        unix_seconds(&field("Expiration")?),
    ))
}

async fn instance_profile(config: &AwsCredentialConfig) -> Result<Credentials, AwsCredentialError> {
    let fail = endpoint_error("IMDSv2");
    let imds = Imds::new(&config.imds_endpoint, config.trust.clone());
    let session = imds.session().await.map_err(|e| fail(e.to_string()))?;
    let roles = session
        .get("iam/security-credentials/")
        .await
        .map_err(|e| fail(format!("no instance profile: {e}")))?;
    let role = roles.lines().next().unwrap_or_default().trim().to_string();
    if role.is_empty() {
        return Err(fail("no instance profile role".into()));
    }
    let answer = session
        .get(&format!("iam/security-credentials/{role}"))
        .await
        .map_err(|e| fail(format!("role {role}: {e}")))?;
    json_credentials(answer.as_bytes(), &format!("role {role}"), fail)
}

/// The JSON document IMDS and container endpoints answer with.
fn json_credentials(
    body: &[u8],
    what: &str,
    fail: impl Fn(String) -> AwsCredentialError,
) -> Result<Credentials, AwsCredentialError> {
    let doc: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| fail(format!("{what}: {e}")))?;
    let field = |name: &str| {
        doc.get(name)
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .ok_or_else(|| fail(format!("{what}: no {name}")))
    };
    Ok(credentials(
        &field("AccessKeyId")?,
        &field("SecretAccessKey")?,
        Some(&field("Token")?),
        unix_seconds(&field("Expiration")?),
    ))
}

/// A token file's contents (kubelet rotates these files: read on each use).
fn read_token(path: &str) -> Result<String, AwsCredentialError> {
    std::fs::read_to_string(path)
        .map(|token| token.trim().to_string())
        .map_err(|e| AwsCredentialError::TokenFile {
            path: path.to_string(),
            message: e.to_string(),
        })
}

/// GET the container endpoint with its authorization token (read from the
/// file on every fetch: the agent's token is rotated).
async fn container(
    trust: &TrustRoots,
    uri: &str,
    token_file: Option<&str>,
    token: Option<&str>,
) -> Result<Credentials, AwsCredentialError> {
    let fail = endpoint_error("container credentials");
    let authorization = match (token_file, token) {
        (Some(path), _) => Some(read_token(path)?),
        (None, token) => token.map(str::to_string),
    };
    let headers: Vec<(&str, String)> = authorization
        .into_iter()
        .map(|token| ("authorization", token))
        .collect();
    let answer = request(trust, Method::GET, uri, &headers, Bytes::new())
        .await
        .map_err(|e| fail(e.to_string()))?;
    if !answer.status.is_success() {
        return Err(fail(format!("{uri}: {}", answer.status)));
    }
    json_credentials(&answer.body, uri, fail)
}

/// Credentials from `source` now.
pub async fn fetch(
    source: &AwsSource,
    config: &AwsCredentialConfig,
) -> Result<Credentials, AwsCredentialError> {
    match source {
        AwsSource::Environment => Ok(credentials(
            config.var("AWS_ACCESS_KEY_ID").unwrap_or_default(),
            config.var("AWS_SECRET_ACCESS_KEY").unwrap_or_default(),
            config.var("AWS_SESSION_TOKEN"),
            None,
        )),
        AwsSource::WebIdentity {
            token_file,
            role_arn,
            session_name,
        } => web_identity(config, token_file, role_arn, session_name).await,
        AwsSource::Container {
            uri,
            token_file,
            token,
        } => container(&config.trust, uri, token_file.as_deref(), token.as_deref()).await,
        AwsSource::InstanceProfile => instance_profile(config)
            .await
            .map_err(|e| AwsCredentialError::NoSource(e.to_string())),
    }
}

/// Resolve once (an error here stops the operator from starting without
/// credentials), then keep them fresh ([`RefreshingSource`]: a new set 5
/// minutes before each expires).
pub async fn start(
    config: AwsCredentialConfig,
) -> Result<Arc<RefreshingSource>, AwsCredentialError> {
    let source = choose(&config);
    tracing::info!(source = source_kind(&source), "resolving AWS credentials");
    let config = Arc::new(config);
    RefreshingSource::start("aws", move || {
        let source = source.clone();
        let config = config.clone();
        async move { fetch(&source, &config).await }
    })
    .await
}

fn source_kind(source: &AwsSource) -> &'static str {
    match source {
        AwsSource::Environment => "environment",
        AwsSource::WebIdentity { .. } => "web-identity",
        AwsSource::Container { .. } => "container",
        AwsSource::InstanceProfile => "instance-profile",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> AwsCredentialConfig {
        AwsCredentialConfig {
            env: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            sts_endpoint: None,
            imds_endpoint: "http://169.254.169.254".into(),
            trust: TrustRoots::webpki(),
        }
    }

    #[test]
    fn the_chain_prefers_keys_then_web_identity_then_container_then_imds() {
        let keys = config(&[("AWS_ACCESS_KEY_ID", "AK"), ("AWS_SECRET_ACCESS_KEY", "SK")]);
        assert_eq!(choose(&keys), AwsSource::Environment);
        let irsa = config(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/eks/token"),
            ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r"),
        ]);
        assert!(
            matches!(choose(&irsa), AwsSource::WebIdentity { ref session_name, .. } if session_name == "ipam-operator")
        );
        assert_eq!(
            choose(&config(&[("AWS_ACCESS_KEY_ID", "AK")])),
            AwsSource::InstanceProfile
        );
        let pod_identity = config(&[
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "http://169.254.170.23/v1/credentials",
            ),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token",
            ),
        ]);
        assert!(matches!(
            choose(&pod_identity),
            AwsSource::Container { ref uri, token_file: Some(_), .. } if uri == "http://169.254.170.23/v1/credentials"
        ));
        let ecs = config(&[(
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "/v2/credentials/x",
        )]);
        assert!(matches!(
            choose(&ecs),
            AwsSource::Container { ref uri, token_file: None, token: None } if uri == "http://169.254.170.2/v2/credentials/x"
        ));
    }

    #[test]
    fn with_every_source_present_the_order_decides() {
        let keys = [("AWS_ACCESS_KEY_ID", "AK"), ("AWS_SECRET_ACCESS_KEY", "SK")];
        let irsa = [
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/token"),
            ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r"),
        ];
        let container = [(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "http://169.254.170.23/v1/credentials",
        )];
        let all: Vec<_> = keys
            .iter()
            .chain(&irsa)
            .chain(&container)
            .copied()
            .collect();
        assert_eq!(choose(&config(&all)), AwsSource::Environment, "keys first");
        let no_keys: Vec<_> = irsa.iter().chain(&container).copied().collect();
        assert!(
            matches!(choose(&config(&no_keys)), AwsSource::WebIdentity { .. }),
            "then web identity, before the container endpoint"
        );
        assert!(
            matches!(choose(&config(&container)), AwsSource::Container { .. }),
            "then the container endpoint, before the instance profile"
        );
    }

    #[test]
    fn helpers() {
        assert_eq!(
            form_encode("arn:aws:iam::1:role/r a"),
            "arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fr%20a"
        );
        assert_eq!(unix_seconds("1970-01-01T00:01:40Z"), Some(100));
        assert_eq!(xml_text("<A><Code>Nope</Code></A>", "Code"), Some("Nope"));
        assert_eq!(xml_text("<A/>", "Code"), None);
    }
}
