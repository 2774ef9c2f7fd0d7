//! Every flag of `ipam-operator run` and of `ipam-agent` is reachable from
//! the chart: each binary's `--help` is read (flag and `[env: NAME]`), and
//! every flag must be in this file's table, either as a value of the chart
//! (the table says which, a value to set and what the container's
//! environment must then hold: one render with every such value set checks
//! each), as something the chart sets itself (the downward API, its own
//! mounts), or in the commented list of flags deliberately not exposed. A
//! flag of the table that the binary does not have fails too, and so does
//! an environment variable the chart sets that no flag reads.
//!
//! The binaries are the workspace's own, beside this test binary in the
//! target dir (`cargo test --workspace` builds them; with `-p ipam-tests`
//! alone, `cargo build -p ipam-operator -p ipam-agent` first).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use serde_yaml::{Mapping, Value};

use super::{find, get, helm_template};

/// How the chart reaches a flag.
enum Reach {
    /// A value of the chart: `path` (dotted) set to `set` (YAML) puts
    /// `rendered` in the flag's environment variable.
    Value {
        path: &'static str,
        set: &'static str,
        rendered: &'static str,
    },
    /// The chart sets it itself, whatever the values (why).
    Chart(&'static str),
    /// Deliberately not exposed (why); `extraArgs`/`extraEnv` still can.
    NotExposed(&'static str),
}

use Reach::{Chart, NotExposed, Value as V};

const fn v(path: &'static str, set: &'static str, rendered: &'static str) -> Reach {
    V {
        path,
        set,
        rendered,
    }
}

/// `ipam-operator run`'s flags.
const OPERATOR: &[(&str, Reach)] = &[
    (
        "--config",
        NotExposed("every flag has a value of its own; a second place to set them would hide which wins"),
    ),
    ("--log-format", v("logFormat", "text", "text")),
    ("--log-level", v("logLevel", "debug", "debug")),
    (
        "--provider",
        v(
            "provider.module",
            "oci://registry.example/p@sha256:1111111111111111111111111111111111111111111111111111111111111111",
            "oci://registry.example/p@sha256:1111111111111111111111111111111111111111111111111111111111111111",
        ),
    ),
    ("--provider-sha256", v("provider.sha256", "'2222222222222222222222222222222222222222222222222222222222222222'", "2222222222222222222222222222222222222222222222222222222222222222")),
    ("--provider-settings", Chart("the ConfigMap of provider.settings, mounted")),
    (
        "--provider-credentials",
        v("provider.credentialsSecret", "creds", "/etc/ipam-operator/credentials/credentials.yaml"),
    ),
    ("--credentials-source", v("provider.awsCredentials", "true", "aws")),
    ("--cloud", v("provider.cloud", "aws", "aws")),
    ("--ipam-mode", v("provider.ipamMode", "azure", "azure")),
    ("--rate-bucket", v("provider.rateBuckets", "{Attach: '5:1', Create: '6:2'}", "Attach=5:1,Create=6:2")),
    ("--rate-global-cap", v("provider.rateGlobalCap", "'20:4'", "20:4")),
    ("--allow-egress", v("provider.allowEgress", "[https://a.example, https://b.example]", "https://a.example,https://b.example")),
    (
        "--egress-ca-file",
        v("provider.egressCA.configMap", "private-ca", "/etc/ipam-operator/egress-ca/ca.crt"),
    ),
    (
        "--registry-credentials-file",
        v("provider.pullSecret", "registry", "/etc/ipam-operator/registry/.dockerconfigjson"),
    ),
    (
        "--plain-http-registry",
        v(
            "provider.plainHttpRegistries",
            "['127.0.0.1:5000', 'localhost:5001']",
            "127.0.0.1:5000,localhost:5001",
        ),
    ),
    ("--provider-timeout-ms", v("provider.limits.callTimeoutMs", "1001", "1001")),
    ("--provider-memory-mib", v("provider.limits.memoryMiB", "1002", "1002")),
    ("--provider-host-entries", v("provider.limits.hostEntries", "1003", "1003")),
    ("--provider-host-mib", v("provider.limits.hostMiB", "1004", "1004")),
    ("--provider-concurrent-requests", v("provider.limits.concurrentRequests", "1005", "1005")),
    ("--provider-call-body-mib", v("provider.limits.callBodyMiB", "1006", "1006")),
    (
        "--provider-allow-special-address",
        v("provider.allowSpecialAddresses", "[169.254.169.254, 'fd00:ec2::254']", "169.254.169.254,fd00:ec2::254"),
    ),
    ("--cluster-name", v("clusterName", "flags-test", "flags-test")),
    ("--prefix-delegation", v("prefixDelegation", "true", "true")),
    ("--release-delay-seconds", v("pools.releaseDelaySeconds", "1007", "1007")),
    ("--free-interfaces", v("pools.freeInterfaces", "false", "false")),
    ("--reuse-cooldown-seconds", v("pools.reuseCooldownSeconds", "1008", "1008")),
    ("--resync-seconds", v("pools.resyncSeconds", "1009", "1009")),
    ("--max-concurrent-nodes", v("pools.maxConcurrentNodes", "1010", "1010")),
    ("--gc-interval-seconds", v("interfaceGC.intervalSeconds", "1011", "1011")),
    ("--gc-grace-seconds", v("interfaceGC.graceSeconds", "1012", "1012")),
    (
        "--adopt-interface-tags",
        v(
            "interfaceGC.adoptTags",
            "[io.cilium/cluster-name=prod, io.cilium/cilium-managed=true]",
            "io.cilium/cluster-name=prod,io.cilium/cilium-managed=true",
        ),
    ),
    ("--other-writer-window-seconds", v("otherWriters.windowSeconds", "1025", "1025")),
    (
        "--other-writer-ignore-managers",
        v("otherWriters.ignoreManagers", "[cilium-agent, kubectl-edit]", "cilium-agent,kubectl-edit"),
    ),
    ("--other-writer-poll-seconds", v("otherWriters.pollSeconds", "1026", "1026")),
    ("--leader-elect", v("leaderElection.enabled", "false", "false")),
    ("--lease-name", v("leaderElection.leaseName", "other-lease", "other-lease")),
    (
        "--lease-namespace",
        Chart("POD_NAMESPACE from the downward API: the Role for leases is in the release's namespace"),
    ),
    ("--identity", Chart("POD_NAME from the downward API")),
    ("--lease-duration-seconds", v("leaderElection.leaseDurationSeconds", "1013", "1013")),
    ("--renew-deadline-seconds", v("leaderElection.renewDeadlineSeconds", "1014", "1014")),
    ("--retry-period-seconds", v("leaderElection.retryPeriodSeconds", "1015", "1015")),
    ("--listen", v("listenPort", "9100", "0.0.0.0:9100")),
    ("--register-crd", v("registerCRD", "true", "true")),
    ("--etcd-endpoints", v("kvstore.endpoints", "[https://e1.example:2379, https://e2.example:2379]", "https://e1.example:2379,https://e2.example:2379")),
    ("--etcd-config", v("kvstore.etcdConfig.configMap", "cilium-config", "/var/lib/etcd-config/etcd-config")),
    ("--etcd-ca-file", v("kvstore.tlsSecret", "etcd-tls", "/var/lib/etcd-secrets/etcd-client-ca.crt")),
    ("--etcd-cert-file", v("kvstore.tlsSecret", "etcd-tls", "/var/lib/etcd-secrets/etcd-client.crt")),
    ("--etcd-key-file", v("kvstore.tlsSecret", "etcd-tls", "/var/lib/etcd-secrets/etcd-client.key")),
    ("--etcd-username", v("kvstore.username", "ipam", "ipam")),
    ("--etcd-password-file", v("kvstore.passwordSecret", "etcd-password", "/var/lib/etcd-password/password")),
    ("--etcd-qps", v("kvstore.qps", "1016", "1016")),
    ("--etcd-burst", v("kvstore.burst", "1017", "1017")),
    ("--kvstore-lease-ttl-seconds", v("kvstore.leaseTTLSeconds", "1018", "1018")),
    ("--kvstore-lock-ttl-seconds", v("kvstore.lockTTLSeconds", "1019", "1019")),
    ("--cluster-id", v("kvstore.clusterId", "7", "7")),
    ("--max-connected-clusters", v("kvstore.maxConnectedClusters", "511", "511")),
    ("--cilium-pod-namespace", v("kvstore.ciliumPodNamespace", "cilium", "cilium")),
    ("--cilium-pod-labels", v("kvstore.ciliumPodLabels", "app=agent", "app=agent")),
    ("--kvstore-heartbeat", v("kvstore.heartbeat", "false", "false")),
    ("--kvstore-lock-sweeper", v("kvstore.lockSweeper", "false", "false")),
    ("--identity-gc", v("kvstore.identityGC", "false", "false")),
    ("--identity-gc-interval-seconds", v("kvstore.identityGCIntervalSeconds", "1020", "1020")),
    ("--identity-gc-rate-per-minute", v("kvstore.identityGCRatePerMinute", "1021", "1021")),
    ("--synchronize-k8s-services", v("kvstore.synchronizeServices", "false", "false")),
    ("--synchronize-k8s-nodes", v("kvstore.synchronizeNodes", "false", "false")),
    (
        "--cilium-endpoint-gc-interval-seconds",
        v("endpointGC.intervalSeconds", "1022", "1022"),
    ),
    (
        "--kubeconfig",
        NotExposed("in a pod the in-cluster configuration is the one to use"),
    ),
];

/// Environment variables the chart gives the operator that are not a flag's
/// own but the module's cache (`IPAM_CACHE_DIR`, read by the provider
/// runtime, not a flag).
const OPERATOR_ENV_NOT_FLAGS: &[&str] = &["IPAM_CACHE_DIR"];

/// `ipam-agent`'s flags.
const AGENT: &[(&str, Reach)] = &[
    ("--node-name", Chart("NODE_NAME from the downward API (spec.nodeName)")),
    ("--cloud", v("agent.cloud", "aws", "aws")),
    ("--imds-endpoint", v("agent.imdsEndpoint", "http://127.0.0.1:1338", "http://127.0.0.1:1338")),
    (
        "--instance-id",
        NotExposed("each node's own: a DaemonSet-wide value would give every node the same; from the metadata service or the Node's spec.providerID"),
    ),
    ("--instance-type", v("agent.instance.type", "m5.large", "m5.large")),
    ("--availability-zone", v("agent.instance.availabilityZone", "us-east-1a", "us-east-1a")),
    ("--vpc-id", v("agent.instance.vpcId", "vpc-1", "vpc-1")),
    ("--node-subnet-id", v("agent.instance.subnetId", "subnet-0", "subnet-0")),
    ("--eni-first-interface-index", v("agent.eni.firstInterfaceIndex", "1", "1")),
    ("--eni-subnet-ids", v("agent.eni.subnetIds", "[subnet-1, subnet-2]", "subnet-1,subnet-2")),
    ("--eni-subnet-tags", v("agent.eni.subnetTags", "{b: '2', a: '1'}", "a=1,b=2")),
    ("--eni-security-group-ids", v("agent.eni.securityGroupIds", "[sg-1]", "sg-1")),
    ("--eni-security-group-tags", v("agent.eni.securityGroupTags", "{team: net}", "team=net")),
    ("--pre-allocate", v("agent.ipam.preAllocate", "0", "0")),
    ("--min-allocate", v("agent.ipam.minAllocate", "2", "2")),
    ("--max-allocate", v("agent.ipam.maxAllocate", "30", "30")),
    ("--max-above-watermark", v("agent.ipam.maxAboveWatermark", "4", "4")),
    ("--state-dir", v("agent.stateDir", "/var/lib/ipam-agent", "/var/lib/ipam-agent")),
    ("--socket", v("agent.socketDir", "/run/elsewhere", "/run/elsewhere/agent.sock")),
    ("--listen", v("agent.listenPort", "9100", "0.0.0.0:9100")),
    ("--routing", v("agent.routing", "false", "false")),
    ("--snat", v("agent.snat.enabled", "false", "false")),
    (
        "--snat-exclude-cidrs",
        v("agent.snat.excludeCidrs", "[192.168.0.0/16, 172.16.0.0/12]", "192.168.0.0/16,172.16.0.0/12"),
    ),
    (
        "--cni-conflist",
        v("agent.cni.confName", "00-ipam.conflist", "/etc/ipam-agent/cni/00-ipam.conflist"),
    ),
    ("--cni-conf-dir", Chart("agent.cni.confDir on the node, mounted at /host/cni-conf")),
    ("--cni-bin-dir", Chart("agent.cni.binDir on the node, mounted at /host/cni-bin")),
    ("--cni-take-over", v("agent.cni.takeOver", "true", "true")),
    ("--pod-name", Chart("POD_NAME from the downward API (metadata.name)")),
    ("--pod-namespace", Chart("POD_NAMESPACE from the downward API (metadata.namespace)")),
    ("--datapath-object", v("agent.datapath.object", "/opt/datapath.o", "/opt/datapath.o")),
    ("--bpffs", v("agent.datapath.bpffs", "/run/bpf", "/run/bpf")),
    ("--host-address-sync-secs", v("agent.datapath.hostAddressSyncSeconds", "1023", "1023")),
    ("--status-interval-ms", v("agent.statusIntervalMs", "1024", "1024")),
    (
        "--kubeconfig",
        NotExposed("in a pod the in-cluster configuration is the one to use"),
    ),
    ("--log-format", v("logFormat", "text", "text")),
    ("--log-level", v("agent.logLevel", "trace", "trace")),
];

/// Values under both renders: the agent's needs the datapath on and no
/// cilium-agent, and the operator's cloud to be the agent's.
const AGENT_BASE: &str =
    "cilium: {agent: false}\nprovider: {name: aws}\nagent: {enabled: true, datapath: {enabled: true}}\n";

/// A binary of the workspace, beside this test binary's directory.
fn built_binary(name: &str) -> PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary is in <target>/<profile>/deps");
    let binary = profile_dir.join(name);
    assert!(
        binary.is_file(),
        "{} is not built: `cargo test --workspace` builds it, or `cargo build -p {name}` \
         before `cargo test -p ipam-tests`",
        binary.display()
    );
    binary
}

/// The flags of a `--help` text and the environment variable each reads.
fn help_flags(binary: &str, args: &[&str]) -> BTreeMap<String, Option<String>> {
    let output = Command::new(built_binary(binary))
        .args(args)
        .arg("--help")
        // The help shows the environment's values: none, so only names.
        .env_clear()
        .output()
        .unwrap_or_else(|e| panic!("{binary} --help: {e}"));
    assert!(
        output.status.success(),
        "{binary} {args:?} --help: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let mut flags: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        // An option's heading, `--flag <VALUE>` or `-h, --help`, is indented
        // less than its description (which may name other flags).
        let indent = line.len() - trimmed.len();
        let short = trimmed.starts_with('-') && trimmed.get(2..4) == Some(", ");
        let heading = (indent <= 6 && (trimmed.starts_with("--") || short))
            .then(|| trimmed.split_whitespace().find(|w| w.starts_with("--")))
            .flatten();
        if let Some(flag) = heading {
            let flag = flag.trim_end_matches(',').to_string();
            flags.insert(flag.clone(), None);
            current = Some(flag);
        } else if let Some(env) = trimmed.strip_prefix("[env: ") {
            let name = env.split(['=', ']']).next().unwrap_or_default().to_string();
            let flag = current
                .clone()
                .unwrap_or_else(|| panic!("{binary}: [env: {name}] before any flag"));
            flags.insert(flag, Some(name));
        }
    }
    for builtin in ["--help", "--version"] {
        flags.remove(builtin);
    }
    assert!(
        flags.len() > 10,
        "{binary} {args:?} --help: too few flags read from\n{text}"
    );
    flags
}

/// Set a dotted path in a YAML mapping, creating the mappings on the way.
fn set_path(root: &mut Mapping, path: &str, value: Value) {
    let (head, rest) = match path.split_once('.') {
        Some((head, rest)) => (head, Some(rest)),
        None => (path, None),
    };
    let key = Value::String(head.to_string());
    match rest {
        None => {
            root.insert(key, value);
        }
        Some(rest) => {
            let entry = root
                .entry(key)
                .or_insert_with(|| Value::Mapping(Mapping::new()));
            let Value::Mapping(inner) = entry else {
                panic!("{path}: {head} is not a mapping")
            };
            set_path(inner, rest, value);
        }
    }
}

/// Every `Value` of a table set at once, over `base` (YAML).
fn values_setting_all(base: &str, table: &[(&str, Reach)]) -> tempfile::NamedTempFile {
    let mut root: Mapping = serde_yaml::from_str(base).expect("base values");
    for (flag, reach) in table {
        if let V { path, set, .. } = reach {
            let value: Value =
                serde_yaml::from_str(set).unwrap_or_else(|e| panic!("{flag}: {set}: {e}"));
            set_path(&mut root, path, value);
        }
    }
    let file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("a temporary values file");
    std::fs::write(
        file.path(),
        serde_yaml::to_string(&root).expect("values as YAML"),
    )
    .expect("values written");
    file
}

/// A container's environment: name to value (`None` for valueFrom).
fn container_env(container: &Value) -> BTreeMap<String, Option<String>> {
    get(container, "env")
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                get(e, "name").as_str().expect("an env name").to_string(),
                get(e, "value").as_str().map(str::to_string),
            )
        })
        .collect()
}

