//! How requests reach ARM: a [`Transport`] sends one request, sleeps, and
//! tells the time. The component's is [`WasiTransport`] (`wasi:http`
//! through the SDK's client, the host's bearer token, wstd's sleep and
//! monotonic clock on `wasi:clocks`); the unit tests give a scripted one,
//! so the ARM client's polling and paging, and how long a listing is kept,
//! are tested natively.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ipam_provider_sdk::{get_credentials, Error};

use crate::credentials;

/// One request to ARM.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: &'static str,
    pub url: String,
    /// The etag the resource must still have (`If-Match`).
    pub if_match: Option<String>,
    /// A JSON body.
    pub body: Option<Vec<u8>>,
}

/// ARM's answer, its body read.
#[derive(Debug, Clone, Default)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

impl Response {
    /// A header's value as text (names compare without case).
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .map(|v| v.trim().to_string())
    }
}

pub trait Transport {
    fn send(&self, request: &Request) -> Result<Response, Error>;
    fn sleep(&self, wait: Duration);
    /// The time on a monotonic clock, from an origin of the transport's own.
    fn now(&self) -> Duration;
}

/// `wasi:http` with the host's bearer token on every request.
pub struct WasiTransport {
    /// The origin of [`Transport::now`].
    origin: wstd::time::Instant,
}

impl WasiTransport {
    pub fn new() -> Self {
        WasiTransport {
            origin: wstd::time::Instant::now(),
        }
    }
}

impl Transport for WasiTransport {
    fn send(&self, request: &Request) -> Result<Response, Error> {
        let given = get_credentials().map_err(|why| {
            Error::Unauthorized(format!("Azure credentials: the host has none: {why}"))
        })?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let token = credentials::bearer(&given.values, given.expires_at, now)?;
        let authorization = format!("Bearer {token}");
        let mut headers = vec![
            ("authorization", authorization.as_str()),
            ("accept", "application/json"),
        ];
        if let Some(etag) = &request.if_match {
            headers.push(("if-match", etag.as_str()));
        }
        if request.body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        let body = request.body.as_deref().unwrap_or_default();
        let response = ipam_provider_sdk::http::send(request.method, &request.url, &headers, body)?;
        Ok(Response {
            status: response.status,
            headers: response.headers,
            body: response.body,
        })
    }

    fn sleep(&self, wait: Duration) {
        // The timer is made inside the runtime: wstd's sleep registers with
        // the reactor of the runtime that is current when it is created.
        wstd::runtime::block_on(async move { wstd::task::sleep(wait.into()).await });
    }

    fn now(&self) -> Duration {
        self.origin.elapsed().into()
    }
}
