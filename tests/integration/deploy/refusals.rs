//! Values the chart refuses at render time, by real helm, each with a
//! message naming the value and what to change: the three it requires
//! (clusterName, never "default"; provider.name; provider.module, pinned by
//! digest), the node agent next to cilium-agent, an agent cloud other than
//! the operator's, the mock provider with a real cloud, the admission
//! policy before Kubernetes 1.30, a PodDisruptionBudget that blocks
//! every drain, and a cluster id above the mesh's size. Each refused case has a rendered twin that passes, so a
//! check refusing everything would fail here too.

use std::ffi::OsStr;
use std::path::Path;

use super::{chart, find, get, helm, helm_template, helm_template_with, refused_values_with};

/// `values` (YAML, over values/base.yaml) written to a file in `dir`.
fn values_file(dir: &Path, name: &str, values: &str) -> std::path::PathBuf {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, values).expect("values written");
    file
}

/// helm refuses `values` with a message holding every one of `says`.
fn refused(dir: &Path, values: &str, more: &[&str], says: &[&str]) {
    let file = values_file(dir, "refused", values);
    let message = refused_values_with(&file, more);
    for part in says {
        assert!(
            message.contains(part),
            "{values:?}: the message does not say {part:?}:\n{message}"
        );
    }
}

/// helm renders `values`.
fn renders(dir: &Path, values: &str, more: &[&str]) -> Vec<serde_yaml::Value> {
    let file = values_file(dir, "renders", values);
    helm_template_with(&[&file], more)
}

#[test]
fn the_chart_without_its_three_required_values_says_which_to_set() {
    let output = helm([OsStr::new("template"), OsStr::new("t"), chart().as_os_str()]);
    assert!(!output.status.success(), "the bare chart renders");
    let message = String::from_utf8_lossy(&output.stderr);
    for part in [
        "clusterName: set it",
        "provider.name: say which provider module",
        "provider.module: set the provider module",
        "oci://REGISTRY/REPO@sha256:HEX",
    ] {
        assert!(message.contains(part), "{part:?} in:\n{message}");
    }
}

#[test]
fn a_shared_cluster_name_or_an_unpinned_module_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dir = dir.path();
    refused(
        dir,
        "clusterName: default\n",
        &[],
        &["clusterName: \"default\"", "delete another's interfaces"],
    );
    refused(dir, "clusterName: ''\n", &[], &["clusterName: set it"]);
    for module in [
        "oci://registry.example/ipam-operator/provider-aws:0.1.0",
        "registry.example/ipam-operator/provider-aws@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "oci://registry.example/ipam-operator/provider-aws@sha256:0123",
        "/modules/provider.wasm",
    ] {
        refused(
            dir,
            &format!("provider: {{module: '{module}'}}\n"),
            &[],
            &["provider.module:", "is not pinned by digest", module],
        );
    }
    refused(
        dir,
        "provider: {name: gcp}\n",
        &[],
        &["provider.name: say which", "aws, azure, mock or custom"],
    );
    // The twin: a cluster name of its own and a pinned module render.
    let objects = renders(dir, "clusterName: east\n", &[]);
    assert!(!find(&objects, "Deployment", "ipam-operator").is_null());
}

#[test]
fn the_mock_provider_with_a_real_cloud_and_a_provider_with_another_cloud_are_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dir = dir.path();
    for cloud in ["aws", "azure"] {
        refused(
            dir,
            &format!("provider: {{name: mock, cloud: {cloud}}}\n"),
            &[],
            &["provider.cloud: the mock provider", cloud],
        );
    }
    refused(
        dir,
        "provider: {name: aws, cloud: azure}\n",
        &[],
        &["provider.cloud: the aws provider talks to aws, not azure"],
    );
    refused(
        dir,
        "provider: {awsCredentials: true, azureCredentials: true}\n",
        &[],
        &["choose one"],
    );
    // The twins: the mock provider with no cloud (generic), and a provider's
    // cloud following its name.
    for (values, cloud) in [
        ("provider: {name: mock}\n", "generic"),
        ("provider: {name: aws}\n", "aws"),
        ("provider: {name: azure}\n", "azure"),
        ("provider: {name: custom, cloud: aws}\n", "aws"),
    ] {
        let objects = renders(dir, values, &[]);
        assert_eq!(super::env(&objects, "IPAM_CLOUD"), Some(cloud), "{values}");
    }
}

#[test]
fn the_node_agent_next_to_cilium_agent_or_on_another_cloud_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dir = dir.path();
    refused(
        dir,
        "agent: {enabled: true}\n",
        &[],
        &[
            "agent.enabled: cilium-agent runs on the nodes",
            "cilium.agent: false",
        ],
    );
    refused(
        dir,
        "cilium: {agent: false}\nprovider: {name: azure}\nagent: {enabled: true, cloud: aws}\n",
        &[],
        &[
            "agent.cloud: aws, but the operator's cloud is azure",
            "set it to azure",
        ],
    );
    refused(
        dir,
        "cilium: {agent: false}\nagent: {enabled: true, cloud: aws}\n",
        &[],
        &[
            "agent.cloud: aws, but the operator's cloud is generic",
            "set it to none",
        ],
    );
    // The twins: the agent's cloud follows the operator's when left empty.
    for (provider, cloud) in [("aws", "aws"), ("azure", "azure"), ("custom", "none")] {
        let objects = renders(
            dir,
            &format!("cilium: {{agent: false}}\nprovider: {{name: {provider}}}\nagent: {{enabled: true}}\n"),
            &[],
        );
        let agent = get(
            find(&objects, "DaemonSet", "ipam-agent"),
            "spec.template.spec.containers.0.env",
        );
        let value = agent
            .as_sequence()
            .into_iter()
            .flatten()
            .find(|e| get(e, "name").as_str() == Some("IPAM_CLOUD"))
            .and_then(|e| get(e, "value").as_str());
        assert_eq!(value, Some(cloud), "{provider}");
    }
}

