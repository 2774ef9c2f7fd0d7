//! The host's own HTTP client (not the guests'): OCI pulls, credential
//! endpoints (STS, IMDS, container credentials). Also the TLS connector the
//! provider runtime's pinned sender uses for guest egress ([`TrustRoots`]:
//! the webpki roots, plus extra CAs where the operator configured them). One
//! request per fresh HTTP/1.1 connection, TLS with the webpki roots for
//! https, a size cap on the answer.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio::net::TcpStream;

/// The certificates a server's chain must lead to: the webpki roots, plus any
/// extra CA certificates the operator trusts (a private cloud endpoint, a
/// proxy with its own CA). Cheap to clone.
#[derive(Clone)]
pub struct TrustRoots {
    config: Arc<rustls::ClientConfig>,
}

/// Why extra CA certificates could not be trusted.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: not PEM certificates: {message}")]
    Pem { origin: String, message: String },
    #[error("{origin}: no CERTIFICATE in it")]
    Empty { origin: String },
    #[error("{origin}: certificate {index} cannot be a trust root: {message}")]
    Root {
        origin: String,
        index: usize,
        message: String,
    },
}

fn webpki_store() -> rustls::RootCertStore {
    rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.into(),
    }
}

fn client_config(roots: rustls::RootCertStore) -> Arc<rustls::ClientConfig> {
    Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

impl TrustRoots {
    /// The webpki roots alone.
    pub fn webpki() -> Self {
        // Built once: the store holds every root and every connection uses it.
        static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
        Self {
            config: CONFIG.get_or_init(|| client_config(webpki_store())).clone(),
        }
    }

    /// The webpki roots and every certificate in `pem` (`origin` names it
    /// in errors). A document with no certificate is refused: a mounted but
    /// empty file would otherwise silently trust nothing extra.
    pub fn with_extra_pem(pem: &[u8], origin: &str) -> Result<Self, TrustError> {
        let certificates = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TrustError::Pem {
                origin: origin.to_string(),
                message: e.to_string(),
            })?;
        if certificates.is_empty() {
            return Err(TrustError::Empty {
                origin: origin.to_string(),
            });
        }
        let mut roots = webpki_store();
        for (index, certificate) in certificates.into_iter().enumerate() {
            roots.add(certificate).map_err(|e| TrustError::Root {
                origin: origin.to_string(),
                index,
                message: e.to_string(),
            })?;
        }
        Ok(Self {
            config: client_config(roots),
        })
    }

    /// [`TrustRoots::with_extra_pem`] of a PEM file.
    pub fn with_extra_pem_file(path: &Path) -> Result<Self, TrustError> {
        let pem = std::fs::read(path).map_err(|source| TrustError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::with_extra_pem(&pem, &path.display().to_string())
    }

    /// A TLS connector that verifies servers against these roots.
    pub fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.config.clone())
    }
}

impl Default for TrustRoots {
    fn default() -> Self {
        Self::webpki()
    }
}

impl std::fmt::Debug for TrustRoots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustRoots").finish_non_exhaustive()
    }
}

/// The most an answer may weigh.
const MAX_BYTES: usize = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{method} {url}: {message}")]
pub struct HttpError {
    pub method: Method,
    pub url: String,
    pub message: String,
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

async fn send<T>(
    io: T,
    request: Request<Full<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender
        .send_request(request)
        .await
        .map_err(|e| format!("HTTP: {e}"))
}

/// One request.
pub async fn request(
    method: Method,
    url: &str,
    headers: &[(&str, String)],
    body: Bytes,
) -> Result<Reply, HttpError> {
    let fail = |message: String| HttpError {
        method: method.clone(),
        url: url.to_string(),
        message,
    };
    let uri: Uri = url.parse().map_err(|e| fail(format!("{e}")))?;
    let host = uri
        .host()
        .ok_or_else(|| fail("no host".into()))?
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let tcp = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| fail(format!("connect: {e}")))?;
    let mut builder = Request::builder()
        .method(method.clone())
        .uri(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header(
            http::header::HOST,
            uri.authority().map_or(host.clone(), |a| a.to_string()),
        )
        .header(http::header::USER_AGENT, "ipam-operator");
    for (name, value) in headers {
        builder = builder.header(*name, value.as_str());
    }
    let request = builder
        .body(Full::new(body))
        .map_err(|e| fail(format!("{e}")))?;
    let response = if https {
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| fail(format!("{e}")))?;
        let tls = TrustRoots::webpki()
            .connector()
            .connect(name, tcp)
            .await
            .map_err(|e| fail(format!("TLS: {e}")))?;
        send(TokioIo::new(tls), request).await
    } else {
        send(TokioIo::new(tcp), request).await
    }
    .map_err(fail)?;
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_BYTES)
        .collect()
        .await
        .map_err(|e| fail(format!("body: {e}")))?
        .to_bytes();
    Ok(Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_a_certificate_is_refused() {
        let error = TrustRoots::with_extra_pem(b"# nothing here\n", "ca.pem").unwrap_err();
        assert!(matches!(error, TrustError::Empty { .. }), "{error}");
    }

    #[test]
    fn a_certificate_block_that_is_no_certificate_is_refused() {
        // Valid PEM and base64 ("not a certificate"), but not DER.
        let pem =
            b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
        let error = TrustRoots::with_extra_pem(pem, "ca.pem").unwrap_err();
        assert!(
            matches!(error, TrustError::Root { index: 0, .. }),
            "{error}"
        );
    }

    #[test]
    fn broken_pem_is_refused() {
        let pem = b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n";
        let error = TrustRoots::with_extra_pem(pem, "ca.pem").unwrap_err();
        assert!(matches!(error, TrustError::Pem { .. }), "{error}");
    }

    #[test]
    fn a_missing_file_names_its_path() {
        let error = TrustRoots::with_extra_pem_file(Path::new("/nonexistent/ca.pem")).unwrap_err();
        assert!(matches!(error, TrustError::Read { .. }), "{error}");
        assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
    }
}
