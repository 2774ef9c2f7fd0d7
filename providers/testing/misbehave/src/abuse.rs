//! wasi:http used as an attacker would, below the SDK's client: host
//! resources created and never dropped, requests started and abandoned,
//! requests to many destinations with each outcome kept, requests sent
//! without the header the host refused, floods of denied requests and of log
//! lines.

use ipam_provider_sdk::bindings::wasi::clocks::monotonic_clock;
use ipam_provider_sdk::bindings::wasi::http::outgoing_handler;
use ipam_provider_sdk::bindings::wasi::http::types::{Fields, Method, OutgoingRequest, Scheme};
use ipam_provider_sdk::{http, log, LogLevel};
use serde::Deserialize;

/// Bytes of one leaked header value or path.
const LEAK_BYTES: usize = 30 * 1024;

/// The kind of host resource a `leak` creates.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub enum LeakKind {
    /// Header sets of [`LEAK_BYTES`] each.
    Fields,
    /// Outgoing requests with a path of [`LEAK_BYTES`].
    Requests,
    /// Outgoing bodies with their streams.
    Bodies,
    /// Clock pollables.
    Pollables,
    /// One header set, grown by 16 KiB values.
    OversizedHeaders,
    /// Outgoing requests whose method is a custom one of the leak's size.
    Methods,
    /// Handles on the header set of one request (`headers()`), each a copy
    /// of its 60 KiB as the host counts it.
    HeaderHandles,
}

/// Create `count` resources of `kind` (each of `size` bytes where the kind
/// has a size, else [`LEAK_BYTES`]), holding every one (they are never
/// dropped, not even when this returns), until the host refuses one: what
/// the host answered, or that all were made.
pub fn leak(kind: LeakKind, count: u32, size: Option<usize>) -> String {
    let size = size.unwrap_or(LEAK_BYTES);
    // A method is a token: letters will do. Made once, passed by reference.
    let method = Method::Other("M".repeat(size));
    // The request whose header set `header-handles` takes handles on: 15
    // values of 4 KiB (a request's headers are immutable once it is made).
    let shared_headers = Fields::new();
    if kind == LeakKind::HeaderHandles {
        for n in 0..15 {
            if let Err(error) = shared_headers.append(&format!("x-shared-{n}"), &[b's'; 4096]) {
                return format!("{kind:?}: the shared header set was refused: {error:?}");
            }
        }
    }
    let shared = OutgoingRequest::new(shared_headers);
    let mut fields = Vec::new();
    let mut requests = Vec::new();
    let mut bodies = Vec::new();
    let mut streams = Vec::new();
    let mut pollables = Vec::new();
    let oversized = Fields::new();
    let mut outcome = format!("{kind:?}: all {count} made");
    for made in 0..count {
        let refused = match kind {
            LeakKind::Fields => {
                let set = Fields::new();
                let appended = set.append("x-leak", &vec![b'a'; LEAK_BYTES]);
                fields.push(set);
                appended.err().map(|e| format!("{e:?}"))
            }
            LeakKind::Requests => {
                let request = OutgoingRequest::new(Fields::new());
                let path = format!("/{}", "a".repeat(LEAK_BYTES));
                let set = request.set_path_with_query(Some(&path));
                requests.push(request);
                set.err()
                    .map(|()| "set-path-with-query refused".to_string())
            }
            LeakKind::Bodies => {
                let request = OutgoingRequest::new(Fields::new());
                let body = request.body();
                requests.push(request);
                match body {
                    Ok(body) => {
                        if let Ok(stream) = body.write() {
                            streams.push(stream);
                        }
                        bodies.push(body);
                        None
                    }
                    Err(()) => Some("body refused".to_string()),
                }
            }
            LeakKind::Pollables => {
                pollables.push(monotonic_clock::subscribe_duration(1_000_000_000));
                None
            }
            LeakKind::OversizedHeaders => oversized
                .append(&format!("x-big-{made}"), &vec![b'b'; 16 * 1024])
                .err()
                .map(|e| format!("{e:?}")),
            LeakKind::Methods => {
                let request = OutgoingRequest::new(Fields::new());
                let set = request.set_method(&method);
                requests.push(request);
                set.err().map(|()| "set-method refused".to_string())
            }
            LeakKind::HeaderHandles => {
                fields.push(shared.headers());
                None
            }
        };
        if let Some(error) = refused {
            outcome = format!("{kind:?}: refused after {made}: {error}");
            break;
        }
    }
    std::mem::forget((
        fields, requests, bodies, streams, pollables, oversized, shared,
    ));
    outcome
}

