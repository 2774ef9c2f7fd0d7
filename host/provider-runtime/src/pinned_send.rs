//! Sends a guest's HTTP request over a connection to an address the egress
//! policy already checked (TLS, when asked, still verifies the certificate for
//! the host name the guest used, against the provider's trust roots).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

use ipam_http_client::TrustRoots;
use tokio_rustls::rustls;

use crate::egress::Origin;

/// Used when the guest sets no timeout; the call's own deadline bounds all.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

pub type ConnectionTask = Box<dyn Future<Output = Result<(), Error>> + Send>;

async fn connect(addresses: &[IpAddr], port: u16) -> Result<TcpStream, Error> {
    let mut last = None;
    for &ip in addresses {
        match TcpStream::connect(SocketAddr::new(ip, port)).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last = Some(error),
        }
    }
    Err(last.map_or(Error::DestinationNotFound, |error| connect_error(&error)))
}

/// EMFILE and ENFILE: the process or the system is out of descriptors.
const OUT_OF_DESCRIPTORS: [i32; 2] = [24, 23];

/// What a failed connect is, in wasi:http's terms: refused, unreachable,
/// timed out, out of descriptors, or (with its text) anything else.
fn connect_error(error: &std::io::Error) -> Error {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::ConnectionRefused => Error::ConnectionRefused,
        ErrorKind::NetworkUnreachable => Error::DestinationIpUnroutable,
        ErrorKind::HostUnreachable => Error::DestinationUnavailable,
        ErrorKind::TimedOut => Error::ConnectionTimeout,
        _ if error
            .raw_os_error()
            .is_some_and(|code| OUT_OF_DESCRIPTORS.contains(&code)) =>
        {
            Error::ConnectionLimitReached
        }
        _ => Error::InternalError(Some(format!("connecting: {error}"))),
    }
}

/// [`connect_error`] as the guest's error code.
pub fn connect_error_code(error: &std::io::Error) -> ErrorCode {
    match connect_error(error) {
        Error::ConnectionRefused => ErrorCode::ConnectionRefused,
        Error::DestinationIpUnroutable => ErrorCode::DestinationIpUnroutable,
        Error::DestinationUnavailable => ErrorCode::DestinationUnavailable,
        Error::ConnectionTimeout => ErrorCode::ConnectionTimeout,
        Error::ConnectionLimitReached => ErrorCode::ConnectionLimitReached,
        _ => ErrorCode::InternalError(Some(format!("connecting: {error}"))),
    }
}

/// Why a request was not answered.
pub enum SendError {
    /// The server's certificate did not verify: the handshake was abandoned
    /// before any of the request was sent. Kept apart so the hook can report
    /// it as a refusal rather than as a network failure.
    Certificate(String),
    Http(Error),
}

impl From<Error> for SendError {
    fn from(error: Error) -> Self {
        SendError::Http(error)
    }
}

/// A failed TLS handshake: a certificate the roots do not vouch for (or that
/// names another host), or any other TLS failure.
fn tls_failure(error: std::io::Error) -> SendError {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(invalid @ rustls::Error::InvalidCertificate(_)) => {
            SendError::Certificate(invalid.to_string())
        }
        _ => SendError::Http(Error::Tls(error)),
    }
}

pub async fn send(
    request: http::Request<WasiBody>,
    origin: &Origin,
    addresses: &[IpAddr],
    options: Option<RequestOptions>,
    roots: &TrustRoots,
) -> Result<(http::Response<WasiBody>, ConnectionTask), SendError> {
    let connect_timeout = options
        .and_then(|o| o.connect_timeout)
        .unwrap_or(DEFAULT_TIMEOUT);
    let first_byte_timeout = options
        .and_then(|o| o.first_byte_timeout)
        .unwrap_or(DEFAULT_TIMEOUT);
    let tcp = tokio::time::timeout(connect_timeout, connect(addresses, origin.port))
        .await
        .map_err(|_| Error::ConnectionTimeout)??;
    if origin.scheme == "https" {
        let name = match origin.host.parse::<IpAddr>() {
            Ok(ip) => rustls::pki_types::ServerName::from(ip),
            Err(_) => {
                rustls::pki_types::ServerName::try_from(origin.host.clone()).map_err(Error::from)?
            }
        };
        let tls = tokio::time::timeout(connect_timeout, roots.connector().connect(name, tcp))
            .await
            .map_err(|_| Error::ConnectionTimeout)?
            .map_err(tls_failure)?;
        Ok(exchange(request, tls, first_byte_timeout).await?)
    } else {
        Ok(exchange(request, tcp, first_byte_timeout).await?)
    }
}

async fn exchange<S>(
    mut request: http::Request<WasiBody>,
    stream: S,
    first_byte_timeout: Duration,
) -> Result<(http::Response<WasiBody>, ConnectionTask), Error>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    // The request line carries only the path; the Host header names the origin.
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(path)
        .build()
        .map_err(|_| Error::HttpRequestUriInvalid)?;

    // The connection must be driven while the response is awaited.
    let mut connection = Some(connection);
    let mut response = std::pin::pin!(sender.send_request(request));
    let waiting = std::future::poll_fn(|cx| {
        if let Poll::Ready(result) = response.as_mut().poll(cx) {
            return Poll::Ready(result.map_err(Error::from));
        }
        if let Some(conn) = connection.as_mut() {
            if let Poll::Ready(result) = Pin::new(conn).poll(cx) {
                connection = None;
                if let Err(error) = result {
                    return Poll::Ready(Err(Error::from(error)));
                }
                return response.as_mut().poll(cx).map_err(Error::from);
            }
        }
        Poll::Pending
    });
    let response = tokio::time::timeout(first_byte_timeout, waiting)
        .await
        .map_err(|_| Error::ConnectionReadTimeout)??;
    let task: ConnectionTask = Box::new(async move {
        match connection {
            Some(conn) => conn.await.map_err(Error::from),
            None => Ok(()),
        }
    });
    Ok((
        response.map(|body| body.map_err(Error::from).boxed_unsync()),
        task,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::{Error as IoError, ErrorKind};

    #[test]
    fn connect_failures_keep_what_happened() {
        let code = |error: IoError| connect_error_code(&error);
        assert!(matches!(
            code(ErrorKind::ConnectionRefused.into()),
            ErrorCode::ConnectionRefused
        ));
        assert!(matches!(
            code(ErrorKind::NetworkUnreachable.into()),
            ErrorCode::DestinationIpUnroutable
        ));
        assert!(matches!(
            code(ErrorKind::HostUnreachable.into()),
            ErrorCode::DestinationUnavailable
        ));
        assert!(matches!(
            code(ErrorKind::TimedOut.into()),
            ErrorCode::ConnectionTimeout
        ));
        assert!(matches!(
            code(IoError::from_raw_os_error(24)),
            ErrorCode::ConnectionLimitReached
        ));
        match code(ErrorKind::PermissionDenied.into()) {
            ErrorCode::InternalError(Some(message)) => {
                assert!(message.starts_with("connecting: "), "{message}")
            }
            other => panic!("expected an internal error with its text, got {other:?}"),
        }
    }
}
