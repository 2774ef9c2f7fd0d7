//! The wasi:http send hook: every outgoing request of a guest passes the
//! provider's [`EgressPolicy`] twice (origin, then resolved addresses) and is
//! then sent to exactly the addresses that were checked, over TLS verified
//! against the provider's trust roots for https. A refusal (by the policy, or
//! of a server certificate that does not verify) is recorded so the call that
//! made it can be reported as egress denied rather than as whatever the guest
//! made of the error; the guest itself sees `HTTP-request-denied`,
//! `destination-IP-prohibited` or `TLS-certificate-error`.
//!
//! Once the host-resource budget refused the call something, the call sends
//! nothing more ([`EgressHooks::sends_refused`]).
//!
//! Every request belongs to the call that started it ([`CallScope`]): when
//! the call ends its requests and connections are cancelled and their sockets
//! closed. An instance has at most [`crate::CallLimits::concurrent_requests`]
//! open at once, and the bodies of one call carry at most
//! [`crate::CallLimits::call_body_bytes`].

use std::future::Future;
use std::net::IpAddr;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;

use ipam_http_client::TrustRoots;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use crate::body_budget::{metered, BodyBudget, Direction};
use crate::denials::DenialLog;
use crate::egress::{check_authority, EgressError, EgressPolicy, Origin};
use crate::guest_text;
use crate::host_budget::BODY_CHUNK_BYTES;
use crate::pinned_send::{self, ConnectionTask, SendError};
use crate::resolve::Resolver;

/// What the requests of one call share: the signal that the call ended
/// (the sender is dropped) and the call's body budget.
pub struct CallScope {
    ended: watch::Sender<()>,
    bodies: Arc<BodyBudget>,
    /// Whether this call's refusal for too many requests was logged.
    over_concurrency_logged: Arc<AtomicBool>,
}

impl CallScope {
    pub fn new(body_bytes: u64) -> Self {
        Self {
            ended: watch::channel(()).0,
            bodies: Arc::new(BodyBudget::new(body_bytes)),
            over_concurrency_logged: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// Resolves once the call whose receiver this is has ended.
async fn call_ended(mut ended: watch::Receiver<()>) {
    while ended.changed().await.is_ok() {}
}

/// `work`, unless the call ends first (`None`; `work` is dropped).
async fn within_call<F: Future>(ended: watch::Receiver<()>, work: F) -> Option<F::Output> {
    let mut work = pin!(work);
    let mut end = pin!(call_ended(ended));
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        end.as_mut().poll(cx).map(|()| None)
    })
    .await
}

pub struct EgressHooks {
    pub policy: Arc<EgressPolicy>,
    pub resolver: Arc<dyn Resolver>,
    pub roots: TrustRoots,
    pub denials: DenialLog,
    /// The instance's open requests, at most its `concurrent_requests`.
    pub requests: Arc<Semaphore>,
    pub call_body_bytes: u64,
    pub call: CallScope,
    /// Whether the current call sent anything; if not, its scope has nothing
    /// to end and is kept, which spares a call without egress the cost of a
    /// new one.
    pub call_sent: bool,
    /// Whether the host-resource budget refused the current call something:
    /// it then sends nothing more (`HTTP-request-denied`), so no request
    /// goes out without the header or URL the guest was refused.
    pub sends_refused: bool,
}

impl EgressHooks {
    /// End the current call: its requests and connections are cancelled, and
    /// the next call starts with a fresh body budget.
    pub fn end_call(&mut self) {
        self.sends_refused = false;
        if std::mem::take(&mut self.call_sent) {
            self.call = CallScope::new(self.call_body_bytes);
        }
    }

