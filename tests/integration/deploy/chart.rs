//! The chart's other values render to what they say: images by repository
//! plus tag, digest or both, with their pull policy and pull secrets, for
//! the operator and the agent; the module's pull secret and the egress CA
//! mounted where the flags point; the pod network instead of the node's;
//! scheduling, annotations, extra arguments and environment, update
//! strategies and startup probes; Cilium's namespace for the other-writer
//! check. `helm package` makes a chart that renders, and the notes printed
//! after an install say what to check.

use std::ffi::OsStr;

use serde_yaml::Value;

use super::{base_values, chart, documents, find, get, helm, helm_template, stderr, strings};

fn values(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("a temporary values file");
    std::fs::write(file.path(), text).expect("values written");
    file
}

fn operator_pod(objects: &[Value]) -> &Value {
    get(
        find(objects, "Deployment", "ipam-operator"),
        "spec.template.spec",
    )
}

fn agent_pod(objects: &[Value]) -> &Value {
    get(
        find(objects, "DaemonSet", "ipam-agent"),
        "spec.template.spec",
    )
}

fn env_of<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    get(container, "env")
        .as_sequence()?
        .iter()
        .find(|e| get(e, "name").as_str() == Some(name))
        .and_then(|e| get(e, "value").as_str())
}

/// A container's mount path of a volume, and that volume.
fn mounted<'a>(pod: &'a Value, container: &'a Value, volume: &str) -> (&'a str, &'a Value) {
    let path = get(container, "volumeMounts")
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|m| get(m, "name").as_str() == Some(volume))
        .and_then(|m| {
            assert_eq!(get(m, "readOnly").as_bool(), Some(true), "{volume}");
            get(m, "mountPath").as_str()
        })
        .unwrap_or_else(|| panic!("{volume} is not mounted"));
    let source = get(pod, "volumes")
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|v| get(v, "name").as_str() == Some(volume))
        .unwrap_or_else(|| panic!("no volume {volume}"));
    (path, source)
}

