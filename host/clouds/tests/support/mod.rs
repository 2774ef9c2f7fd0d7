//! A small HTTP/1.1 stub on 127.0.0.1 for the metadata-service and token
//! endpoint tests: it reads one request (head and Content-Length body) per
//! connection (the host's client opens one per
//! request), records it, and answers what the test's handler says. Plain
//! http, or https with a certificate of the test's private CA.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// The most of a request head the stub reads.
const MAX_HEAD: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct StubRequest {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    /// Names lower-cased.
    pub headers: Vec<(String, String)>,
    /// As many bytes as Content-Length says, as text.
    pub body: String,
}

impl StubRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub type Handler = dyn Fn(&StubRequest) -> (u16, String) + Send + Sync;

pub struct Stub {
    pub url: String,
    pub requests: Arc<Mutex<Vec<StubRequest>>>,
}

impl Stub {
    pub fn requests(&self) -> Vec<StubRequest> {
        self.requests.lock().expect("stub requests").clone()
    }
}

/// Serve `handler` over plain http until the test ends.
pub async fn serve(handler: Arc<Handler>) -> Stub {
    serve_on(handler, None).await
}

/// Serve `handler` over https until the test ends, presenting `tls`'s
/// certificate; a connection whose handshake fails is dropped unrecorded.
pub async fn serve_tls(handler: Arc<Handler>, tls: TlsAcceptor) -> Stub {
    serve_on(handler, Some(tls)).await
}

async fn serve_on(handler: Arc<Handler>, tls: Option<TlsAcceptor>) -> Stub {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind stub");
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!(
        "{scheme}://{}",
        listener.local_addr().expect("stub address")
    );
    let requests = Arc::new(Mutex::new(Vec::new()));
    let recorded = requests.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let handler = handler.clone();
            let recorded = recorded.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    None => answer(stream, &*handler, &recorded).await,
                    Some(tls) => {
                        if let Ok(stream) = tls.accept(stream).await {
                            answer(stream, &*handler, &recorded).await
                        }
                    }
                }
            });
        }
    });
    Stub { url, requests }
}

/// A server that accepts connections and never answers.
pub async fn silent() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind stub");
    let url = format!("http://{}", listener.local_addr().expect("stub address"));
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    url
}

/// An address where nothing listens.
pub async fn closed() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    drop(listener);
    url
}

async fn answer<S>(mut stream: S, handler: &Handler, recorded: &Mutex<Vec<StubRequest>>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
        assert!(head.len() <= MAX_HEAD, "stub: request head too large");
    }
    let Some(head_end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
        return;
    };
    let text = String::from_utf8_lossy(&head[..head_end]).into_owned();
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_string();
    let target = request_line.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    let length = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse::<usize>().ok())
        .unwrap_or(0);
    assert!(length <= MAX_HEAD, "stub: request body too large");
    let mut body = head[head_end + 4..].to_vec();
    while body.len() < length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let request = StubRequest {
        method,
        target,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let (status, body) = handler(&request);
    recorded.lock().expect("stub requests").push(request);
    let response = format!(
        "HTTP/1.1 {status} Stub\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
