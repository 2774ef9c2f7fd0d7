//! The agent's start-up as a cluster operator sees it: `/healthz` answers
//! while a step is retried and `/readyz` names it with its last error; an
//! error that stops the agent is one JSON log line at ERROR before exit
//! code 1; an unknown `--log-level` is refused with exit code 2.

use std::process::{Command, Output, Stdio};

use ipam_fake_apiserver::FakeApiServer;
use serde_json::Value;

use crate::support::{agent_binary, http_get, http_stub, metric, until, AgentSetup, NODES};

#[tokio::test(flavor = "multi_thread")]
async fn health_answers_while_the_metadata_service_fails_and_readyz_names_that_step() {
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    server.put(NODES, crate::support::node_object());
    // A metadata service that is there but fails every request.
    let imds = http_stub(|_, _, _| (500, "down for maintenance".into()));
    let setup = AgentSetup::new(
        api,
        &["--cloud=aws", &format!("--imds-endpoint=http://{imds}")],
    );
    let mut agent = setup.start_through(None, &[], Stdio::null());
    let health = setup.health.clone();
    let body = until("/readyz naming the retried step", || {
        if let Ok(Some(status)) = agent.try_wait() {
            panic!("the agent exited: {status}");
        }
        match (http_get(&health, "/healthz"), http_get(&health, "/readyz")) {
            (Some((200, _)), Some((503, body))) if body.contains("retrying in") => Ok(body),
            other => Err(format!("/healthz, /readyz: {other:?}")),
        }
    })
    .await;
    assert!(
        body.starts_with("waiting: instance facts (retrying in ")
            && body.ends_with("ciliumnode registration, restore, cni socket; failed: -\n"),
        "{body:?}"
    );
    let page = setup.metrics(None);
    for (series, value) in [
        (
            "ipam_agent_startup_step{step=\"kubernetes api\",state=\"done\"}",
            1.0,
        ),
        (
            "ipam_agent_startup_step{step=\"instance facts\",state=\"waiting\"}",
            1.0,
        ),
        (
            "ipam_agent_startup_step{step=\"cni socket\",state=\"done\"}",
            0.0,
        ),
    ] {
        assert_eq!(metric(&page, series), Some(value), "{series}: {page}");
    }
}

/// The agent with `args` (and `setup`'s), JSON logs, to its end.
fn run_to_end(setup: &AgentSetup, args: &[&str], level: &str) -> Output {
    Command::new(agent_binary())
        .args(&setup.args)
        .args(args)
        .env("IPAM_LOG_FORMAT", "json")
        .env("IPAM_LOG", level)
        .stdin(Stdio::null())
        .output()
        .expect("the agent runs")
}

/// The one ERROR line of stderr (every line JSON), after the exit code.
fn fatal_line(output: &Output, code: i32) -> Value {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    let errors: Vec<Value> = stderr
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line)
                .unwrap_or_else(|error| panic!("not a JSON log line ({error}): {line:?}"))
        })
        .filter(|line| line["level"] == "ERROR")
        .collect();
    assert_eq!(errors.len(), 1, "one ERROR line: {stderr}");
    errors[0].clone()
}

#[test]
fn a_fatal_error_is_one_json_line_at_error_and_a_bad_level_is_refused() {
    // Nothing listens there: the agent stops before it asks.
    let setup = AgentSetup::new("127.0.0.1:9".parse().unwrap(), &[]);
    let state = setup.state_file();
    std::fs::create_dir_all(state.parent().unwrap()).unwrap();
    std::fs::write(&state, "{not json").unwrap();
    for level in ["info", "off"] {
        let line = fatal_line(&run_to_end(&setup, &[], level), 1);
        let message = line["fields"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("the saved allocations cannot be read")
                && message.contains(&state.display().to_string()),
            "{level}: {line}"
        );
    }

    let refused = run_to_end(&setup, &["--log-level=verbose"], "info");
    let line = fatal_line(&refused, 2);
    assert!(
        line["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown log level \"verbose\"")),
        "{line}"
    );
    let output = Command::new(agent_binary())
        .args(&setup.args)
        .env("IPAM_LOG", "warning")
        .output()
        .expect("the agent runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid value 'warning' for '--log-level"),
        "{stderr}"
    );
}