/// Start `count` GETs of `url` (`http://host:port/path`), wait `linger_ms`
/// for them to connect, and return without reading any answer or dropping
/// any handle: how many `handle` accepted.
pub fn abandon(url: &str, count: u32, linger_ms: u64) -> Result<String, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut futures = Vec::new();
    let mut refused = 0;
    for _ in 0..count {
        let request = OutgoingRequest::new(Fields::new());
        let set = request
            .set_scheme(Some(&Scheme::Http))
            .and_then(|()| request.set_authority(Some(authority)))
            .and_then(|()| request.set_path_with_query(Some(path)));
        set.map_err(|()| format!("{url}: the request was refused"))?;
        match outgoing_handler::handle(request, None) {
            Ok(future) => futures.push(future),
            Err(_) => refused += 1,
        }
    }
    monotonic_clock::subscribe_duration(linger_ms * 1_000_000).block();
    let started = futures.len();
    std::mem::forget(futures);
    Ok(format!("started {started}, refused {refused}"))
}

/// GET each URL: per URL, its status or the error the guest got.
pub fn fetch_each(urls: &[String]) -> Vec<String> {
    urls.iter()
        .map(|url| match http::send("GET", url, &[], &[]) {
            Ok(response) => format!("{url} answered {}", response.status),
            Err(error) => format!("{url} failed: {error}"),
        })
        .collect()
}

/// POST `upload` bytes to `url` and read the whole answer: its status and
/// length.
pub fn transfer(url: &str, upload: usize) -> Result<String, ipam_provider_sdk::Error> {
    let response = http::send("POST", url, &[], &vec![b'u'; upload])?;
    Ok(format!("{} {}", response.status, response.body.len()))
}

/// GET `url` (`http://host:port/path`) with a header of `header_bytes`,
/// whatever the host answers to adding it: what the send was answered.
pub fn send_refused_header(url: &str, header_bytes: usize) -> Result<String, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let headers = Fields::new();
    let appended = headers.append("x-large", &vec![b'h'; header_bytes]);
    let request = OutgoingRequest::new(headers);
    request
        .set_scheme(Some(&Scheme::Http))
        .and_then(|()| request.set_authority(Some(authority)))
        .and_then(|()| request.set_path_with_query(Some(path)))
        .map_err(|()| format!("{url}: the request was refused"))?;
    let sent = match outgoing_handler::handle(request, None) {
        Err(error) => format!("send refused: {error:?}"),
        Ok(future) => {
            future.subscribe().block();
            match future.get() {
                Some(Ok(Ok(response))) => format!("answered {}", response.status()),
                Some(Ok(Err(error))) => format!("failed: {error:?}"),
                other => format!("no answer: {other:?}"),
            }
        }
    };
    Ok(format!("append: {:?}; {sent}", appended.err()))
}

/// Send `count` GETs to an origin of a `host_bytes` name and a path of
/// `path_bytes` (on no allow-list: each is denied), waiting for each: how
/// many were denied and how many authorities the host refused to take (the
/// request then goes with a short unlisted one).
pub fn denied_flood(count: u32, host_bytes: usize, path_bytes: usize) -> String {
    let authority = format!("{}.test:9", "a".repeat(host_bytes));
    let path = format!("/{}", "p".repeat(path_bytes));
    let (mut denied, mut authority_refused, mut other) = (0, 0, 0);
    for _ in 0..count {
        let request = OutgoingRequest::new(Fields::new());
        let _ = request.set_scheme(Some(&Scheme::Http));
        if request.set_authority(Some(&authority)).is_err() {
            authority_refused += 1;
            let _ = request.set_authority(Some("unlisted.test:9"));
        }
        let _ = request.set_path_with_query(Some(&path));
        let outcome = outgoing_handler::handle(request, None).map(|future| {
            future.subscribe().block();
            future.get()
        });
        match outcome {
            Ok(Some(Ok(Err(_)))) | Err(_) => denied += 1,
            _ => other += 1,
        }
    }
    format!("denied {denied}, authority refused {authority_refused}, other {other}")
}

/// Log `lines` lines of `bytes` bytes each.
pub fn log_flood(lines: u32, bytes: usize) {
    let line = "l".repeat(bytes);
    for _ in 0..lines {
        log(LogLevel::Info, &line);
    }
}
