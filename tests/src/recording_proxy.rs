//! A forwarding HTTP proxy on 127.0.0.1 that keeps the form parameters of
//! every request it passes to a server (moto), so that a test can check what
//! a provider sent where the server's answer cannot show it (moto accepts
//! parameters it does not model and answers as if they were absent).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use crate::{form_params, FormParams};

pub struct RecordingProxy {
    /// `http://127.0.0.1:<port>`: give it to the provider as its endpoint.
    pub endpoint: String,
    requests: Arc<Mutex<Vec<FormParams>>>,
}

impl RecordingProxy {
    /// Listen on a free loopback port and forward every request to
    /// `upstream`, one upstream connection per request.
    pub async fn start(upstream: SocketAddr) -> RecordingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let address = listener.local_addr().expect("address");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: http::Request<hyper::body::Incoming>| {
                            let recorded = recorded.clone();
                            async move {
                                Ok::<_, std::convert::Infallible>(
                                    forward(upstream, request, &recorded).await,
                                )
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        RecordingProxy {
            endpoint: format!("http://{address}"),
            requests,
        }
    }

    /// The form parameters of every request forwarded so far, in order.
    pub fn requests(&self) -> Vec<FormParams> {
        self.requests.lock().expect("proxy record").clone()
    }
}

/// Record the request, pass it on, and hand back the upstream's answer (a
/// 502 naming what failed when the upstream could not be reached).
async fn forward(
    upstream: SocketAddr,
    request: http::Request<hyper::body::Incoming>,
    recorded: &Mutex<Vec<FormParams>>,
) -> http::Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return bad_gateway(format!("reading the request: {e}")),
    };
    recorded
        .lock()
        .expect("proxy record")
        .push(form_params(&body));
    let answer = async {
        let stream = tokio::net::TcpStream::connect(upstream)
            .await
            .map_err(|e| format!("connecting to {upstream}: {e}"))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| format!("handshake with {upstream}: {e}"))?;
        tokio::spawn(connection);
        let response = sender
            .send_request(http::Request::from_parts(parts, Full::new(body)))
            .await
            .map_err(|e| format!("forwarding to {upstream}: {e}"))?;
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| format!("reading {upstream}'s answer: {e}"))?
            .to_bytes();
        Ok::<_, String>(http::Response::from_parts(parts, Full::new(body)))
    };
    answer.await.unwrap_or_else(bad_gateway)
}

fn bad_gateway(why: String) -> http::Response<Full<Bytes>> {
    let mut response = http::Response::new(Full::new(Bytes::from(why)));
    *response.status_mut() = http::StatusCode::BAD_GATEWAY;
    response
}
