//! A fake node agent for the process tests: a std unix listener on a thread
//! that records each request and answers the next canned response.

use ipam_cni::protocol::{decode_request, encode_response, AgentRequest, AgentResponse};
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

pub struct FakeAgent {
    _dir: tempfile::TempDir,
    pub socket: PathBuf,
    requests: mpsc::Receiver<AgentRequest>,
}

/// How the fake agent answers one connection.
pub enum Canned {
    Answer(AgentResponse),
    /// Raw bytes, to test answers outside the protocol.
    Raw(&'static [u8]),
    /// Accept, then say nothing for this long.
    Silence(Duration),
}

impl FakeAgent {
    /// Serves one connection per canned answer, in order.
    pub fn start(answers: Vec<Canned>) -> FakeAgent {
        let dir = tempfile::tempdir().expect("temp dir for the fake agent");
        let socket = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&socket).expect("bind the fake agent's socket");
        let (sent, requests) = mpsc::channel();
        thread::spawn(move || {
            for canned in answers {
                let Ok((mut conn, _)) = listener.accept() else {
                    return;
                };
                if let Canned::Silence(pause) = canned {
                    thread::sleep(pause);
                    continue;
                }
                let mut bytes = Vec::new();
                if conn.read_to_end(&mut bytes).is_err() {
                    return;
                }
                if let Ok(request) = decode_request(&bytes) {
                    let _ = sent.send(request);
                }
                let reply = match canned {
                    Canned::Answer(response) => encode_response(&response),
                    Canned::Raw(bytes) => bytes.to_vec(),
                    Canned::Silence(_) => unreachable!("handled above"),
                };
                let _ = conn.write_all(&reply);
            }
        });
        FakeAgent {
            _dir: dir,
            socket,
            requests,
        }
    }

    /// The next request the agent received.
    pub fn request(&self) -> AgentRequest {
        self.requests
            .recv_timeout(Duration::from_secs(5))
            .expect("the fake agent received a request")
    }
}

/// Runs the built plugin with exactly `env` (nothing inherited) and `stdin`.
pub fn run_plugin(env: &[(&str, &str)], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipam-cni"))
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the ipam-cni binary");
    let mut input = child.stdin.take().expect("piped stdin");
    input.write_all(stdin).expect("write the plugin's stdin");
    drop(input);
    child.wait_with_output().expect("wait for ipam-cni")
}
