//! https egress: a guest's request reaches a TLS server on 127.0.0.1 only when
//! the server's certificate chains to a root the provider trusts and names the
//! host the guest asked for. Otherwise the host abandons the handshake before
//! any of the request is sent, the guest gets wasi:http's certificate error,
//! and the call is reported as egress denied with the reason.
//!
//! Each test makes its own throwaway CA and server certificate.

use ipam_tests as common;

use std::sync::Arc;

use common::{component, config, runtime};
use ipam_cloud::{CloudApi, CloudError};
use ipam_provider_runtime::egress::EgressError;
use ipam_provider_runtime::resolve::StaticResolver;
use ipam_provider_runtime::{TrustRoots, WasmProvider};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

/// The name the guest uses; only the provider's static resolver knows it.
const HOST: &str = "api.test";

fn certificate_authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let key = KeyPair::generate().expect("CA key");
    CertifiedIssuer::self_signed(params, key).expect("self-signed CA")
}

/// A server config presenting a certificate for `names`, signed by `ca`.
fn server_config(ca: &CertifiedIssuer<'static, KeyPair>, names: &[&str]) -> rustls::ServerConfig {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let key = KeyPair::generate().expect("server key");
    let certificate = CertificateParams::new(names)
        .expect("server params")
        .signed_by(&key, ca)
        .expect("server certificate");
    let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("PKCS#8 key");
    rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![certificate.der().clone()], key)
        .expect("server config")
}

/// A TLS server on 127.0.0.1 for one connection. It answers `200 hello` and
/// gives back the request it read; when the handshake fails, it gives back
/// the handshake's error, and then it has read nothing of a request.
async fn tls_server(
    config: rustls::ServerConfig,
) -> (u16, tokio::task::JoinHandle<Result<String, String>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let mut tls = acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
        let mut buffer = vec![0u8; 4096];
        let n = tls.read(&mut buffer).await.map_err(|e| e.to_string())?;
        let response = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello";
        tls.write_all(response).await.map_err(|e| e.to_string())?;
        tls.shutdown().await.map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&buffer[..n]).to_string())
    });
    (port, server)
}

/// The misbehave guest fetching `https://api.test:{port}/ping`, allowed to,
/// with `api.test` resolving to 127.0.0.1 and `trust` as its roots.
async fn fetcher(port: u16, trust: TrustRoots) -> WasmProvider {
    let settings =
        serde_json::json!({"mode": "fetch", "url": format!("https://{HOST}:{port}/ping")});
    let mut config = config(&settings.to_string());
    config.egress = vec![format!("https://{HOST}:{port}")];
    config.resolver = Arc::new(StaticResolver(
        [(HOST.to_string(), vec!["127.0.0.1".parse().unwrap()])].into(),
    ));
    config.trust = trust;
    runtime()
        .load(&component("misbehave"), config)
        .await
        .expect("misbehave loads")
}

fn trusting(ca: &CertifiedIssuer<'static, KeyPair>) -> TrustRoots {
    TrustRoots::with_extra_pem(ca.pem().as_bytes(), "the test CA").expect("the test CA is a root")
}

/// The call was refused for the server's certificate, with `why` (rustls's
/// reason) as the typed egress error, and the server got no request.
async fn refused_for_certificate(
    provider: &WasmProvider,
    server: tokio::task::JoinHandle<Result<String, String>>,
    why: rustls::CertificateError,
) {
    let expected = EgressError::UntrustedCertificate {
        host: HOST.into(),
        message: rustls::Error::InvalidCertificate(why).to_string(),
    };
    match provider.get_vpcs().await {
        Err(CloudError::EgressDenied {
            destination,
            reason,
            ..
        }) => {
            assert!(
                destination.starts_with("https://api.test:"),
                "{destination}"
            );
            assert_eq!(reason, expected.to_string());
        }
        other => panic!("expected egress denied for the certificate, got {other:?}"),
    }
    let served = server.await.unwrap();
    assert!(
        served.is_err(),
        "the handshake must fail before any request is sent; the server read {served:?}"
    );
    // The refusal left the provider usable.
    assert_eq!(provider.get_subnets().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_server_with_a_certificate_from_a_trusted_extra_ca_is_reached() {
    let ca = certificate_authority("trusted test CA");
    let (port, server) = tls_server(server_config(&ca, &[HOST])).await;
    let provider = fetcher(port, trusting(&ca)).await;
    let vpcs = provider.get_vpcs().await.expect("https egress works");
    assert_eq!(vpcs[0].id, "200 hello");
    let request = server.await.unwrap().expect("a request over TLS");
    assert!(request.starts_with("GET /ping HTTP/1.1"), "{request}");
}

#[tokio::test]
async fn a_certificate_from_an_untrusted_ca_is_refused_before_anything_is_sent() {
    let unknown = certificate_authority("unknown test CA");
    let (port, server) = tls_server(server_config(&unknown, &[HOST])).await;
    // The provider trusts another private CA, and the webpki roots.
    let provider = fetcher(port, trusting(&certificate_authority("other test CA"))).await;
    refused_for_certificate(&provider, server, rustls::CertificateError::UnknownIssuer).await;
}

#[tokio::test]
async fn a_certificate_for_another_host_is_refused_before_anything_is_sent() {
    let ca = certificate_authority("trusted test CA");
    let (port, server) = tls_server(server_config(&ca, &["other.test"])).await;
    let provider = fetcher(port, trusting(&ca)).await;
    let why = rustls::CertificateError::NotValidForNameContext {
        expected: rustls::pki_types::ServerName::try_from(HOST).unwrap(),
        presented: vec![r#"DnsName("other.test")"#.into()],
    };
    refused_for_certificate(&provider, server, why).await;
}
