//! The agent's side of the `ipam-cni` protocol: a unix socket, one request
//! per connection (read to EOF, one answer, close), every request answered
//! from the allocator and counted with its latency.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use ipam_cni::protocol::{
    decode_request, encode_response, AgentRequest, AgentResponse, Allocation, Route,
    MAX_MESSAGE_BYTES,
};
use ipam_cni::result::CniError;
use ipam_pool::agent::allocator::Holder;
use ipnet::IpNet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use crate::allocator::{Allocator, AllocatorError, Granted};
use crate::metrics::AgentMetrics;

/// CNI's "decoding failure".
const DECODE_FAILURE: u32 = 6;

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// Bind the socket at `path`: its directory made if missing, a stale
/// socket of an earlier run removed, only root may connect.
pub fn bind(path: &Path) -> Result<UnixListener, SocketError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |source| SocketError::Io {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let listener = UnixListener::bind(path).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    Ok(listener)
}

/// The answer to an ADD or CHECK: the address with its subnet's prefix
/// length (a host prefix when the subnet is unknown), its gateway, and a
/// default route through it. The prefix is the subnet's because chained
/// plugins such as ptp delete the prefix route the kernel adds for the
/// address, which a /32 does not have.
fn allocation(granted: &Granted) -> Allocation {
    let prefix = granted
        .placement
        .as_ref()
        .and_then(|p| p.subnet)
        .filter(|subnet| subnet.contains(&granted.ip))
        .map(|subnet| subnet.prefix_len());
    let address = prefix
        .and_then(|len| IpNet::new(granted.ip, len).ok())
        .unwrap_or_else(|| IpNet::from(granted.ip));
    let default = match granted.ip {
        IpAddr::V4(_) => "0.0.0.0/0",
        IpAddr::V6(_) => "::/0",
    };
    let routes = match (granted.gateway, default.parse::<IpNet>()) {
        (Some(_), Ok(dst)) => vec![Route { dst, gw: None }],
        _ => Vec::new(),
    };
    Allocation {
        address,
        gateway: granted.gateway,
        routes,
    }
}

fn failed(error: &AllocatorError) -> AgentResponse {
    AgentResponse::Failed(CniError::new(error.cni_code(), error.to_string(), ""))
}

/// `done`, or the failure.
fn done(result: Result<(), AllocatorError>) -> AgentResponse {
    match result {
        Ok(()) => AgentResponse::Done,
        Err(error) => failed(&error),
    }
}

fn command(request: &AgentRequest) -> &'static str {
    match request {
        AgentRequest::Add { .. } => "ADD",
        AgentRequest::Del { .. } => "DEL",
        AgentRequest::Check { .. } => "CHECK",
        AgentRequest::Gc { .. } => "GC",
        AgentRequest::Status => "STATUS",
        AgentRequest::Attach { .. } => "ATTACH",
        AgentRequest::Detach { .. } => "DETACH",
    }
}

/// Answer one request.
pub async fn answer(allocator: &Allocator, request: AgentRequest) -> AgentResponse {
    match request {
        AgentRequest::Add {
            attachment, pod, ..
        } => {
            let container_id = attachment.container_id.as_str().to_string();
            let owner = pod.map_or_else(
                || container_id.clone(),
                |pod| format!("{}/{}", pod.namespace, pod.name),
            );
            let holder = Holder {
                container_id,
                ifname: attachment.ifname.as_str().to_string(),
                owner,
            };
            match allocator.add(holder).await {
                Ok(granted) => AgentResponse::Allocated(allocation(&granted)),
                Err(error) => failed(&error),
            }
        }
        AgentRequest::Del { attachment } => done(
            allocator
                .del(attachment.container_id.as_str(), attachment.ifname.as_str())
                .await,
        ),
        AgentRequest::Check { attachment } => match allocator
            .check(attachment.container_id.as_str(), attachment.ifname.as_str())
            .await
        {
            Ok(granted) => AgentResponse::Allocated(allocation(&granted)),
            Err(error) => failed(&error),
        },
        AgentRequest::Gc { valid } => {
            let valid: BTreeSet<(String, String)> = valid
                .into_iter()
                .map(|a| {
                    (
                        a.container_id.as_str().to_string(),
                        a.ifname.as_str().to_string(),
                    )
                })
                .collect();
            match allocator.gc(&valid).await {
                Ok(freed) => {
                    if freed > 0 {
                        tracing::info!(freed, "CNI GC freed addresses of gone attachments");
                    }
                    AgentResponse::Done
                }
                Err(error) => failed(&error),
            }
        }
        AgentRequest::Attach {
            attachment,
            host_ifname,
            address,
        } => done(
            allocator
                .attach(
                    attachment.container_id.as_str(),
                    attachment.ifname.as_str(),
                    host_ifname.as_str(),
                    address,
                )
                .await,
        ),
        AgentRequest::Detach { attachment } => done(
            allocator
                .detach(attachment.container_id.as_str(), attachment.ifname.as_str())
                .await,
        ),
        // The socket is served only once the agent has restored and
        // registered: serving is being ready.
        AgentRequest::Status => AgentResponse::Done,
    }
}

async fn serve_connection(
    mut stream: UnixStream,
    allocator: &Allocator,
    metrics: &AgentMetrics,
) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    (&mut stream)
        .take(MAX_MESSAGE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .await?;
    let started = Instant::now();
    let (name, response) = match decode_request(&bytes) {
        Ok(request) => {
            let name = command(&request);
            (name, answer(allocator, request).await)
        }
        Err(error) => (
            "invalid",
            AgentResponse::Failed(CniError::new(DECODE_FAILURE, error.to_string(), "")),
        ),
    };
    let result = match &response {
        AgentResponse::Failed(error) => match error.code {
            3 => "unknown-container",
            5 => "io-failure",
            6 => "decode-failure",
            11 => "try-again-later",
            _ => "failed",
        },
        _ => "ok",
    };
    stream.write_all(&encode_response(&response)).await?;
    stream.shutdown().await?;
    metrics.cni_request(name, result, started.elapsed());
    Ok(())
}

/// Serve until the task is dropped, one task per connection.
pub async fn serve(
    listener: UnixListener,
    allocator: Arc<Allocator>,
    metrics: Arc<AgentMetrics>,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut in_flight = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            () = &mut stop => break,
            // Reap finished connections so the set holds only live ones.
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accepting on the CNI socket");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let allocator = allocator.clone();
        let metrics = metrics.clone();
        in_flight.spawn(async move {
            if let Err(error) = serve_connection(stream, &allocator, &metrics).await {
                tracing::debug!(%error, "CNI connection ended early");
            }
        });
    }
    drop(listener);
    drain(in_flight).await;
}

/// How long a stopping agent waits for the requests it already accepted.
/// A runtime's own CNI timeout is longer; an ADD or DEL takes milliseconds.
pub const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Let every accepted request be answered (an ADD the agent saved but
/// never answered would leave the runtime retrying against a stopped
/// agent), up to [`DRAIN_LIMIT`].
async fn drain(mut in_flight: tokio::task::JoinSet<()>) {
    let pending = in_flight.len();
    if pending > 0 {
        tracing::info!(
            pending,
            "answering the CNI requests in flight before stopping"
        );
    }
    let all = async { while in_flight.join_next().await.is_some() {} };
    if tokio::time::timeout(DRAIN_LIMIT, all).await.is_err() {
        tracing::warn!(
            left = in_flight.len(),
            "CNI requests still in flight at the drain limit: cut"
        );
        in_flight.abort_all();
    }
}
