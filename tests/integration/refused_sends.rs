//! A request the host refused part of never goes out: once a call's
//! instance is over its host-resource budget (a header the guest could not
//! add, say), the rest of the call sends nothing, so a request never reaches
//! a server without what the guest meant it to carry.

use ipam_tests as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{misbehave, still_serves};
use ipam_cloud::{CloudApi, CloudError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Answers every request 204 at once; counts the connections.
async fn counting_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counting = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counting.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let _ = socket.read(&mut buffer).await;
                let _ = socket
                    .write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (port, accepted)
}

#[tokio::test]
async fn a_request_whose_header_the_budget_refused_is_not_sent() {
    let (port, accepted) = counting_server().await;
    // 100 KiB: over the 64 KiB one header set may hold.
    let settings = serde_json::json!({
        "mode": "send-refused-header",
        "url": format!("http://127.0.0.1:{port}/x"),
        "header-bytes": 100 << 10,
    });
    let provider = misbehave(settings, |c| {
        c.egress = vec![format!("http://127.0.0.1:{port}")];
    })
    .await;
    match provider.get_vpcs().await {
        Err(CloudError::Trap { message, .. }) => {
            assert!(message.contains("in one header set"), "{message}")
        }
        other => panic!("expected the budget's error, got {other:?}"),
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "the request went out without its header"
    );
    still_serves(&provider).await;
}