#[test]
fn images_are_named_by_repository_tag_or_digest_with_their_pull_settings() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let agent_on = "cilium: {agent: false}\nagent: {enabled: true}\n";
    for (image, expected) in [
        (
            "{}",
            "ghcr.io/ipam-operator/ipam-operator:0.1.0".to_string(),
        ),
        (
            "{tag: '1.2'}",
            "ghcr.io/ipam-operator/ipam-operator:1.2".to_string(),
        ),
        (
            &format!("{{digest: '{digest}'}}"),
            format!("ghcr.io/ipam-operator/ipam-operator@{digest}"),
        ),
        (
            &format!("{{repository: registry.example/ipam, tag: '1.2', digest: '{digest}'}}"),
            format!("registry.example/ipam:1.2@{digest}"),
        ),
    ] {
        let file = values(&format!("{agent_on}image: {image}\n"));
        let objects = helm_template(&[file.path()]);
        assert_eq!(
            get(operator_pod(&objects), "containers.0.image").as_str(),
            Some(expected.as_str()),
            "{image}"
        );
    }
    // The chart's appVersion is the default tag of both images.
    let chart_yaml: Value = serde_yaml::from_str(
        &std::fs::read_to_string(chart().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml is YAML");
    let app_version = get(&chart_yaml, "appVersion").as_str().expect("appVersion");
    let file = values(&format!(
        "{agent_on}imagePullSecrets: [{{name: operator-pull}}]\n\
         image: {{pullPolicy: Always}}\n\
         agent:\n  enabled: true\n  imagePullSecrets: [{{name: agent-pull}}]\n  \
         image: {{pullPolicy: Never, digest: '{digest}'}}\n"
    ));
    let objects = helm_template(&[file.path()]);
    let operator = operator_pod(&objects);
    assert_eq!(
        get(operator, "containers.0.image").as_str(),
        Some(format!("ghcr.io/ipam-operator/ipam-operator:{app_version}").as_str())
    );
    assert_eq!(
        get(operator, "containers.0.imagePullPolicy").as_str(),
        Some("Always")
    );
    assert_eq!(
        get(operator, "imagePullSecrets.0.name").as_str(),
        Some("operator-pull")
    );
    let agent = agent_pod(&objects);
    for container in ["containers.0", "initContainers.0"] {
        assert_eq!(
            get(agent, &format!("{container}.image")).as_str(),
            Some(format!("ghcr.io/ipam-operator/ipam-agent@{digest}").as_str()),
            "{container}"
        );
        assert_eq!(
            get(agent, &format!("{container}.imagePullPolicy")).as_str(),
            Some("Never")
        );
    }
    assert_eq!(
        get(agent, "imagePullSecrets.0.name").as_str(),
        Some("agent-pull")
    );
    // The agent's default image is its own, at the appVersion.
    let file = values(agent_on);
    let objects = helm_template(&[file.path()]);
    assert_eq!(
        get(agent_pod(&objects), "containers.0.image").as_str(),
        Some(format!("ghcr.io/ipam-operator/ipam-agent:{app_version}").as_str())
    );
    // A digest that is not sha256 hex, and a tag with a colon, are refused.
    for bad in [
        "image: {digest: 'sha256:xyz'}",
        "image: {tag: 'a:b'}",
        "agent: {image: {digest: 'md5:00'}}",
    ] {
        let file = values(bad);
        let refused = super::refused_values(file.path());
        assert!(
            refused.contains("digest") || refused.contains("tag"),
            "{bad}: {refused}"
        );
    }
}

#[test]
fn the_module_pull_secret_and_the_egress_ca_are_mounted_where_the_flags_point() {
    let file = values(
        "provider:\n  pullSecret: registry-login\n  egressCA: {configMap: corporate-ca, key: bundle.pem}\n",
    );
    let objects = helm_template(&[file.path()]);
    let pod = operator_pod(&objects);
    let operator = get(pod, "containers.0");
    let (path, volume) = mounted(pod, operator, "registry-credentials");
    assert_eq!(
        get(volume, "secret.secretName").as_str(),
        Some("registry-login")
    );
    assert_eq!(
        env_of(operator, "IPAM_REGISTRY_CREDENTIALS_FILE"),
        Some(format!("{path}/.dockerconfigjson").as_str()),
        "the Secret's .dockerconfigjson key"
    );
    let (path, volume) = mounted(pod, operator, "egress-ca");
    assert_eq!(get(volume, "configMap.name").as_str(), Some("corporate-ca"));
    assert_eq!(
        env_of(operator, "IPAM_EGRESS_CA_FILE"),
        Some(format!("{path}/bundle.pem").as_str())
    );
    // Neither without its value.
    let objects = helm_template(&[]);
    let operator = get(operator_pod(&objects), "containers.0");
    assert_eq!(env_of(operator, "IPAM_REGISTRY_CREDENTIALS_FILE"), None);
    assert_eq!(env_of(operator, "IPAM_EGRESS_CA_FILE"), None);
}

#[test]
fn scheduling_annotations_extra_arguments_and_strategies_render_as_given() {
    let file = values(
        "cilium: {agent: false}\n\
         hostNetwork: false\n\
         listenPort: 9100\n\
         nodeSelector: {pool: system}\n\
         tolerations: [{key: dedicated, operator: Exists}]\n\
         affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
           {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [system]}]}]}}}\n\
         topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, \
           whenUnsatisfiable: ScheduleAnyway}]\n\
         podAnnotations: {example.com/owner: network}\n\
         extraArgs: [--some-new-flag=1]\n\
         extraEnv: [{name: AWS_REGION, value: eu-west-1}]\n\
         updateStrategy: {type: Recreate}\n\
         startupProbe: {periodSeconds: 2, failureThreshold: 7}\n\
         agent:\n  enabled: true\n  nodeSelector: {pool: any}\n  affinity: {podAffinity: {}}\n  \
           podAnnotations: {example.com/owner: nodes}\n  extraArgs: [--x]\n  \
           extraEnv: [{name: RUST_BACKTRACE, value: '1'}]\n  \
           updateStrategy: {type: OnDelete}\n  startupProbe: {periodSeconds: 3, failureThreshold: 9}\n",
    );
    let objects = helm_template(&[file.path()]);
    let deployment = find(&objects, "Deployment", "ipam-operator");
    let pod = operator_pod(&objects);
    assert!(get(pod, "hostNetwork").is_null(), "the pod network");
    assert!(get(pod, "dnsPolicy").is_null());
    // Maps merge with the defaults (helm's rule; a key set to null goes).
    assert_eq!(get(pod, "nodeSelector.pool").as_str(), Some("system"));
    assert_eq!(
        get(pod, "nodeSelector")
            .get("kubernetes.io/os")
            .and_then(Value::as_str),
        Some("linux")
    );
    assert!(!get(pod, "affinity.podAntiAffinity").is_null());
    assert_eq!(get(pod, "tolerations.0.key").as_str(), Some("dedicated"));
    assert_eq!(
        get(pod, "tolerations.1"),
        &Value::Null,
        "replaced, not merged"
    );
    assert_eq!(
        get(pod, "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.0.matchExpressions.0.key").as_str(),
        Some("pool")
    );
    assert_eq!(
        get(pod, "topologySpreadConstraints.0.topologyKey").as_str(),
        Some("topology.kubernetes.io/zone")
    );
    assert_eq!(
        get(deployment, "spec.template.metadata.annotations")
            .get("example.com/owner")
            .and_then(Value::as_str),
        Some("network")
    );
    let operator = get(pod, "containers.0");
    assert_eq!(strings(get(operator, "args")), ["run", "--some-new-flag=1"]);
    assert_eq!(env_of(operator, "AWS_REGION"), Some("eu-west-1"));
    assert_eq!(env_of(operator, "IPAM_LISTEN"), Some("0.0.0.0:9100"));
    assert_eq!(get(operator, "ports.0.containerPort").as_u64(), Some(9100));
    assert_eq!(
        get(
            find(&objects, "Service", "ipam-operator"),
            "spec.ports.0.port"
        )
        .as_u64(),
        Some(9100)
    );
    assert_eq!(
        get(deployment, "spec.strategy.type").as_str(),
        Some("Recreate")
    );
    assert_eq!(
        get(operator, "startupProbe.periodSeconds").as_u64(),
        Some(2)
    );
    assert_eq!(
        get(operator, "startupProbe.failureThreshold").as_u64(),
        Some(7)
    );

    let daemonset = find(&objects, "DaemonSet", "ipam-agent");
    let pod = agent_pod(&objects);
    assert_eq!(get(pod, "nodeSelector.pool").as_str(), Some("any"));
    assert!(!get(pod, "affinity.podAffinity").is_null());
    assert_eq!(
        get(daemonset, "spec.template.metadata.annotations")
            .get("example.com/owner")
            .and_then(Value::as_str),
        Some("nodes")
    );
    let agent = get(pod, "containers.0");
    assert_eq!(strings(get(agent, "args")), ["--x"]);
    assert_eq!(env_of(agent, "RUST_BACKTRACE"), Some("1"));
    assert_eq!(
        get(daemonset, "spec.updateStrategy.type").as_str(),
        Some("OnDelete")
    );
    assert_eq!(
        get(agent, "startupProbe.httpGet.path").as_str(),
        Some("/healthz")
    );
    assert_eq!(
        get(agent, "startupProbe.failureThreshold").as_u64(),
        Some(9)
    );

    // The defaults: Linux nodes, no surge (the node's port), one at a time.
    let objects =
        helm_template(&[values("cilium: {agent: false}\nagent: {enabled: true}\n").path()]);
    let deployment = find(&objects, "Deployment", "ipam-operator");
    assert_eq!(
        get(deployment, "spec.strategy.rollingUpdate.maxSurge").as_u64(),
        Some(0)
    );
    let daemonset = find(&objects, "DaemonSet", "ipam-agent");
    assert_eq!(
        get(
            daemonset,
            "spec.updateStrategy.rollingUpdate.maxUnavailable"
        )
        .as_u64(),
        Some(1)
    );
    for pod in [operator_pod(&objects), agent_pod(&objects)] {
        assert_eq!(
            get(pod, "nodeSelector")
                .get("kubernetes.io/os")
                .and_then(Value::as_str),
            Some("linux")
        );
    }
}

