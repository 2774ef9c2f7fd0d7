//! A hostile guest is contained: the host resources it leaks stay under the
//! instance's budget (the host's RSS with them), the requests it abandons
//! are closed when its call ends, every spelling of a special address is
//! refused before any connect, and its bodies stop at the call's byte
//! budget. Every server is one the test starts on 127.0.0.1.

use ipam_tests as common;

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::rss;
use common::{misbehave, still_serves};
use ipam_cloud::{CloudApi, CloudError, ProviderError};
use ipam_provider_runtime::host_budget::ENTRY_BYTES;
use ipam_provider_runtime::resolve::StaticResolver;
use ipam_provider_runtime::CallLimits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The environment variable naming the kind the child process leaks.
const LEAK_KIND: &str = "IPAM_TEST_LEAK_KIND";

/// One kind of leak: the kind, how many and how large (the guest's
/// default, 30 KiB, where `None`), what the guest is refused with (None when
/// the host traps it: the entry cap, or a function with no error), and what
/// the budget error names.
struct Leak {
    kind: &'static str,
    count: u32,
    size: Option<usize>,
    guest_saw: Option<&'static str>,
    budget: &'static str,
}

const LEAKS: &[Leak] = &[
    Leak {
        kind: "fields",
        count: 20_000,
        size: None,
        guest_saw: Some("refused after"),
        budget: "bytes of header sets",
    },
    Leak {
        kind: "requests",
        count: 20_000,
        size: None,
        guest_saw: Some("set-path-with-query refused"),
        budget: "bytes of header sets",
    },
    Leak {
        kind: "bodies",
        count: 20_000,
        size: None,
        guest_saw: Some("body refused"),
        budget: "bytes of header sets",
    },
    Leak {
        kind: "pollables",
        count: 20_000,
        size: None,
        guest_saw: None,
        budget: "resource-table entries",
    },
    Leak {
        kind: "oversized-headers",
        count: 20_000,
        size: None,
        guest_saw: Some("Forbidden"),
        budget: "in one header set",
    },
    // The case: 300 requests with a 4 MiB method each (1.2 GB
    // unbudgeted).
    Leak {
        kind: "methods",
        count: 300,
        size: Some(4 << 20),
        guest_saw: Some("set-method refused"),
        budget: "bytes of header sets",
    },
    // 1,000 handles on one 60 KiB header set: each counts as its copy, and
    // `headers()` has no error, so the call that takes one too many traps
    // (it used to succeed and leave the next call over budget).
    Leak {
        kind: "header-handles",
        count: 1_000,
        size: None,
        guest_saw: None,
        budget: "bytes of header sets",
    },
];

/// A memory cap like the issue's `--memory-mib 16`, the default budgets.
fn leak_limits() -> CallLimits {
    CallLimits {
        memory_bytes: 16 << 20,
        ..CallLimits::default()
    }
}

#[test]
fn every_kind_of_leaked_host_resource_is_refused_within_the_budget() {
    // Each kind leaks in a process of its own (this binary, running the
    // test below), so that the RSS measured is the leaking guest's host and
    // not the other tests running beside this one.
    let limits = leak_limits();
    // What the instance's linear memory and host resources may hold, plus
    // the runtime's own working memory (a fresh instance, the compiled
    // component mapped in): the bound the RSS stays under.
    let bound = limits.memory_bytes + limits.host_bytes + limits.host_entries * ENTRY_BYTES;
    let working = 32 << 20;
    for Leak { kind, .. } in LEAKS {
        let grown = rss::in_own_process(
            "contained_guests::a_leaking_guest_in_a_process_of_its_own",
            LEAK_KIND,
            kind,
        )
        .growth;
        assert!(
            grown < bound + working,
            "{kind}: RSS grew by {} MiB; the budget bound is {} MiB",
            grown >> 20,
            bound >> 20
        );
    }
}

#[tokio::test]
#[ignore = "run by every_kind_of_leaked_host_resource_is_refused_within_the_budget, one process per kind"]
async fn a_leaking_guest_in_a_process_of_its_own() {
    let kind = std::env::var(LEAK_KIND)
        .unwrap_or_else(|_| panic!("{LEAK_KIND} names the kind to leak; the parent test sets it"));
    let &Leak {
        count,
        size,
        guest_saw,
        budget,
        ..
    } = LEAKS
        .iter()
        .find(|leak| leak.kind == kind)
        .unwrap_or_else(|| panic!("{LEAK_KIND}={kind} is not a kind of leak"));
    let settings = serde_json::json!({"mode": "leak", "kind": kind, "count": count, "size": size});
    let provider = misbehave(settings, |c| c.limits = leak_limits()).await;
    still_serves(&provider).await;
    let before = rss::resident_bytes("VmRSS");
    // Unbounded, each call would hold 20,000 resources: 600 MB of headers
    // for `fields`, 1.2 GB of methods for `methods`.
    for _ in 0..3 {
        let created = provider.instances_created();
        match provider.get_vpcs().await {
            Err(CloudError::Trap { message, .. }) => {
                assert!(
                    message.contains("over its host-resource budget") && message.contains(budget),
                    "{kind}: {message}"
                );
                if let Some(guest_saw) = guest_saw {
                    assert!(
                        message.contains("the guest answered") && message.contains(guest_saw),
                        "{kind}: the guest got an error it could handle: {message}"
                    );
                }
            }
            other => panic!("{kind}: expected the budget's error, got {other:?}"),
        }
        still_serves(&provider).await;
        assert_eq!(
            provider.instances_created(),
            created + 1,
            "{kind}: the instance over budget was replaced"
        );
    }
    assert_eq!(provider.over_budget(), 3, "{kind}");
    // The peak: what the leak held at its most, not what was left after.
    rss::print_peak_above(before);
}

