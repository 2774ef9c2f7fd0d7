//! An https server on 127.0.0.1 whose certificate a private CA signed: the
//! host's own client reaches it only with roots that trust that CA, so an
//! Entra ID endpoint or a registry behind a private CA works once the
//! operator's `--egress-ca-file` roots are passed down.

use bytes::Bytes;
use http::{Method, StatusCode};
use ipam_http_client::testing::PrivateCa;
use ipam_http_client::{request, TrustRoots};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Serves `https://127.0.0.1:PORT/` with a certificate `ca` signed,
/// answering every request `200 hello`; the URL.
async fn https_server(ca: &PrivateCa) -> String {
    let acceptor = ca.acceptor(&["127.0.0.1"]);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("https://{}/", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            // A refused handshake ends that connection only.
            let Ok(mut tls) = acceptor.accept(tcp).await else {
                continue;
            };
            let mut head = Vec::new();
            let mut chunk = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&chunk[..n]),
                }
            }
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello";
            let _ = tls.write_all(answer).await;
            let _ = tls.shutdown().await;
        }
    });
    url
}

#[tokio::test]
async fn a_private_ca_is_refused_with_the_webpki_roots_alone() {
    let url = https_server(&PrivateCa::new("private test CA")).await;
    let error = request(&TrustRoots::webpki(), Method::GET, &url, &[], Bytes::new())
        .await
        .err()
        .expect("refused");
    assert!(
        error.message.starts_with("TLS:") && error.message.contains("UnknownIssuer"),
        "{error}"
    );
}

#[tokio::test]
async fn a_private_ca_is_reached_with_roots_that_trust_it() {
    let ca = PrivateCa::new("private test CA");
    let url = https_server(&ca).await;
    let reply = request(&ca.trust(), Method::GET, &url, &[], Bytes::new())
        .await
        .expect("trusted");
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, Bytes::from_static(b"hello"));
}

#[tokio::test]
async fn trusting_another_private_ca_is_not_enough() {
    let url = https_server(&PrivateCa::new("private test CA")).await;
    let other = PrivateCa::new("another test CA").trust();
    let error = request(&other, Method::GET, &url, &[], Bytes::new())
        .await
        .err()
        .expect("refused");
    assert!(error.message.contains("UnknownIssuer"), "{error}");
}
