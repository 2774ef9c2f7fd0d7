//! `ipam-operator run`'s start-up as a cluster operator sees it: `/healthz`
//! answers while the slow work hangs (a registry or an etcd that accepts
//! and says nothing, on 127.0.0.1) and `/readyz` names the step it waits
//! for; a fatal error (a missing module or config file, an etcd that
//! refuses) is one JSON log line at ERROR before a non-zero exit;
//! an unknown `--log-level` is refused with exit code 2.

use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{free_port, http_get, terminate};

/// A TCP listener on 127.0.0.1 that accepts every connection and never
/// answers (the connections stay open while the test runs); its port.
fn silent_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a listener on 127.0.0.1");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    port
}

/// `ipam-operator ARGS` with no cluster (a kubeconfig that does not exist:
/// nothing in these tests gets that far) and JSON logs at info.
fn operator(dir: &std::path::Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ipam-operator"));
    command
        .args(args)
        .env("KUBECONFIG", dir.join("absent"))
        .env("IPAM_CACHE_DIR", dir.join("cache"))
        .env("IPAM_COMPONENTS_DIR", ipam_tests::components_dir())
        .env("IPAM_LOG", "info")
        .env("IPAM_LOG_FORMAT", "json")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Every line of `text` as JSON (a line that is not fails the test).
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not a JSON log line ({error}): {line:?}"))
        })
        .collect()
}

/// Start the operator with `args` and a listener; poll until `/healthz`
/// answers 200 and `/readyz` answers 503 with a body holding `waiting_for`
/// (60 s at most: a debug build compiles the module on its first load).
/// Then SIGTERM stops the hung start-up cleanly.
async fn healthy_but_waiting_for(args: &[&str], waiting_for: &str) {
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let listen_flag = format!("--listen={listen}");
    let mut all = vec!["run"];
    all.extend(args);
    all.push(&listen_flag);
    let mut child = operator(dir.path(), &all)
        .spawn()
        .expect("the operator starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = None;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            let output = child.wait_with_output().unwrap();
            panic!(
                "the operator exited: {status}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let health = http_get(&listen, "/healthz");
        let ready = http_get(&listen, "/readyz");
        if let (Some((200, _)), Some((503, body))) = (&health, &ready) {
            if body.contains(waiting_for) {
                seen = Some(body.clone());
                break;
            }
        }
        seen = ready.map(|(code, body)| format!("{code} {body}"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, metrics) = http_get(&listen, "/metrics").expect("/metrics answers");
    let status = terminate(&mut child).await;
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let body = seen.unwrap_or_default();
    assert!(
        body.contains(waiting_for)
            && body.starts_with("waiting: ")
            && body.ends_with("failed: -\n"),
        "/readyz while the start-up hangs: {body:?}\n{stderr}"
    );
    assert_eq!(code, 200);
    assert!(
        metrics.contains("cilium_operator_startup_step{step=\"provider module\",state="),
        "{metrics}"
    );
    assert!(
        status.success(),
        "SIGTERM ends the start-up cleanly: {status}: {stderr}"
    );
    let lines = json_lines(&stderr);
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "stopped during the start-up"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_while_an_oci_pull_hangs_and_readyz_names_the_pull() {
    let registry = silent_server();
    let module = format!(
        "oci://127.0.0.1:{registry}/providers/mock@sha256:{}",
        "a".repeat(64)
    );
    let provider = format!("--provider={module}");
    healthy_but_waiting_for(&[&provider], &format!("provider module (pulling {module})")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_while_etcd_hangs_and_readyz_names_etcd() {
    let etcd = format!("http://127.0.0.1:{}", silent_server());
    let endpoints = format!("--etcd-endpoints={etcd}");
    healthy_but_waiting_for(
        &["--provider=mock", &endpoints],
        &format!("waiting: etcd (connecting to {etcd}), kubernetes api, ciliumnode cache;"),
    )
    .await;
}

/// The one ERROR line of a failed run's stderr (JSON), after checking the
/// exit code.
fn fatal_line(output: &Output, code: i32) -> Value {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    let errors: Vec<Value> = json_lines(&stderr)
        .into_iter()
        .filter(|line| line["level"] == "ERROR")
        .collect();
    assert_eq!(errors.len(), 1, "one ERROR line: {stderr}");
    errors[0].clone()
}

#[test]
fn a_fatal_error_is_one_json_line_at_error_before_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("absent.wasm");
    let output = operator(dir.path(), &["run", "--provider", absent.to_str().unwrap()])
        .output()
        .expect("the operator runs");
    let line = fatal_line(&output, 1);
    let message = line["fields"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("reading module {}", absent.display()))
            && message.contains("No such file"),
        "{line}"
    );

    // etcd that refuses the connection: the failure after the module loaded.
    let refused = format!("--etcd-endpoints=http://127.0.0.1:{}", free_port());
    let output = operator(
        dir.path(),
        &["run", "--provider=mock", &refused, "--log-level=error"],
    )
    .output()
    .expect("the operator runs");
    let line = fatal_line(&output, 1);
    let message = line["fields"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("connecting to etcd at http://127.0.0.1:"),
        "{line}"
    );

    // A config file that cannot be read: before the command line is
    // parsed, the log flags are still followed.
    let config = dir.path().join("absent.yaml");
    let output = operator(dir.path(), &["run", "--config", config.to_str().unwrap()])
        .output()
        .expect("the operator runs");
    let line = fatal_line(&output, 1);
    assert_eq!(
        line["fields"]["message"],
        format!(
            "reading {}: No such file or directory (os error 2)",
            config.display()
        )
    );

    // Even with logging off, the reason is logged.
    let output = operator(dir.path(), &["run", "--provider", absent.to_str().unwrap()])
        .env("IPAM_LOG", "off")
        .output()
        .expect("the operator runs");
    fatal_line(&output, 1);
}

#[test]
fn an_unknown_log_level_is_refused_with_exit_code_two() {
    let dir = tempfile::tempdir().unwrap();
    for given in [["--log-level=verbose"], ["--log-level=ipam_engine=loud"]] {
        let output = operator(dir.path(), &["run", "--provider=mock"])
            .args(given)
            .env("IPAM_LOG_FORMAT", "text")
            .output()
            .expect("the operator runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{given:?}: {stderr}");
        let word = given[0].trim_start_matches("--log-level=");
        assert!(
            stderr.contains(&format!("invalid value '{word}' for '--log-level")),
            "{stderr}"
        );
    }
    let output = operator(dir.path(), &["run", "--provider=mock"])
        .env("IPAM_LOG", "warning")
        .env("IPAM_LOG_FORMAT", "text")
        .output()
        .expect("the operator runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown log level \"warning\""), "{stderr}");

    // With JSON logs, the refused command line is a JSON line too.
    let output = operator(dir.path(), &["run", "--provider=mock", "--no-such-flag"])
        .output()
        .expect("the operator runs");
    let line = fatal_line(&output, 2);
    assert!(
        line["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("--no-such-flag")),
        "{line}"
    );
}
