//! wasi:http used as an attacker would, below the SDK's client: host
//! resources created and never dropped, requests started and abandoned, and
//! requests to many destinations with each outcome kept.

use ipam_provider_sdk::bindings::wasi::clocks::monotonic_clock;
use ipam_provider_sdk::bindings::wasi::http::outgoing_handler;
use ipam_provider_sdk::bindings::wasi::http::types::{Fields, OutgoingRequest, Scheme};
use ipam_provider_sdk::http;
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
}

/// Create `count` resources of `kind`, holding every one (they are never
/// dropped, not even when this returns), until the host refuses one: what
/// the host answered, or that all were made.
pub fn leak(kind: LeakKind, count: u32) -> String {
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
        };
        if let Some(error) = refused {
            outcome = format!("{kind:?}: refused after {made}: {error}");
            break;
        }
    }
    std::mem::forget((fields, requests, bodies, streams, pollables, oversized));
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
