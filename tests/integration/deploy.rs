//! deploy/: every kustomize overlay renders (`kubectl kustomize`) and its
//! objects are checked (kinds, RBAC verbs, probes, security context); the
//! Helm chart, which cannot be rendered by helm here (no helm binary on this
//! machine), is rendered by a small renderer of exactly the template subset
//! the chart uses (anything else fails the test) and must give the same
//! objects as the kustomize base with its default values, and as the aws and
//! azure overlays with deploy/helm/examples/*.yaml; values.yaml is checked
//! against values.schema.json.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_yaml::Value;

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
        assert!(
            !verbs
                .iter()
                .any(|v| v == "delete" || v == "deletecollection"),
            "{overlay}: deletes"
        );
        let groups = strings(get(rule, "apiGroups"));
        assert!(!resources.is_empty(), "{overlay}: a rule without resources");
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

#[test]
fn every_overlay_renders_least_privilege_locked_down_objects() {
    for overlay in ["base", "overlays/aws", "overlays/azure", "overlays/mock"] {
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
    // The cloud decides the rate model the engine keeps to: EC2's buckets
    // only where the provider talks to EC2.
    for (overlay, cloud) in [
        ("base", "generic"),
        ("overlays/aws", "aws"),
        ("overlays/azure", "generic"),
        ("overlays/mock", "generic"),
    ] {
        let objects = kustomize(overlay);
        let env = get(
            find(&objects, "Deployment", "ipam-operator"),
            "spec.template.spec.containers.0.env",
        );
        let value = env
            .as_sequence()
            .unwrap()
            .iter()
            .find(|e| get(e, "name").as_str() == Some("IPAM_CLOUD"))
            .map(|e| get(e, "value").as_str().unwrap_or_default().to_string());
        assert_eq!(value.as_deref(), Some(cloud), "{overlay}");
    }
}

// ---- the Helm chart, rendered by the subset renderer ----

fn lookup<'a>(values: &'a Value, path: &str) -> &'a Value {
    let path = path
        .strip_prefix(".Values.")
        .unwrap_or_else(|| panic!("unsupported reference {path}"));
    get(values, path)
}

fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => String::new(),
        other => panic!("not a scalar: {other:?}"),
    }
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => !s.is_empty(),
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::Sequence(s) => !s.is_empty(),
        Value::Mapping(m) => !m.is_empty(),
        Value::Tagged(_) => true,
    }
}

/// One action's output: `.Release.Namespace`, `.Values.x`, `.Values.x |
/// quote`, `toYaml .Values.x | nindent N`, `join "," .Values.x | quote`.
fn action(expr: &str, values: &Value, namespace: &str) -> String {
    let (head, filter) = match expr.split_once('|') {
        Some((h, f)) => (h.trim(), Some(f.trim())),
        None => (expr.trim(), None),
    };
    let text = if head == ".Release.Namespace" {
        namespace.to_string()
    } else if let Some(path) = head.strip_prefix("toYaml ") {
        let yaml = serde_yaml::to_string(lookup(values, path.trim())).expect("toYaml");
        let n: usize = filter
            .and_then(|f| f.strip_prefix("nindent "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("toYaml needs `| nindent N`: {expr}"));
        let pad = " ".repeat(n);
        return yaml
            .trim_end()
            .lines()
            .map(|l| format!("\n{pad}{l}"))
            .collect();
    } else if let Some(rest) = head.strip_prefix("join ") {
        let (separator, path) = rest.trim().split_once(' ').expect("join SEP PATH");
        let separator: String = serde_json::from_str(separator).expect("quoted separator");
        lookup(values, path.trim())
            .as_sequence()
            .map(|items| {
                items
                    .iter()
                    .map(scalar)
                    .collect::<Vec<_>>()
                    .join(&separator)
            })
            .unwrap_or_default()
    } else if head.starts_with(".Values.") {
        scalar(lookup(values, head))
    } else {
        panic!("unsupported template action: {{{{ {expr} }}}}");
    };
    match filter {
        None => text,
        Some("quote") => serde_json::to_string(&text).expect("quote"),
        Some(other) => panic!("unsupported filter {other}"),
    }
}

/// Render a template: text, actions, `if`/`else`/`end` blocks, `{{-`/`-}}`
/// trimming.
fn render(template: &str, values: &Value, namespace: &str) -> String {
    let mut out = String::new();
    // Each level: whether its text is emitted, and its condition (for else).
    let mut emitting = vec![true];
    let mut conditions: Vec<bool> = Vec::new();
    let mut rest = template;
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        let mut text = &rest[..open];
        if trim_next {
            text = text.trim_start();
        }
        let close = rest[open..]
            .find("}}")
            .map(|c| open + c)
            .expect("unclosed action");
        let mut inner = &rest[open + 2..close];
        if let Some(trimmed) = inner.strip_prefix('-') {
            text = text.trim_end();
            inner = trimmed;
        }
        trim_next = inner.ends_with('-');
        let inner = inner.trim_end_matches('-').trim();
        if *emitting.last().unwrap_or(&true) {
            out.push_str(text);
        }
        let on = *emitting.last().unwrap_or(&true);
        if let Some(condition) = inner.strip_prefix("if ") {
            let holds = truthy(lookup(values, condition.trim()));
            conditions.push(holds);
            emitting.push(on && holds);
        } else if inner == "else" {
            let holds = conditions.last_mut().expect("else without if");
            *holds = !*holds;
            emitting.pop();
            let parent = *emitting.last().expect("else without if");
            emitting.push(parent && *holds);
        } else if inner == "end" {
            emitting.pop();
            conditions.pop();
            assert!(!emitting.is_empty(), "unbalanced end");
        } else if on {
            out.push_str(&action(inner, values, namespace));
        }
        rest = &rest[close + 2..];
    }
    assert_eq!(emitting.len(), 1, "unclosed if");
    out.push_str(if trim_next { rest.trim_start() } else { rest });
    out
}

