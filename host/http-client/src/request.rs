//! One request per fresh HTTP/1.1 connection, over TLS verified against
//! the caller's [`TrustRoots`] for https, a size cap on the answer.

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::TrustRoots;

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

/// One request; an https server's certificate must chain to `trust`.
pub async fn request(
    trust: &TrustRoots,
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
        let tls = trust
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
