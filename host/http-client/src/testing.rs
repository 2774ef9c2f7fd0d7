//! A throwaway private CA for tests (feature `testing`): the roots that
//! trust it, and TLS acceptors presenting certificates it signed, so a test
//! can serve https on 127.0.0.1 that the webpki roots alone refuse.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::TrustRoots;

pub struct PrivateCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl PrivateCa {
    /// A new self-signed CA called `name`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("CA key");
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).expect("self-signed CA"),
        }
    }

    /// The CA's certificate, PEM: what `--egress-ca-file` would hold.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// The webpki roots and this CA.
    pub fn trust(&self) -> TrustRoots {
        TrustRoots::with_extra_pem(self.pem().as_bytes(), "the test CA")
            .expect("the test CA is a root")
    }

    /// A certificate for `names` signed by this CA and its private key, both
    /// PEM: what a server started as a separate process (a registry) reads
    /// from files.
    pub fn server_pem(&self, names: &[&str]) -> (String, String) {
        let (certificate, key) = self.server_certificate(names);
        (certificate.pem(), key.serialize_pem())
    }

    /// A server certificate for `names` signed by this CA, and its key.
    fn server_certificate(&self, names: &[&str]) -> (rcgen::Certificate, KeyPair) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let key = KeyPair::generate().expect("server key");
        let certificate = CertificateParams::new(names)
            .expect("server params")
            .signed_by(&key, &self.issuer)
            .expect("server certificate");
        (certificate, key)
    }

    /// A TLS acceptor presenting a certificate for `names` (host names or IP
    /// addresses, as `127.0.0.1`) signed by this CA.
    pub fn acceptor(&self, names: &[&str]) -> tokio_rustls::TlsAcceptor {
        let (certificate, key) = self.server_certificate(names);
        let key =
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("PKCS#8 key");
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![certificate.der().clone()], key)
            .expect("server config");
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}
