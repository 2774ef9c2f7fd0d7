//! Runs the built `ipam-cni` binary as a runtime would, against a fake agent,
//! for every command, checking stdout and the exit code.

mod support;

use ipam_cni::protocol::{AgentRequest, AgentResponse, Allocation, Attachment, PodRef, Route};
use ipam_cni::result::CniError;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Output;
use std::time::Duration;
use support::{run_plugin, Canned, FakeAgent};

fn config(version: &str, socket: &Path, extra: Value) -> Vec<u8> {
    let mut conf = json!({
        "cniVersion": version,
        "name": "pods",
        "type": "ptp",
        "ipam": {"type": "ipam-cni", "socket": socket, "timeoutSeconds": 2}
    });
    if let (Some(conf), Value::Object(extra)) = (conf.as_object_mut(), extra) {
        conf.extend(extra);
    }
    serde_json::to_vec(&conf).unwrap()
}

/// CNI_* variables as the plugin gets them.
type Vars = Vec<(&'static str, &'static str)>;

fn env(command: &'static str) -> Vars {
    vec![
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/run/netns/c1"),
        ("CNI_IFNAME", "eth0"),
        (
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0",
        ),
        ("CNI_PATH", "/usr/lib/cni"),
    ]
}

fn attachment() -> Attachment {
    Attachment {
        container_id: "c1".to_owned().try_into().unwrap(),
        ifname: "eth0".to_owned().try_into().unwrap(),
    }
}

fn allocation() -> Allocation {
    Allocation {
        address: "10.0.1.5/32".parse().unwrap(),
        gateway: Some("169.254.1.1".parse().unwrap()),
        routes: vec![Route {
            dst: "0.0.0.0/0".parse().unwrap(),
            gw: Some("169.254.1.1".parse().unwrap()),
        }],
    }
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn assert_ok_silent(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}, stdout {:?}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.stdout.is_empty(),
        "stdout {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Checks the error JSON and a failing exit; returns the JSON.
fn assert_error(out: &Output, version: &str, code: u32) -> Value {
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let json = stdout_json(out);
    assert_eq!(json["cniVersion"], version, "{json}");
    assert_eq!(json["code"], code, "{json}");
    assert!(
        json["msg"].as_str().is_some_and(|m| !m.is_empty()),
        "{json}"
    );
    json
}

#[test]
fn version_needs_no_config() {
    for stdin in [
        &b""[..],
        br#"{"cniVersion":"1.0.0"}"#,
        br#"{"cniVersion":"0.4.0"}"#,
    ] {
        let out = run_plugin(&[("CNI_COMMAND", "VERSION")], stdin);
        assert!(out.status.success());
        assert_eq!(
            stdout_json(&out),
            json!({"cniVersion": "1.1.0", "supportedVersions": ["1.0.0", "1.1.0"]})
        );
    }
}

#[test]
fn add_prints_the_result_in_the_configured_version() {
    for version in ["1.0.0", "1.1.0"] {
        let agent = FakeAgent::start(vec![Canned::Answer(AgentResponse::Allocated(allocation()))]);
        let out = run_plugin(&env("ADD"), &config(version, &agent.socket, json!({})));
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            stdout_json(&out),
            json!({
                "cniVersion": version,
                "ips": [{"address": "10.0.1.5/32", "gateway": "169.254.1.1"}],
                "routes": [{"dst": "0.0.0.0/0", "gw": "169.254.1.1"}],
                "dns": {}
            })
        );
        assert_eq!(
            agent.request(),
            AgentRequest::Add {
                attachment: attachment(),
                netns: "/run/netns/c1".into(),
                pod: Some(PodRef {
                    namespace: "default".into(),
                    name: "web-0".into()
                }),
            }
        );
    }
}

#[test]
fn add_passes_the_agents_error_on() {
    let agent = FakeAgent::start(vec![Canned::Answer(AgentResponse::Failed(CniError::new(
        11,
        "pool empty",
        "waiting for the operator",
    )))]);
    let out = run_plugin(&env("ADD"), &config("1.0.0", &agent.socket, json!({})));
    let json = assert_error(&out, "1.0.0", 11);
    assert_eq!(json["msg"], "pool empty");
    assert_eq!(json["details"], "waiting for the operator");
}

#[test]
fn del_is_silent_and_works_without_netns() {
    let agent = FakeAgent::start(vec![Canned::Answer(AgentResponse::Done)]);
    let vars: Vec<_> = env("DEL")
        .into_iter()
        .filter(|(k, _)| *k != "CNI_NETNS")
        .collect();
    let out = run_plugin(&vars, &config("1.1.0", &agent.socket, json!({})));
    assert_ok_silent(&out);
    assert_eq!(
        agent.request(),
        AgentRequest::Del {
            attachment: attachment()
        }
    );
}

#[test]
fn check_compares_prev_result_with_the_agents_address() {
    let prev = |address: &str| {
        json!({"prevResult": {
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0", "sandbox": "/run/netns/c1"}],
            "ips": [{"address": address, "interface": 0}]
        }})
    };
    let agent = FakeAgent::start(vec![
        Canned::Answer(AgentResponse::Allocated(allocation())),
        Canned::Answer(AgentResponse::Allocated(allocation())),
        Canned::Answer(AgentResponse::Failed(CniError::new(
            3,
            "container unknown",
            "no allocation for c1/eth0",
        ))),
    ]);
    let out = run_plugin(
        &env("CHECK"),
        &config("1.1.0", &agent.socket, prev("10.0.1.5/32")),
    );
    assert_ok_silent(&out);
    assert_eq!(
        agent.request(),
        AgentRequest::Check {
            attachment: attachment()
        }
    );

    let out = run_plugin(
        &env("CHECK"),
        &config("1.1.0", &agent.socket, prev("10.0.1.9/32")),
    );
    assert_error(&out, "1.1.0", 101);

    let out = run_plugin(
        &env("CHECK"),
        &config("1.0.0", &agent.socket, prev("10.0.1.5/32")),
    );
    assert_error(&out, "1.0.0", 3);
}

