//! The wasi:http send hook: every outgoing request of a guest passes the
//! provider's [`EgressPolicy`] twice (origin, then resolved addresses) and is
//! then sent to exactly the addresses that were checked, over TLS verified
//! against the provider's trust roots for https. A refusal (by the policy, or
//! of a server certificate that does not verify) is recorded so the call that
//! made it can be reported as egress denied rather than as whatever the guest
//! made of the error; the guest itself sees `http-request-denied` or
//! `TLS-certificate-error`.

use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use ipam_http_client::TrustRoots;
use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttpHooks};

use crate::egress::{EgressError, EgressPolicy, Origin};
use crate::pinned_send::{self, ConnectionTask, SendError};
use crate::resolve::Resolver;

/// Denials seen during the current call, shared between the hook (which runs
/// in a spawned future) and the store that reads them after the call.
#[derive(Clone, Default)]
pub struct DenialLog(Arc<Mutex<Vec<(String, EgressError)>>>);

impl DenialLog {
    fn record(&self, destination: String, error: EgressError) {
        tracing::warn!(%destination, %error, "provider egress denied");
        if let Ok(mut log) = self.0.lock() {
            log.push((destination, error));
        }
    }

    /// Take the first denial recorded since the last call.
    pub fn take_first(&self) -> Option<(String, EgressError)> {
        let mut log = self.0.lock().ok()?;
        let first = (!log.is_empty()).then(|| log.remove(0));
        log.clear();
        first
    }
}

pub struct EgressHooks {
    pub policy: Arc<EgressPolicy>,
    pub resolver: Arc<dyn Resolver>,
    pub roots: TrustRoots,
    pub denials: DenialLog,
}

type SendResult = wasmtime_wasi_http::Result<(http::Response<WasiBody>, ConnectionTask)>;

impl WasiHttpHooks for EgressHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: ConnectionTask,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        drop(fut);
        let policy = self.policy.clone();
        let resolver = self.resolver.clone();
        let roots = self.roots.clone();
        let denials = self.denials.clone();
        Box::new(async move {
            let uri = request.uri().clone();
            let destination = uri.to_string();
            let origin = uri
                .authority()
                .and_then(|a| {
                    Origin::new(uri.scheme_str().unwrap_or("https"), a.host(), a.port_u16())
                })
                .ok_or(wasmtime_wasi_http::Error::HttpRequestUriInvalid)?;
            let addresses = match check(&policy, resolver.as_ref(), &origin).await {
                Ok(addresses) => addresses,
                Err(error) => {
                    denials.record(destination, error);
                    return Err(wasmtime_wasi_http::Error::HttpRequestDenied);
                }
            };
            match pinned_send::send(request, &origin, &addresses, options, &roots).await {
                Ok(answer) => Ok(answer),
                Err(SendError::Http(error)) => Err(error),
                Err(SendError::Certificate(message)) => {
                    let host = origin.host.clone();
                    denials.record(
                        destination,
                        EgressError::UntrustedCertificate { host, message },
                    );
                    Err(wasmtime_wasi_http::Error::TlsCertificateError)
                }
            }
        })
    }
}

/// Check the origin, resolve it, check every address; the addresses to use.
async fn check(
    policy: &EgressPolicy,
    resolver: &dyn Resolver,
    origin: &Origin,
) -> Result<Vec<IpAddr>, EgressError> {
    policy.check_origin(origin)?;
    let resolved = resolver
        .resolve(&origin.host, origin.port)
        .await
        .map_err(|e| EgressError::Resolution {
            host: origin.host.clone(),
            message: e.to_string(),
        })?;
    if resolved.is_empty() {
        return Err(EgressError::Resolution {
            host: origin.host.clone(),
            message: "no addresses".into(),
        });
    }
    EgressPolicy::check_resolved(&resolved)?;
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    use http_body_util::{BodyExt, Empty};
    use tokio_rustls::rustls;

    use crate::resolve::StaticResolver;

    /// What the guest's wasi:http sees when the server's certificate does not
    /// verify (the integration tests see only the call's error): the
    /// certificate error code, with the refusal logged for the call.
    #[tokio::test]
    async fn an_untrusted_certificate_is_the_guests_certificate_error_and_is_logged() {
        let certified = rcgen::generate_simple_self_signed(vec!["api.test".to_string()])
            .expect("self-signed certificate");
        let key = rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der())
            .expect("PKCS#8 key");
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)
            .expect("server config");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
            acceptor.accept(tcp).await.is_ok()
        });

        let origin = format!("https://api.test:{port}");
        let mut hooks = EgressHooks {
            policy: Arc::new(EgressPolicy::new(std::slice::from_ref(&origin)).unwrap()),
            resolver: Arc::new(StaticResolver(
                [("api.test".to_string(), vec!["127.0.0.1".parse().unwrap()])].into(),
            )),
            roots: TrustRoots::webpki(),
            denials: DenialLog::default(),
        };
        let body = Empty::new().map_err(|never| match never {}).boxed_unsync();
        let request = http::Request::get(format!("{origin}/x"))
            .body(body)
            .unwrap();
        let connection: ConnectionTask = Box::new(async { Ok(()) });
        let outcome = Box::into_pin(hooks.send_request(request, None, connection)).await;

        assert!(
            matches!(outcome, Err(wasmtime_wasi_http::Error::TlsCertificateError)),
            "the guest gets the certificate error code"
        );
        match hooks.denials.take_first() {
            Some((destination, EgressError::UntrustedCertificate { host, message })) => {
                assert_eq!(destination, format!("{origin}/x"));
                assert_eq!(host, "api.test");
                assert!(message.contains("UnknownIssuer"), "{message}");
            }
            other => panic!("expected the refusal in the log, got {other:?}"),
        }
        assert!(
            !server.await.unwrap(),
            "the handshake never completed, so nothing was sent"
        );
    }
}