#[test]
fn the_admission_policy_before_kubernetes_1_30_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dir = dir.path();
    let agent = "cilium: {agent: false}\nagent: {enabled: true}\n";
    refused(
        dir,
        agent,
        &["--kube-version", "1.29.9"],
        &[
            "agent.nodeRestriction.enabled: the admission policy needs Kubernetes 1.30",
            "v1.29.9",
            "agent.nodeRestriction.enabled: false",
        ],
    );
    // The twins: off on 1.29 (and the chart's oldest, 1.27), on with 1.30.
    for version in ["1.29.9", "1.27.0"] {
        let objects = renders(
            dir,
            "cilium: {agent: false}\nagent: {enabled: true, nodeRestriction: {enabled: false}}\n",
            &["--kube-version", version],
        );
        assert!(!find(&objects, "DaemonSet", "ipam-agent").is_null());
    }
    let objects = renders(dir, agent, &["--kube-version", "1.30.0"]);
    assert!(!find(
        &objects,
        "ValidatingAdmissionPolicy",
        "ipam-agent-node-restriction"
    )
    .is_null());
    // Older than the chart's kubeVersion: refused by helm itself.
    refused(dir, "{}\n", &["--kube-version", "1.26.5"], &["kubeVersion"]);
}

#[test]
fn a_disruption_budget_that_blocks_every_drain_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dir = dir.path();
    for (values, says) in [
        (
            "podDisruptionBudget: {minAvailable: 2}\n",
            "minAvailable: 2 of 2 replicas",
        ),
        (
            "replicaCount: 3\npodDisruptionBudget: {minAvailable: 5}\n",
            "minAvailable: 5 of 3 replicas",
        ),
        (
            "podDisruptionBudget: {minAvailable: 100%}\n",
            "100% blocks every drain",
        ),
        (
            "podDisruptionBudget: {minAvailable: '', maxUnavailable: 0}\n",
            "maxUnavailable: 0 blocks every drain",
        ),
        (
            "podDisruptionBudget: {minAvailable: '', maxUnavailable: 0%}\n",
            "maxUnavailable: 0 blocks every drain",
        ),
        (
            "podDisruptionBudget: {minAvailable: 1, maxUnavailable: 1}\n",
            "not both",
        ),
    ] {
        refused(dir, values, &[], &["podDisruptionBudget", says]);
    }
    // The twins.
    for (values, field, value) in [
        (
            "replicaCount: 3\npodDisruptionBudget: {minAvailable: 2}\n",
            "minAvailable",
            "2",
        ),
        (
            "podDisruptionBudget: {minAvailable: 50%}\n",
            "minAvailable",
            "50%",
        ),
        (
            "podDisruptionBudget: {minAvailable: '', maxUnavailable: 1}\n",
            "maxUnavailable",
            "1",
        ),
    ] {
        let objects = renders(dir, values, &[]);
        let pdb = find(&objects, "PodDisruptionBudget", "ipam-operator");
        let rendered = get(pdb, &format!("spec.{field}"));
        let rendered = rendered
            .as_str()
            .map(str::to_string)
            .or_else(|| rendered.as_u64().map(|n| n.to_string()));
        assert_eq!(rendered.as_deref(), Some(value), "{values}");
    }
    let objects = renders(
        dir,
        "replicaCount: 1\npodDisruptionBudget: {enabled: false}\n",
        &[],
    );
    assert!(objects
        .iter()
        .all(|o| get(o, "kind").as_str() != Some("PodDisruptionBudget")));
    // The defaults (base.yaml) render the budget of 1 of 2.
    let objects = helm_template(&[]);
    assert_eq!(
        get(
            find(&objects, "PodDisruptionBudget", "ipam-operator"),
            "spec.minAvailable"
        )
        .as_u64(),
        Some(1)
    );
}

#[test]
fn a_cluster_id_above_the_mesh_size_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dir = dir.path();
    let kvstore = |id: u32, max: u32| {
        format!(
            "kvstore: {{endpoints: [\"https://etcd:2379\"], clusterId: {id}, maxConnectedClusters: {max}}}\n"
        )
    };
    refused(
        dir,
        &kvstore(300, 255),
        &[],
        &[
            "kvstore.clusterId 300",
            "kvstore.maxConnectedClusters to 511",
        ],
    );
    let objects = renders(dir, &kvstore(300, 511), &[]);
    let operator = find(&objects, "Deployment", "ipam-operator");
    let env = get(operator, "spec.template.spec.containers.0.env");
    let value_of = |name: &str| {
        env.as_sequence()
            .into_iter()
            .flatten()
            .find(|e| get(e, "name").as_str() == Some(name))
            .and_then(|e| get(e, "value").as_str().map(str::to_string))
    };
    assert_eq!(value_of("IPAM_CLUSTER_ID").as_deref(), Some("300"));
    assert_eq!(
        value_of("IPAM_MAX_CONNECTED_CLUSTERS").as_deref(),
        Some("511")
    );
}
