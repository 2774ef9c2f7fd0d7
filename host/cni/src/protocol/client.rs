//! The plugin's side of the protocol: one blocking exchange with a deadline,
//! plain std so the plugin starts fast.

use super::{
    decode_response, encode_request, AgentRequest, AgentResponse, DecodeError, MAX_MESSAGE_BYTES,
};
use crate::result::{code, CniError};
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why an exchange with the agent failed.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("cannot connect to the agent at {socket}: {source}")]
    Connect { socket: PathBuf, source: io::Error },
    #[error("sending the request to the agent failed: {0}")]
    Send(io::Error),
    #[error("reading the agent's answer failed: {0}")]
    Receive(io::Error),
    #[error("the agent did not answer within {0:?}")]
    TimedOut(Duration),
    #[error("the agent's answer is unreadable: {0}")]
    Decode(DecodeError),
}

impl AskError {
    /// The CNI error the plugin prints for this failure of `request`.
    ///
    /// - STATUS: always 50 (plugin not available): an agent that cannot be
    ///   reached or read cannot serve ADDs.
    /// - every other request: 11 (try again later) when the agent is not
    ///   listening, the connection breaks or the answer is late: the agent
    ///   is (re)starting or busy and the runtime retries (kubelet retries the
    ///   sandbox's ADD, and DEL until it succeeds). An ADD that timed out may
    ///   have been allocated anyway; the runtime's DEL releases it.
    /// - an answer that is not the protocol: 100, as plugin and agent are out
    ///   of step and retrying will not help.
    pub fn cni_error(&self, request: &AgentRequest) -> CniError {
        let details = self.to_string();
        if matches!(request, AgentRequest::Status) {
            return CniError::new(
                code::PLUGIN_NOT_AVAILABLE,
                "ipam agent not available",
                details,
            );
        }
        match self {
            AskError::Connect { .. }
            | AskError::Send(_)
            | AskError::Receive(_)
            | AskError::TimedOut(_) => CniError::new(
                code::TRY_AGAIN_LATER,
                "ipam agent unreachable, try again later",
                details,
            ),
            AskError::Decode(_) => CniError::new(
                code::AGENT_PROTOCOL,
                "ipam agent answered out of protocol",
                details,
            ),
        }
    }
}

/// Sends `request` to the agent listening on `socket` and returns its answer,
/// all within `timeout` once connected. Connecting to a unix socket does not
/// wait for the server, except when its accept backlog is full; the
/// runtime's own timeout bounds that case.
pub fn ask(
    socket: &Path,
    request: &AgentRequest,
    timeout: Duration,
) -> Result<AgentResponse, AskError> {
    let deadline = Instant::now() + timeout;
    let mut stream = UnixStream::connect(socket).map_err(|source| AskError::Connect {
        socket: socket.to_owned(),
        source,
    })?;
    let send = |stream: &mut UnixStream| -> io::Result<()> {
        stream.set_write_timeout(Some(remaining(deadline)?))?;
        stream.write_all(&encode_request(request))?;
        stream.shutdown(Shutdown::Write)
    };
    send(&mut stream).map_err(|e| classify(e, timeout, AskError::Send))?;
    let answer =
        receive(&mut stream, deadline).map_err(|e| classify(e, timeout, AskError::Receive))?;
    decode_response(&answer).map_err(AskError::Decode)
}

/// Reads to EOF, stopping one byte past the limit so an oversized answer is
/// reported as such rather than truncated. A connection closed before any
/// byte of an answer is broken (an agent that died or stopped mid-request),
/// not an answer.
fn receive(stream: &mut UnixStream, deadline: Instant) -> io::Result<Vec<u8>> {
    let mut answer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        stream.set_read_timeout(Some(remaining(deadline)?))?;
        match stream.read(&mut chunk) {
            Ok(0) if answer.is_empty() => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the agent closed the connection without answering",
                ))
            }
            Ok(0) => return Ok(answer),
            Ok(n) => {
                answer.extend_from_slice(&chunk[..n]);
                if answer.len() > MAX_MESSAGE_BYTES {
                    return Ok(answer);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn remaining(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(io::ErrorKind::TimedOut.into())
    } else {
        Ok(left)
    }
}

/// Socket timeouts surface as WouldBlock (EAGAIN) on Linux.
fn classify(error: io::Error, timeout: Duration, other: fn(io::Error) -> AskError) -> AskError {
    match error.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => AskError::TimedOut(timeout),
        _ => other(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{decode_request, encode_response, Attachment};
    use std::os::unix::net::UnixListener;
    use std::thread;

    fn del() -> AgentRequest {
        AgentRequest::Del {
            attachment: Attachment {
                container_id: "c1".to_owned().try_into().unwrap(),
                ifname: "eth0".to_owned().try_into().unwrap(),
            },
        }
    }

    #[test]
    fn error_codes_per_request() {
        let connect = || AskError::Connect {
            socket: "/x".into(),
            source: io::ErrorKind::NotFound.into(),
        };
        let decode = || AskError::Decode(decode_response(b"{}").unwrap_err());
        let table: [(AskError, AgentRequest, u32); 6] = [
            (connect(), AgentRequest::Status, 50),
            (decode(), AgentRequest::Status, 50),
            (connect(), del(), 11),
            (AskError::TimedOut(Duration::from_secs(1)), del(), 11),
            (
                AskError::Receive(io::ErrorKind::ConnectionReset.into()),
                AgentRequest::Gc { valid: vec![] },
                11,
            ),
            (decode(), del(), 100),
        ];
        for (error, request, want) in table {
            assert_eq!(
                error.cni_error(&request).code,
                want,
                "{error} for {request:?}"
            );
        }
    }

    #[test]
    fn one_exchange_per_connection() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let server = thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut bytes = Vec::new();
            conn.read_to_end(&mut bytes).unwrap();
            conn.write_all(&encode_response(&AgentResponse::Done))
                .unwrap();
            decode_request(&bytes).unwrap()
        });
        let got = ask(&socket, &del(), Duration::from_secs(5)).unwrap();
        assert_eq!(got, AgentResponse::Done);
        assert_eq!(server.join().unwrap(), del());
    }

    #[test]
    fn missing_socket_is_a_connect_error() {
        let dir = tempfile::tempdir().unwrap();
        let got = ask(
            &dir.path().join("absent.sock"),
            &del(),
            Duration::from_secs(1),
        );
        assert!(matches!(got, Err(AskError::Connect { .. })), "{got:?}");
    }

    #[test]
    fn an_agent_that_closes_without_answering_is_a_broken_connection_to_retry() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let server = thread::spawn(move || {
            // Reads the whole request, then dies before answering.
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            conn.read_to_end(&mut request).unwrap();
            drop(conn);
        });
        let got = ask(&socket, &del(), Duration::from_secs(5));
        server.join().unwrap();
        let error = got.expect_err("no answer is no success");
        assert!(matches!(error, AskError::Receive(_)), "{error:?}");
        assert_eq!(error.cni_error(&del()).code, code::TRY_AGAIN_LATER);
    }

    #[test]
    fn a_silent_agent_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let server = thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            thread::sleep(Duration::from_millis(800));
            drop(conn);
        });
        // The agent keeps the connection open and silent for 800 ms: only
        // the 200 ms timeout can end the wait before the connection closes
        // (a closed connection is a different error).
        let got = ask(&socket, &del(), Duration::from_millis(200));
        assert!(matches!(got, Err(AskError::TimedOut(_))), "{got:?}");
        server.join().unwrap();
    }
}
