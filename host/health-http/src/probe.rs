//! A blocking GET of these endpoints, as a kubelet's `httpGet` probe or a
//! scraper would make it: what the process tests use to wait for readiness
//! and read metrics.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `GET path` over HTTP/1.0 at `address` (`host:port`): the status code and
/// the body, or None when nothing answers (yet) or the answer is not HTTP.
pub fn get(address: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}