/// Deep-merge `over` into `base` (Helm's -f semantics for maps).
fn merge_values(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Mapping(b), Value::Mapping(o)) => {
            for (k, v) in o {
                merge_values(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o.clone(),
    }
}

fn helm(values_file: Option<&str>) -> Vec<Value> {
    let chart = deploy().join("helm/ipam-operator");
    let mut values: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart.join("values.yaml")).unwrap()).unwrap();
    if let Some(file) = values_file {
        let over: Value = serde_yaml::from_str(
            &std::fs::read_to_string(deploy().join("helm/examples").join(file)).unwrap(),
        )
        .unwrap();
        merge_values(&mut values, &over);
    }
    let mut templates: Vec<PathBuf> = std::fs::read_dir(chart.join("templates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    templates.sort();
    templates
        .iter()
        .flat_map(|path| {
            let text = render(
                &std::fs::read_to_string(path).unwrap(),
                &values,
                "kube-system",
            );
            documents(&text)
        })
        .collect()
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
                items.sort_by_key(|i| scalar(get(i, "name")));
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
            (scalar(get(&o, "kind")), scalar(get(&o, "metadata.name")), o)
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

#[test]
fn the_helm_chart_and_kustomize_give_the_same_objects() {
    assert_same(helm(None), kustomize("base"), "defaults vs base");
    assert_same(helm(Some("aws.yaml")), kustomize("overlays/aws"), "aws");
    let azure: Vec<Value> = kustomize("overlays/azure")
        .into_iter()
        .filter(|o| get(o, "kind").as_str() != Some("Secret"))
        .collect();
    assert_same(
        helm(Some("azure.yaml")),
        azure,
        "azure (less its example Secret)",
    );
    // Options only the chart has render to what they say.
    let mut with_monitor = helm(None);
    assert!(with_monitor
        .iter()
        .all(|o| get(o, "kind").as_str() != Some("ServiceMonitor")));
    let chart = deploy().join("helm/ipam-operator");
    let mut values: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart.join("values.yaml")).unwrap()).unwrap();
    merge_values(
        &mut values,
        &serde_yaml::from_str(
            "serviceMonitor: {enabled: true}\nregisterCRD: true\nprovider: {sha256: abc, oci: 'oci://ghcr.io/a/b@sha256:00'}",
        )
        .unwrap(),
    );
    with_monitor = documents(&render(
        &std::fs::read_to_string(chart.join("templates/servicemonitor.yaml")).unwrap(),
        &values,
        "monitoring",
    ));
    assert_eq!(
        get(&with_monitor[0], "spec.endpoints.0.interval").as_str(),
        Some("30s")
    );
    let deployment = documents(&render(
        &std::fs::read_to_string(chart.join("templates/deployment.yaml")).unwrap(),
        &values,
        "kube-system",
    ));
    let rbac = documents(&render(
        &std::fs::read_to_string(chart.join("templates/rbac.yaml")).unwrap(),
        &values,
        "kube-system",
    ));
    let cluster_role = find(&rbac, "ClusterRole", "ipam-operator");
    assert!(get(cluster_role, "rules")
        .as_sequence()
        .unwrap()
        .iter()
        .any(|r| strings(get(r, "resources")) == ["customresourcedefinitions"]));
    check_objects("chart with every option", &{
        let mut all = helm(None);
        all.retain(|o| !matches!(get(o, "kind").as_str(), Some("ClusterRole")));
        all.extend(
            rbac.into_iter()
                .filter(|o| get(o, "kind").as_str() == Some("ClusterRole")),
        );
        all
    });
    let pod = get(&deployment[0], "spec.template.spec");
    assert!(
        get(pod, "initContainers").is_null(),
        "an OCI module needs no init container"
    );
    let env = get(pod, "containers.0.env");
    assert!(env
        .as_sequence()
        .unwrap()
        .iter()
        .any(|e| get(e, "name").as_str() == Some("IPAM_PROVIDER")
            && get(e, "value").as_str() == Some("oci://ghcr.io/a/b@sha256:00")));
    assert!(env
        .as_sequence()
        .unwrap()
        .iter()
        .any(|e| get(e, "name").as_str() == Some("IPAM_PROVIDER_SHA256")
            && get(e, "value").as_str() == Some("abc")));
}

