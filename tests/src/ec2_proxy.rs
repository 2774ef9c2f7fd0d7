//! An HTTP proxy on 127.0.0.1 between an EC2 client (the AWS provider) and
//! an EC2 endpoint (moto): it records each request's `Action` and
//! parameters (moto accepts parameters it does not model and answers as if
//! they were absent: only the request shows they were sent), and can spring
//! a trap on a chosen action at a chosen moment,
//! telling the test, which then kills the client:
//! - [`Moment::Before`]: the request never reaches the cloud;
//! - [`Moment::After`]: the cloud did it, and the answer is held, so the
//!   client never learns it (a kill between a cloud call and what the
//!   client would have written next).
//!
//! One connection to the endpoint per request: EC2 Query requests are
//! independent, and a held answer must not stall the others.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::form_params;

/// One EC2 Query request as the proxy saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ec2Request {
    pub action: String,
    pub params: BTreeMap<String, String>,
}

/// When a trap springs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// The request is stopped before it reaches the cloud.
    Before,
    /// The request reaches the cloud; its answer is held.
    After,
}

struct Trap {
    action: String,
    moment: Moment,
    sprung: oneshot::Sender<()>,
}

#[derive(Default)]
struct State {
    requests: Vec<Ec2Request>,
    trap: Option<Trap>,
}

#[derive(Clone)]
pub struct Ec2Proxy {
    /// The proxy's URL, for the provider's `endpoint` and egress allow-list.
    pub endpoint: String,
    state: Arc<Mutex<State>>,
}

fn bad_gateway(why: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(why)));
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response
}

async fn forward(
    upstream: SocketAddr,
    request: Request<Full<Bytes>>,
) -> Result<Response<Full<Bytes>>, String> {
    let stream = TcpStream::connect(upstream)
        .await
        .map_err(|e| format!("connecting to {upstream}: {e}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake with {upstream}: {e}"))?;
    tokio::spawn(connection);
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("forwarding to {upstream}: {e}"))?;
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| format!("reading {upstream}'s answer: {e}"))?
        .to_bytes();
    Ok(Response::from_parts(parts, Full::new(body)))
}

impl Ec2Proxy {
    /// A proxy to `upstream` (`http://127.0.0.1:PORT`), serving until the
    /// runtime ends.
    pub async fn start(upstream: &str) -> Ec2Proxy {
        let upstream: SocketAddr = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .unwrap_or_else(|e| panic!("{upstream}: not http://ADDRESS:PORT ({e})"));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let address = listener.local_addr().expect("the proxy's address");
        let proxy = Ec2Proxy {
            endpoint: format!("http://{address}"),
            state: Arc::default(),
        };
        let serving = proxy.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let proxy = serving.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: Request<hyper::body::Incoming>| {
                            let proxy = proxy.clone();
                            async move { Ok::<_, Infallible>(proxy.handle(upstream, request).await) }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        proxy
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Ec2Request> {
        self.with(|s| s.requests.clone())
    }

    /// Spring on the next `action` at `moment` (replacing any trap set);
    /// the receiver hears when it sprang.
    pub fn trap(&self, action: &str, moment: Moment) -> oneshot::Receiver<()> {
        let (sprung, heard) = oneshot::channel();
        self.with(|s| {
            s.trap = Some(Trap {
                action: action.to_string(),
                moment,
                sprung,
            })
        });
        heard
    }

    /// No trap: every request goes through.
    pub fn disarm(&self) {
        self.with(|s| s.trap = None);
    }

    /// Take the trap if it is set for `action` at `moment`.
    fn spring(&self, action: &str, moment: Moment) -> Option<oneshot::Sender<()>> {
        self.with(|s| match &s.trap {
            Some(trap) if trap.action == action && trap.moment == moment => {
                s.trap.take().map(|trap| trap.sprung)
            }
            _ => None,
        })
    }

    async fn handle(
        &self,
        upstream: SocketAddr,
        request: Request<hyper::body::Incoming>,
    ) -> Response<Full<Bytes>> {
        let (parts, body) = request.into_parts();
        let body = match body.collect().await {
            Ok(body) => body.to_bytes(),
            Err(error) => return bad_gateway(format!("reading the request: {error}")),
        };
        let mut params: BTreeMap<String, String> = form_params(&body).into_iter().collect();
        let action = params.remove("Action").unwrap_or_default();
        self.with(|s| {
            s.requests.push(Ec2Request {
                action: action.clone(),
                params,
            })
        });
        if let Some(sprung) = self.spring(&action, Moment::Before) {
            let _ = sprung.send(());
            return hold().await;
        }
        let answer = match forward(upstream, Request::from_parts(parts, Full::new(body))).await {
            Ok(answer) => answer,
            Err(why) => return bad_gateway(why),
        };
        if let Some(sprung) = self.spring(&action, Moment::After) {
            let _ = sprung.send(());
            return hold().await;
        }
        answer
    }
}

/// Never answer: the client is killed while it waits (or gives up).
async fn hold() -> Response<Full<Bytes>> {
    std::future::pending().await
}