    /// A permit for one more open request, or the refusal, logged once a call.
    fn request_permit(&self) -> Result<OwnedSemaphorePermit, Error> {
        self.requests.clone().try_acquire_owned().map_err(|_| {
            if !self
                .call
                .over_concurrency_logged
                .swap(true, Ordering::Relaxed)
            {
                tracing::warn!(
                    "provider has too many open requests; refusing more (connection-limit-reached)"
                );
            }
            Error::ConnectionLimitReached
        })
    }
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
        if self.sends_refused {
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        self.call_sent = true;
        let permit = match self.request_permit() {
            Ok(permit) => permit,
            Err(error) => return Box::new(async { Err(error) }),
        };
        let policy = self.policy.clone();
        let resolver = self.resolver.clone();
        let roots = self.roots.clone();
        let denials = self.denials.clone();
        let ended = self.call.ended.subscribe();
        let bodies = self.call.bodies.clone();
        Box::new(async move {
            let uri = request.uri().clone();
            let destination = uri.to_string();
            let checked = async {
                let bad_origin = || EgressError::BadOrigin(guest_text::kept(&destination));
                let authority = uri.authority().ok_or_else(bad_origin)?;
                check_authority(authority.as_str())?;
                let origin = Origin::new(
                    uri.scheme_str().unwrap_or("https"),
                    authority.host(),
                    authority.port_u16(),
                )
                .ok_or_else(bad_origin)?;
                let addresses = check(&policy, resolver.as_ref(), &origin).await?;
                Ok::<_, EgressError>((origin, addresses))
            };
            let (origin, addresses) = match within_call(ended.clone(), checked).await {
                None => return Err(Error::ConnectionTerminated),
                Some(Ok(checked)) => checked,
                Some(Err(error)) => {
                    let code = refusal_code(&error);
                    denials.record(&destination, error);
                    return Err(code);
                }
            };
            let request = request.map(|body| metered(body, bodies.clone(), Direction::Request));
            let sent = within_call(
                ended.clone(),
                pinned_send::send(request, &origin, &addresses, options, &roots),
            )
            .await;
            let (response, connection) = match sent {
                None => return Err(Error::ConnectionTerminated),
                Some(Ok(answer)) => answer,
                Some(Err(SendError::Http(error))) => {
                    let destination = guest_text::cut(&destination, guest_text::KEPT_BYTES);
                    tracing::warn!(%destination, %error, "provider request failed");
                    return Err(error);
                }
                Some(Err(SendError::Certificate(message))) => {
                    let host = origin.host.clone();
                    denials.record(
                        &destination,
                        EgressError::UntrustedCertificate { host, message },
                    );
                    return Err(Error::TlsCertificateError);
                }
            };
            let response = response.map(|body| metered(body, bodies, Direction::Response));
            // The connection (and with it the permit and the socket) lives
            // until the exchange is done or the call ends, whichever is first.
            let connection: ConnectionTask = Box::new(async move {
                let _permit = permit;
                within_call(ended, Pin::from(connection))
                    .await
                    .unwrap_or(Ok(()))
            });
            Ok((response, connection))
        })
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        BODY_CHUNK_BYTES
    }

    // The hook above logged the failure once; these only name it for the
    // guest.
    fn p2_error_from_hyper(&mut self, error: &hyper::Error) -> ErrorCode {
        use std::error::Error as _;
        match error
            .source()
            .and_then(|cause| cause.downcast_ref::<Error>())
        {
            Some(Error::HttpRequestBodySize(size)) => ErrorCode::HttpRequestBodySize(*size),
            Some(Error::HttpResponseBodySize(size)) => ErrorCode::HttpResponseBodySize(*size),
            _ if error.is_timeout() => ErrorCode::ConnectionReadTimeout,
            _ if error.is_incomplete_message() => ErrorCode::HttpResponseIncomplete,
            _ if error.is_closed() || error.is_canceled() => ErrorCode::ConnectionTerminated,
            _ => ErrorCode::HttpProtocolError,
        }
    }

    fn p2_error_from_connect(&mut self, error: &std::io::Error) -> ErrorCode {
        pinned_send::connect_error_code(error)
    }

    fn p2_error_from_tls(&mut self, _error: &std::io::Error) -> ErrorCode {
        ErrorCode::TlsProtocolError
    }
}

/// What the guest is told of a refusal.
fn refusal_code(error: &EgressError) -> Error {
    match error {
        EgressError::ForbiddenAddress { .. } => Error::DestinationIpProhibited,
        EgressError::Resolution { .. } => Error::DestinationNotFound,
        EgressError::Userinfo { .. } | EgressError::BadOrigin(_) => Error::HttpRequestUriInvalid,
        EgressError::NotAllowed { .. } | EgressError::UntrustedCertificate { .. } => {
            Error::HttpRequestDenied
        }
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
    policy.check_resolved(&resolved)?;
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
            requests: Arc::new(Semaphore::new(4)),
            call_body_bytes: 1 << 20,
            call: CallScope::new(1 << 20),
            call_sent: false,
            sends_refused: false,
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
        match hooks.denials.take().first {
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