#[test]
fn check_without_prev_result_is_refused_before_asking() {
    let out = run_plugin(
        &env("CHECK"),
        &config("1.1.0", Path::new("/nonexistent/agent.sock"), json!({})),
    );
    assert_error(&out, "1.1.0", 7);
}

#[test]
fn gc_sends_the_valid_attachments() {
    let agent = FakeAgent::start(vec![Canned::Answer(AgentResponse::Done)]);
    let valid = json!({"cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}]});
    let out = run_plugin(
        &[("CNI_COMMAND", "GC")],
        &config("1.1.0", &agent.socket, valid),
    );
    assert_ok_silent(&out);
    assert_eq!(
        agent.request(),
        AgentRequest::Gc {
            valid: vec![attachment()]
        }
    );
}

#[test]
fn status_is_silent_when_the_agent_is_up() {
    let agent = FakeAgent::start(vec![
        Canned::Answer(AgentResponse::Done),
        Canned::Answer(AgentResponse::Failed(CniError::new(50, "no pool yet", ""))),
    ]);
    let out = run_plugin(
        &[("CNI_COMMAND", "STATUS")],
        &config("1.1.0", &agent.socket, json!({})),
    );
    assert_ok_silent(&out);
    assert_eq!(agent.request(), AgentRequest::Status);
    let out = run_plugin(
        &[("CNI_COMMAND", "STATUS")],
        &config("1.1.0", &agent.socket, json!({})),
    );
    assert_error(&out, "1.1.0", 50);
}

#[test]
fn unreachable_agent() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("absent.sock");
    let gc = json!({"cni.dev/valid-attachments": []});
    let table: [(Vars, Value, u32); 5] = [
        (env("ADD"), json!({}), 11),
        (env("DEL"), json!({}), 11),
        (
            env("CHECK"),
            json!({"prevResult": {"ips": [{"address": "10.0.1.5/32"}]}}),
            11,
        ),
        (vec![("CNI_COMMAND", "GC")], gc, 11),
        (vec![("CNI_COMMAND", "STATUS")], json!({}), 50),
    ];
    for (vars, extra, code) in table {
        let out = run_plugin(&vars, &config("1.1.0", &absent, extra));
        let json = assert_error(&out, "1.1.0", code);
        assert!(
            json["details"]
                .as_str()
                .is_some_and(|d| d.contains("absent.sock")),
            "{json}"
        );
    }
}

#[test]
fn silent_agent_times_out_as_try_again_later() {
    let agent = FakeAgent::start(vec![Canned::Silence(Duration::from_secs(4))]);
    let started = std::time::Instant::now();
    let out = run_plugin(&env("ADD"), &config("1.1.0", &agent.socket, json!({})));
    let json = assert_error(&out, "1.1.0", 11);
    assert!(
        json["details"]
            .as_str()
            .is_some_and(|d| d.contains("did not answer")),
        "{json}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the 2 s timeout held: {:?}",
        started.elapsed()
    );
}

#[test]
fn agent_out_of_protocol() {
    let agent = FakeAgent::start(vec![
        Canned::Raw(b"hello"),
        Canned::Answer(AgentResponse::Done),
    ]);
    let out = run_plugin(&env("ADD"), &config("1.1.0", &agent.socket, json!({})));
    assert_error(&out, "1.1.0", 100);
    // Done is no answer to ADD
    let out = run_plugin(&env("ADD"), &config("1.1.0", &agent.socket, json!({})));
    assert_error(&out, "1.1.0", 100);
}

#[test]
fn bad_invocations() {
    let socket = Path::new("/nonexistent/agent.sock");
    let good = config("1.1.0", socket, json!({}));
    let no_netns: Vec<_> = env("ADD")
        .into_iter()
        .filter(|(k, _)| *k != "CNI_NETNS")
        .collect();
    // (env, stdin, error cniVersion, code)
    let table: Vec<(Vars, Vec<u8>, &str, u32)> = vec![
        (vec![], good.clone(), "1.1.0", 4),
        (vec![("CNI_COMMAND", "FROB")], good.clone(), "1.1.0", 4),
        (no_netns, config("1.0.0", socket, json!({})), "1.0.0", 4),
        (env("ADD"), b"{not json".to_vec(), "1.1.0", 6),
        (env("ADD"), config("0.4.0", socket, json!({})), "1.1.0", 1),
        (env("DEL"), config("2.0.0", socket, json!({})), "1.1.0", 1),
        (
            vec![("CNI_COMMAND", "STATUS")],
            config("1.0.0", socket, json!({})),
            "1.0.0",
            1,
        ),
        (
            env("ADD"),
            br#"{"cniVersion":"1.0.0","name":"pods","type":"ptp"}"#.to_vec(),
            "1.0.0",
            7,
        ),
    ];
    for (vars, stdin, version, code) in table {
        let out = run_plugin(&vars, &stdin);
        assert_error(&out, version, code);
    }
}
