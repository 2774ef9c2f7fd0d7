//! The EC2 instance metadata service, version 2: a session token from a PUT,
//! then GETs under `/latest/meta-data/` carrying it. The host's credential
//! chain reads the instance profile through it; the node agent reads the
//! instance's own facts (id, type, placement, interfaces) the same way.

use bytes::Bytes;
use http::Method;
use ipam_http_client::{request, TrustRoots};

/// How long a session token lives (the SDKs ask for 6 hours).
const TOKEN_TTL_SECONDS: &str = "21600";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImdsError {
    #[error("IMDSv2 {what}: {message}")]
    Request { what: String, message: String },
    #[error("IMDSv2 {what}: HTTP {status}")]
    Status { what: String, status: u16 },
}

/// An IMDSv2 endpoint (`http://169.254.169.254` on EC2).
#[derive(Debug, Clone)]
pub struct Imds {
    base: String,
    /// Plain http on EC2; the roots serve an https endpoint put in its
    /// place (AWS_EC2_METADATA_SERVICE_ENDPOINT).
    trust: TrustRoots,
}

/// A session: reads carry its token.
#[derive(Debug, Clone)]
pub struct ImdsSession {
    base: String,
    trust: TrustRoots,
    token: String,
}

impl Imds {
    pub fn new(endpoint: &str, trust: TrustRoots) -> Self {
        Self {
            base: endpoint.trim_end_matches('/').to_string(),
            trust,
        }
    }

    /// Ask for a session token.
    pub async fn session(&self) -> Result<ImdsSession, ImdsError> {
        let what = "token".to_string();
        let answer = request(
            &self.trust,
            Method::PUT,
            &format!("{}/latest/api/token", self.base),
            &[(
                "x-aws-ec2-metadata-token-ttl-seconds",
                TOKEN_TTL_SECONDS.into(),
            )],
            Bytes::new(),
        )
        .await
        .map_err(|e| ImdsError::Request {
            what: what.clone(),
            message: e.to_string(),
        })?;
        if !answer.status.is_success() {
            return Err(ImdsError::Status {
                what,
                status: answer.status.as_u16(),
            });
        }
        Ok(ImdsSession {
            base: self.base.clone(),
            trust: self.trust.clone(),
            token: String::from_utf8_lossy(&answer.body).trim().to_string(),
        })
    }
}

impl ImdsSession {
    /// The text at `/latest/meta-data/{path}`.
    pub async fn get(&self, path: &str) -> Result<String, ImdsError> {
        let url = format!("{}/latest/meta-data/{path}", self.base);
        let answer = request(
            &self.trust,
            Method::GET,
            &url,
            &[("x-aws-ec2-metadata-token", self.token.clone())],
            Bytes::new(),
        )
        .await
        .map_err(|e| ImdsError::Request {
            what: path.to_string(),
            message: e.to_string(),
        })?;
        if !answer.status.is_success() {
            return Err(ImdsError::Status {
                what: path.to_string(),
                status: answer.status.as_u16(),
            });
        }
        Ok(String::from_utf8_lossy(&answer.body).into_owned())
    }
}