/// The open sockets of this process connected to `port` on 127.0.0.1 (the
/// client side: the remote end is `port`).
fn sockets_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/self/net/tcp")
        .expect("/proc/self/net/tcp is readable: these tests need Linux's /proc");
    let remote = format!("0100007F:{port:04X}");
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(2) == Some(&remote.as_str()))
                .then(|| fields.get(9).map(|i| i.to_string()))?
        })
        .collect();
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|link| {
            let link = link.to_string_lossy();
            inodes
                .iter()
                .any(|inode| link == format!("socket:[{inode}]"))
        })
        .count()
}

/// Accepts every connection, reads its request and never answers; counts
/// the connections made and those the client closed.
async fn mute_server() -> (u16, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (accepted, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (counting, closing) = (accepted.clone(), closed.clone());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counting.fetch_add(1, Ordering::SeqCst);
            let closing = closing.clone();
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                while matches!(socket.read(&mut buffer).await, Ok(n) if n > 0) {}
                closing.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (port, accepted, closed)
}

#[tokio::test]
async fn requests_a_call_abandons_are_closed_when_it_returns() {
    let (port, accepted, closed) = mute_server().await;
    let settings = serde_json::json!({
        "mode": "abandon", "url": format!("http://127.0.0.1:{port}/slow"),
        "count": 40, "linger-ms": 300,
    });
    let provider = misbehave(settings, |c| {
        c.egress = vec![format!("http://127.0.0.1:{port}")];
        c.limits.timeout = Duration::from_secs(5);
    })
    .await;
    let cap = CallLimits::default().concurrent_requests;
    for call in 1..=3 {
        let vpcs = provider.get_vpcs().await.expect("the call returns Ok");
        assert_eq!(vpcs[0].id, "started 40, refused 0");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            cap * call,
            "call {call}: the instance opened at most {cap} connections at once"
        );
        let deadline = Instant::now() + Duration::from_secs(3);
        while sockets_to(port) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(sockets_to(port), 0, "call {call}: its sockets were closed");
        while closed.load(Ordering::SeqCst) < cap * call && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            closed.load(Ordering::SeqCst),
            cap * call,
            "call {call}: the server saw every connection closed"
        );
    }
    still_serves(&provider).await;
}

/// Every special address form of the issue, as an IPv6 literal or not.
const SPECIAL: &[&str] = &[
    "169.254.169.254",
    "169.254.170.2",
    "100.100.100.200",
    "168.63.129.16",
    "192.0.0.192",
    "0.0.0.0",
    "255.255.255.255",
    "224.0.0.1",
    "fd00:ec2::254",
    "fd00:ec2::253",
    "fd00:ec2::23",
    "fd20:ce::254",
    "fd00:c1::a9fe:a9fe",
    "fd00:42::42",
    "fe80::1",
    "fec0::1",
    "::",
    "ff02::1",
    "::ffff:169.254.169.254",
    "::a9fe:a9fe",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b::6464:64c8",
    "64:ff9b:1::a9fe:a9fe",
    "2002:a9fe:a9fe::1",
    "2001:0:a9fe:a9fe::1",
];

fn url_host(address: &str) -> String {
    if address.contains(':') {
        format!("[{address}]")
    } else {
        address.to_string()
    }
}