#[test]
fn the_packaged_chart_renders_and_its_notes_say_what_to_check() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let output = helm([
        OsStr::new("package"),
        chart().as_os_str(),
        OsStr::new("--destination"),
        dir.path().as_os_str(),
    ]);
    assert!(output.status.success(), "helm package: {}", stderr(&output));
    let packaged: Vec<_> = std::fs::read_dir(dir.path())
        .expect("the destination")
        .map(|e| e.expect("an entry").path())
        .collect();
    let [archive] = packaged.as_slice() else {
        panic!("not one archive: {packaged:?}")
    };
    assert!(
        archive
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("ipam-operator-") && n.ends_with(".tgz")),
        "{}",
        archive.display()
    );
    let template = |chart: &std::path::Path| {
        let output = helm([
            OsStr::new("template"),
            OsStr::new("ipam-operator"),
            chart.as_os_str(),
            OsStr::new("--namespace"),
            OsStr::new("kube-system"),
            OsStr::new("--values"),
            base_values().as_os_str(),
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        super::normalized(documents(&String::from_utf8_lossy(&output.stdout)))
    };
    assert_eq!(
        template(archive),
        template(&chart()),
        "the package renders as the chart's directory does"
    );
    // The bare package refuses as the directory does.
    let output = helm([OsStr::new("template"), OsStr::new("t"), archive.as_os_str()]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("provider.module"));

    // What an install prints (NOTES.txt).
    let output = helm([
        OsStr::new("install"),
        OsStr::new("ipam-operator"),
        archive.as_os_str(),
        OsStr::new("--dry-run=client"),
        OsStr::new("--namespace"),
        OsStr::new("kube-system"),
        OsStr::new("--values"),
        base_values().as_os_str(),
        OsStr::new("--set"),
        OsStr::new("cilium.agent=false,agent.enabled=true"),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let notes = stdout
        .split_once("NOTES:")
        .map(|(_, notes)| notes)
        .unwrap_or_else(|| panic!("no notes in\n{stdout}"));
    for part in [
        "get pods -l app.kubernetes.io/name=ipam-operator",
        "/readyz",
        "get daemonset ipam-agent",
        "spec.ipam.pool",
        "cilium_operator_ipam_nodes{category=\"in-deficit\"}",
        "cilium_operator_ipam_api_calls_total",
        ":9967/metrics",
    ] {
        assert!(notes.contains(part), "{part:?} not in the notes:\n{notes}");
    }
}

#[test]
fn cilium_elsewhere_moves_the_cilium_reader_role_and_tells_the_operator_without_a_kvstore() {
    let objects = helm_template(&[]);
    let role = find(&objects, "Role", "ipam-operator-cilium-reader");
    assert_eq!(
        get(role, "metadata.namespace").as_str(),
        Some("kube-system")
    );
    let operator = get(operator_pod(&objects), "containers.0");
    assert_eq!(env_of(operator, "IPAM_CILIUM_POD_NAMESPACE"), None);
    assert_eq!(env_of(operator, "IPAM_OTHER_WRITER_IGNORE_MANAGERS"), None);

    let file =
        values("kvstore: {ciliumPodNamespace: cilium}\notherWriters: {ignoreManagers: []}\n");
    let objects = helm_template(&[file.path()]);
    for kind in ["Role", "RoleBinding"] {
        let object = find(&objects, kind, "ipam-operator-cilium-reader");
        assert_eq!(
            get(object, "metadata.namespace").as_str(),
            Some("cilium"),
            "{kind}"
        );
    }
    let binding = find(&objects, "RoleBinding", "ipam-operator-cilium-reader");
    assert_eq!(
        get(binding, "subjects.0.namespace").as_str(),
        Some("kube-system"),
        "the operator's ServiceAccount stays in the release's namespace"
    );
    let operator = get(operator_pod(&objects), "containers.0");
    assert_eq!(
        env_of(operator, "IPAM_CILIUM_POD_NAMESPACE"),
        Some("cilium"),
        "with no kvstore too"
    );
    assert!(env_of(operator, "IPAM_ETCD_ENDPOINTS").is_none());
    assert_eq!(
        env_of(operator, "IPAM_OTHER_WRITER_IGNORE_MANAGERS"),
        Some(""),
        "no manager ignored"
    );
}
