//! The roots a server's certificate must chain to ([`TrustRoots`]), and the
//! TLS connector that verifies against them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

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