/// The help's flags, each reached as the table says in `env` (the
/// container's environment with every table value set).
fn check_reachable(
    what: &str,
    help: &BTreeMap<String, Option<String>>,
    table: &[(&str, Reach)],
    env: &BTreeMap<String, Option<String>>,
) {
    let table: BTreeMap<&str, &Reach> = table.iter().map(|(f, r)| (*f, r)).collect();
    let mut problems = Vec::new();
    for (flag, variable) in help {
        let Some(reach) = table.get(flag.as_str()) else {
            problems.push(format!(
                "{flag} ({variable:?}): no value of the chart sets it; add one (and a row \
                 here), or list it as NotExposed with the reason"
            ));
            continue;
        };
        let Some(variable) = variable else {
            problems.push(format!("{flag}: no environment variable to set it with"));
            continue;
        };
        match reach {
            V { path, rendered, .. } => match env.get(variable) {
                Some(Some(value)) if value == rendered => {}
                other => {
                    let got = match other {
                        Some(Some(value)) => format!("{value:?}"),
                        Some(None) => "a valueFrom".to_string(),
                        None => "nothing".to_string(),
                    };
                    problems.push(format!(
                        "{flag}: {path} gives {variable} {got}, not {rendered:?}"
                    ));
                }
            },
            Chart(why) => {
                if !env.contains_key(variable) {
                    problems.push(format!("{flag}: the chart does not set {variable} ({why})"));
                }
            }
            NotExposed(why) => {
                if why.trim().is_empty() {
                    problems.push(format!("{flag}: not exposed without a reason"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

/// The table's flags the binary does not have, and variables the chart
/// sets that no flag reads.
fn stale(
    what: &str,
    help: &BTreeMap<String, Option<String>>,
    table: &[(&str, Reach)],
    env: &BTreeMap<String, Option<String>>,
    not_flags: &[&str],
) -> Vec<String> {
    let mut problems: Vec<String> = table
        .iter()
        .filter(|(flag, _)| !help.contains_key(*flag))
        .map(|(flag, _)| format!("{what}: {flag}: in the table, not in --help"))
        .collect();
    let read: BTreeSet<&str> = help.values().flatten().map(String::as_str).collect();
    problems.extend(
        env.keys()
            .filter(|name| !read.contains(name.as_str()) && !not_flags.contains(&name.as_str()))
            .map(|name| format!("{what}: {name}: set by the chart, read by no flag")),
    );
    problems
}

fn operator_render() -> BTreeMap<String, Option<String>> {
    let values = values_setting_all("{}", OPERATOR);
    let objects = helm_template(&[values.path()]);
    container_env(get(
        find(&objects, "Deployment", "ipam-operator"),
        "spec.template.spec.containers.0",
    ))
}

fn agent_render() -> BTreeMap<String, Option<String>> {
    let values = values_setting_all(AGENT_BASE, AGENT);
    let objects = helm_template(&[values.path()]);
    container_env(get(
        find(&objects, "DaemonSet", "ipam-agent"),
        "spec.template.spec.containers.0",
    ))
}

#[test]
fn every_flag_of_the_operator_and_the_agent_is_reachable_from_the_chart() {
    check_reachable(
        "ipam-operator run",
        &help_flags("ipam-operator", &["run"]),
        OPERATOR,
        &operator_render(),
    );
    check_reachable(
        "ipam-agent",
        &help_flags("ipam-agent", &[]),
        AGENT,
        &agent_render(),
    );
}

#[test]
fn every_flag_the_chart_sets_is_one_the_binaries_have() {
    let mut problems = stale(
        "ipam-operator run",
        &help_flags("ipam-operator", &["run"]),
        OPERATOR,
        &operator_render(),
        OPERATOR_ENV_NOT_FLAGS,
    );
    problems.extend(stale(
        "ipam-agent",
        &help_flags("ipam-agent", &[]),
        AGENT,
        &agent_render(),
        &[],
    ));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
