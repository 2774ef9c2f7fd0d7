//! What both process tests need: a free port, a GET against the operator's
//! endpoints, a kubeconfig for the fake API server.

use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

/// `GET path` over HTTP/1.0; the status code and the body, or None when the
/// operator does not answer (yet).
pub fn http_get(address: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub use ipam_tests::fake_apiserver::write_kubeconfig;

/// Send SIGTERM to `child` and wait up to 10 s for it to exit.
pub async fn terminate(child: &mut Child) -> ExitStatus {
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    for _ in 0..100 {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the operator did not stop within 10 s of SIGTERM");
}