/// The subset of JSON Schema values.schema.json uses.
fn validate(
    schema: &serde_json::Value,
    value: &serde_json::Value,
    at: &str,
    errors: &mut Vec<String>,
) {
    use serde_json::Value as J;
    if let Some(types) = schema.get("type") {
        let names: Vec<&str> = match types {
            J::String(t) => vec![t.as_str()],
            J::Array(ts) => ts.iter().filter_map(J::as_str).collect(),
            _ => vec![],
        };
        let ok = names.iter().any(|t| match *t {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "boolean" => value.is_boolean(),
            "number" => value.is_number(),
            _ => false,
        });
        if !ok {
            errors.push(format!("{at}: not {names:?}"));
            return;
        }
    }
    if let Some(choices) = schema.get("enum").and_then(J::as_array) {
        if !choices.contains(value) {
            errors.push(format!("{at}: not one of {choices:?}"));
        }
    }
    if let (Some(min), Some(v)) = (schema.get("minimum").and_then(J::as_i64), value.as_i64()) {
        if v < min {
            errors.push(format!("{at}: below {min}"));
        }
    }
    if let (Some(min), Some(v)) = (schema.get("minLength").and_then(J::as_u64), value.as_str()) {
        if (v.len() as u64) < min {
            errors.push(format!("{at}: shorter than {min}"));
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(J::as_object);
        for required in schema
            .get("required")
            .and_then(J::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(key) = required.as_str() {
                if !object.contains_key(key) {
                    errors.push(format!("{at}: {key} is required"));
                }
            }
        }
        for (key, v) in object {
            match properties.and_then(|p| p.get(key)) {
                Some(sub) => validate(sub, v, &format!("{at}.{key}"), errors),
                None if schema.get("additionalProperties") == Some(&J::Bool(false)) => {
                    errors.push(format!("{at}.{key}: not in the schema"))
                }
                None => {
                    if let Some(sub) = schema.get("additionalProperties").filter(|s| s.is_object())
                    {
                        validate(sub, v, &format!("{at}.{key}"), errors);
                    }
                }
            }
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
        for (i, v) in list.iter().enumerate() {
            validate(items, v, &format!("{at}[{i}]"), errors);
        }
    }
}

#[test]
fn values_and_examples_follow_the_schema() {
    let chart = deploy().join("helm/ipam-operator");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chart.join("values.schema.json")).unwrap())
            .expect("values.schema.json is JSON");
    let defaults: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart.join("values.yaml")).unwrap()).unwrap();
    for example in [None, Some("aws.yaml"), Some("azure.yaml")] {
        let mut values = defaults.clone();
        if let Some(file) = example {
            let over: Value = serde_yaml::from_str(
                &std::fs::read_to_string(deploy().join("helm/examples").join(file)).unwrap(),
            )
            .unwrap();
            merge_values(&mut values, &over);
        }
        let json: serde_json::Value = serde_json::to_value(&values).unwrap();
        let mut errors = Vec::new();
        validate(&schema, &json, "values", &mut errors);
        assert!(errors.is_empty(), "{example:?}: {errors:?}");
    }
    // The schema catches a typo.
    let mut typo = serde_json::to_value(&defaults).unwrap();
    typo["provider"]["imge"] = serde_json::json!("x");
    let mut errors = Vec::new();
    validate(&schema, &typo, "values", &mut errors);
    assert_eq!(errors, ["values.provider.imge: not in the schema"]);
}