#[tokio::test]
async fn every_special_address_form_is_refused_before_any_connect() {
    // Port 9 of these addresses: nothing listens, and nothing may be tried.
    let literals: Vec<String> = SPECIAL
        .iter()
        .map(|a| format!("http://{}:9", url_host(a)))
        .collect();
    let names: Vec<(String, IpAddr)> = SPECIAL
        .iter()
        .enumerate()
        .map(|(i, a)| (format!("special-{i}.test"), a.parse().unwrap()))
        .collect();
    let named: Vec<String> = names
        .iter()
        .map(|(name, _)| format!("http://{name}:9"))
        .collect();
    let urls: Vec<String> = literals
        .iter()
        .chain(&named)
        .map(|o| format!("{o}/"))
        .collect();
    let egress: Vec<String> = literals.iter().chain(&named).cloned().collect();
    let table = names
        .iter()
        .map(|(name, address)| (name.clone(), vec![*address]))
        .collect();
    let resolver = Arc::new(StaticResolver(table));

    let settings = serde_json::json!({"mode": "fetch-each", "urls": urls});
    let provider = misbehave(settings, |c| {
        c.egress = egress.clone();
        c.resolver = resolver.clone();
    })
    .await;
    let outcomes = provider
        .get_vpcs()
        .await
        .expect("the guest answers each outcome");
    assert_eq!(outcomes.len(), urls.len());
    for (url, outcome) in urls.iter().zip(&outcomes) {
        assert!(
            outcome.id.starts_with(url.as_str()) && outcome.id.contains("DestinationIpProhibited"),
            "the guest was told the address is prohibited, not of a failed connect: {}",
            outcome.id
        );
    }

    // The host's reason, one form at a time: a refusal naming the address
    // and what it is.
    for (url, address) in urls.iter().zip(SPECIAL.iter().chain(SPECIAL)) {
        let settings = serde_json::json!({"mode": "fetch", "url": url});
        let provider = misbehave(settings, |c| {
            c.egress = egress.clone();
            c.resolver = resolver.clone();
        })
        .await;
        match provider.get_vpcs().await {
            Err(CloudError::EgressDenied { reason, .. }) => {
                let address: IpAddr = address.parse().unwrap();
                assert!(
                    reason.starts_with(&format!("{address} is "))
                        && reason.ends_with("no provider may reach it"),
                    "{url}: {reason}"
                );
            }
            other => panic!("{url}: expected egress denied, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_authority_with_userinfo_is_refused() {
    let settings = serde_json::json!({
        "mode": "fetch", "url": "http://127.0.0.2:18091@127.0.0.1:9/",
    });
    let provider = misbehave(settings, |c| c.egress = vec!["http://127.0.0.1:9".into()]).await;
    match provider.get_vpcs().await {
        Err(CloudError::EgressDenied { reason, .. }) => {
            assert!(reason.contains("carries userinfo"), "{reason}")
        }
        other => panic!("expected egress denied, got {other:?}"),
    }
    still_serves(&provider).await;
}

/// Answers each connection's request (read to its end: its content-length,
/// or its last chunk) with `answer` bytes.
async fn sized_server(answer: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut received = Vec::new();
                let mut buffer = vec![0u8; 64 * 1024];
                let head_end = loop {
                    match socket.read(&mut buffer).await {
                        Ok(n) if n > 0 => received.extend_from_slice(&buffer[..n]),
                        _ => return,
                    }
                    if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
                        break end + 4;
                    }
                };
                let head = String::from_utf8_lossy(&received[..head_end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                // The guest's client streams its body chunked; others give
                // a length.
                let chunked = head.contains("transfer-encoding: chunked");
                let mut body = received.split_off(head_end);
                let done = |body: &[u8]| {
                    if chunked {
                        body.ends_with(b"0\r\n\r\n")
                    } else {
                        body.len() >= length
                    }
                };
                while !done(&body) {
                    match socket.read(&mut buffer).await {
                        Ok(n) if n > 0 => body.extend_from_slice(&buffer[..n]),
                        _ => return,
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {answer}\r\nconnection: close\r\n\r\n"
                );
                if socket.write_all(head.as_bytes()).await.is_ok() {
                    let _ = socket.write_all(&vec![b'd'; answer]).await;
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn bodies_past_the_calls_byte_budget_fail_their_stream() {
    let budget = 1 << 20;
    for (upload, answer, expected) in [
        // The guest's write fails: hyper dropped the body the budget ended.
        (2 << 20, 0, Err("writing request body")),
        (0, 2 << 20, Err("HTTP response body size exceeds limit")),
        (400 << 10, 400 << 10, Ok(format!("200 {}", 400 << 10))),
    ] {
        let port = sized_server(answer).await;
        let settings = serde_json::json!({
            "mode": "transfer", "url": format!("http://127.0.0.1:{port}/data"), "upload": upload,
        });
        let provider = misbehave(settings, |c| {
            c.egress = vec![format!("http://127.0.0.1:{port}")];
            c.limits.call_body_bytes = budget;
        })
        .await;
        match (provider.get_vpcs().await, expected) {
            (Ok(vpcs), Ok(id)) => assert_eq!(vpcs[0].id, id),
            (Err(error), Err(says)) => match error.provider_error() {
                Some(ProviderError::Transient(message)) => {
                    assert!(
                        message.contains(says),
                        "{upload} up, {answer} down: {message}"
                    )
                }
                _ => panic!("{upload} up, {answer} down: expected the guest's error, got {error}"),
            },
            (outcome, expected) => {
                panic!("{upload} up, {answer} down: expected {expected:?}, got {outcome:?}")
            }
        }
        still_serves(&provider).await;
    }
}
