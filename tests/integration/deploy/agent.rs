//! The node agent's objects (the chart's `agent.*`, kustomize's
//! components/agent and components/agent-datapath): the DaemonSet holds
//! NET_ADMIN and nothing else, or BPF and NET_ADMIN with the datapath,
//! which also brings the node's bpffs (mounted HostToContainer), the object
//! and bpffs settings, and ipam-cni chained after ptp in the installed
//! conflist, in host/cni/README.md's form; its RBAC only the verbs the
//! agent uses, the init container writes the plugin into the host's CNI
//! plugin directory and the agent is given the conflist and the host's CNI
//! directories to install it into (and remove it and the plugin from at
//! uninstall, knowing its pod from the downward API), helm and kustomize agree,
//! and the node-restriction ValidatingAdmissionPolicy is there when on,
//! absent when off, and admits (by a model of its CEL, tied to the rendered
//! text) only a caller's own node.

use std::collections::BTreeMap;

use serde_yaml::Value;

use super::{
    assert_same, base_values, chart, documents, example, find, get, helm, helm_template,
    kustomize_with, refused_values, stderr, strings, MODULE,
};

const POLICY: &str = "ipam-agent-node-restriction";

/// The datapath's settings a render should carry: the object's path in the
/// image and the node's bpffs.
struct Datapath<'a> {
    object: &'a str,
    bpffs: &'a str,
}

/// The defaults (values.yaml, components/agent-datapath).
const DEFAULT_DATAPATH: Datapath = Datapath {
    object: "/usr/local/lib/ipam-agent/agent-ebpf.o",
    bpffs: "/sys/fs/bpf",
};

fn named<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list.as_sequence()?
        .iter()
        .find(|item| get(item, "name").as_str() == Some(name))
}

fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    get(named(get(container, "env"), name)?, "value").as_str()
}

/// A container's mount paths by volume name.
fn mounts(container: &Value) -> BTreeMap<String, String> {
    get(container, "volumeMounts")
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            Some((
                get(m, "name").as_str()?.to_string(),
                get(m, "mountPath").as_str()?.to_string(),
            ))
        })
        .collect()
}

fn objects_of<'a>(objects: &'a [Value], name: &str) -> Vec<&'a Value> {
    objects
        .iter()
        .filter(|o| get(o, "metadata.name").as_str() == Some(name))
        .collect()
}

fn check_locked_down(what: &str, container: &Value, added: &[&str]) {
    let sc = get(container, "securityContext");
    assert_eq!(get(sc, "privileged").as_bool(), Some(false), "{what}");
    assert_eq!(
        get(sc, "allowPrivilegeEscalation").as_bool(),
        Some(false),
        "{what}"
    );
    assert_eq!(
        get(sc, "readOnlyRootFilesystem").as_bool(),
        Some(true),
        "{what}"
    );
    assert_eq!(strings(get(sc, "capabilities.drop")), ["ALL"], "{what}");
    assert_eq!(strings(get(sc, "capabilities.add")), added, "{what}");
}

/// Everything the agent's objects must be, from either renderer, with the
/// datapath or without.
fn check_agent(what: &str, objects: &[Value], datapath: Option<&Datapath>) {
    assert!(
        !find(objects, "ServiceAccount", "ipam-agent").is_null(),
        "{what}"
    );
    check_agent_rbac(what, objects);
    let daemonset = find(objects, "DaemonSet", "ipam-agent");
    let pod = get(daemonset, "spec.template.spec");
    assert_eq!(get(pod, "serviceAccountName").as_str(), Some("ipam-agent"));
    assert_eq!(get(pod, "hostNetwork").as_bool(), Some(true), "{what}");
    assert_eq!(
        get(pod, "dnsPolicy").as_str(),
        Some("ClusterFirstWithHostNet"),
        "{what}"
    );
    assert_eq!(
        get(pod, "priorityClassName").as_str(),
        Some("system-node-critical")
    );
    for shared in ["hostPID", "hostIPC"] {
        assert!(get(pod, shared).is_null(), "{what}: {shared}");
    }
    // Linux nodes only, the agent and the operator beside it: the agent's
    // routes, nftables and bpffs are Linux's, and so are the images.
    let operator = get(
        find(objects, "Deployment", "ipam-operator"),
        "spec.template.spec",
    );
    for (who, spec) in [("agent", pod), ("operator", operator)] {
        assert_eq!(
            get(spec, "nodeSelector")
                .get("kubernetes.io/os")
                .and_then(Value::as_str),
            Some("linux"),
            "{what}: the {who}'s nodeSelector"
        );
    }
    assert!(
        get(pod, "tolerations")
            .as_sequence()
            .into_iter()
            .flatten()
            .any(|t| get(t, "operator").as_str() == Some("Exists") && get(t, "key").is_null()),
        "{what}: the agent must tolerate every taint to run on every node"
    );

    let agent = get(pod, "containers.0");
    assert_eq!(
        get(pod, "containers.1"),
        &Value::Null,
        "{what}: one container"
    );
    // host/agent/tests/process/capabilities.rs runs the datapath with
    // exactly these, and shows it cannot load without any one of them.
    let capabilities: &[&str] = match datapath {
        Some(_) => &["BPF", "NET_ADMIN"],
        None => &["NET_ADMIN"],
    };
    check_locked_down(&format!("{what}: agent"), agent, capabilities);
    assert_eq!(
        get(agent, "securityContext.runAsUser").as_u64(),
        Some(0),
        "{what}: capabilities are only effective for root without ambient capabilities"
    );
    for (variable, field) in [
        ("NODE_NAME", "spec.nodeName"),
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        assert_eq!(
            get(
                named(get(agent, "env"), variable).expect(variable),
                "valueFrom.fieldRef.fieldPath"
            )
            .as_str(),
            Some(field),
            "{what}: {variable}"
        );
    }
    let port = get(
        named(get(agent, "ports"), "metrics").expect("a metrics port"),
        "containerPort",
    )
    .as_u64()
    .expect("a port number");
    assert_eq!(
        env_value(agent, "IPAM_AGENT_LISTEN"),
        Some(format!("0.0.0.0:{port}").as_str()),
        "{what}"
    );
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(
            get(agent, &format!("{probe}.httpGet.path")).as_str(),
            Some(path)
        );
        assert_eq!(
            get(agent, &format!("{probe}.httpGet.port")).as_str(),
            Some("metrics"),
            "{what}: {probe}"
        );
    }

    // Host paths: the state and socket directories (and with the datapath,
    // the node's bpffs, which must be there already) and the CNI
    // directories, nothing else.
    let host_paths: BTreeMap<String, (String, String)> = get(pod, "volumes")
        .as_sequence()
        .into_iter()
        .flatten()
        .filter(|v| !get(v, "hostPath").is_null())
        .map(|v| {
            let text = |path| get(v, path).as_str().unwrap_or_default().to_string();
            (text("name"), (text("hostPath.path"), text("hostPath.type")))
        })
        .collect();
    let mut expected: BTreeMap<String, (String, String)> = [
        ("state", "/run/ipam-agent/state"),
        ("socket-dir", "/run/ipam-agent"),
        ("cni-bin", "/opt/cni/bin"),
        ("cni-conf", "/etc/cni/net.d"),
    ]
    .into_iter()
    .map(|(name, path)| (name.into(), (path.into(), "DirectoryOrCreate".into())))
    .collect();
    if let Some(datapath) = datapath {
        expected.insert("bpffs".into(), (datapath.bpffs.into(), "Directory".into()));
    }
    assert_eq!(host_paths, expected, "{what}: hostPath volumes");
    let agent_mounts = mounts(agent);
    let mounted: &[&str] = match datapath {
        Some(_) => &[
            "bpffs",
            "cni-bin",
            "cni-conf",
            "cni-config",
            "socket-dir",
            "state",
        ],
        None => &["cni-bin", "cni-conf", "cni-config", "socket-dir", "state"],
    };
    assert_eq!(
        agent_mounts.keys().collect::<Vec<_>>(),
        mounted,
        "{what}: the agent mounts its state and socket directories, the CNI ones (and bpffs) only"
    );
    check_datapath(what, agent, datapath);
    assert_eq!(
        env_value(agent, "IPAM_AGENT_STATE_DIR"),
        Some(agent_mounts["state"].as_str())
    );
    let socket = env_value(agent, "IPAM_AGENT_SOCKET").expect("IPAM_AGENT_SOCKET");
    assert_eq!(
        socket,
        format!("{}/agent.sock", agent_mounts["socket-dir"]),
        "{what}: the socket is in the host's socket directory"
    );
    check_cni_install(what, objects, pod, socket, datapath.is_some());
}

/// The datapath's part of the agent container: the node's bpffs mounted at
/// its own path with the host's later mounts propagated in (pins must live
/// in the node's bpffs to outlive the container; no other mount
/// propagates), and the object and bpffs settings; none of it without the
/// datapath.
fn check_datapath(what: &str, agent: &Value, datapath: Option<&Datapath>) {
    let propagated: Vec<(&str, &str)> = get(agent, "volumeMounts")
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            Some((
                get(m, "name").as_str()?,
                get(m, "mountPropagation").as_str()?,
            ))
        })
        .collect();
    let object = env_value(agent, "IPAM_AGENT_DATAPATH_OBJECT");
    let bpffs = env_value(agent, "IPAM_AGENT_BPFFS");
    let Some(datapath) = datapath else {
        assert_eq!(propagated, [], "{what}: mount propagation");
        assert_eq!((object, bpffs), (None, None), "{what}: datapath settings");
        return;
    };
    assert_eq!(
        propagated,
        [("bpffs", "HostToContainer")],
        "{what}: mount propagation"
    );
    assert_eq!(
        mounts(agent).get("bpffs").map(String::as_str),
        Some(datapath.bpffs),
        "{what}: bpffs is mounted where the host has it"
    );
    assert_eq!(object, Some(datapath.object), "{what}");
    assert_eq!(bpffs, Some(datapath.bpffs), "{what}: the agent's --bpffs");
    assert!(
        get(agent, "args").is_null()
            && strings(get(agent, "command")) == ["/usr/local/bin/ipam-agent"],
        "{what}: settings come from the environment alone"
    );
}

/// The conflist of host/cni/README.md's datapath section (the form the
/// agent's process tests run): ptp with ipam-cni as its IPAM, then ipam-cni
/// chained as the datapath step, both with the default socket.
fn readme_chained_plugins() -> serde_json::Value {
    let readme = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/cni/README.md");
    let text =
        std::fs::read_to_string(&readme).unwrap_or_else(|e| panic!("{}: {e}", readme.display()));
    let section = text
        .split_once("## The datapath step")
        .map(|(_, rest)| rest)
        .expect("host/cni/README.md has its datapath section");
    let block = section
        .split_once("```json\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block)
        .expect("a JSON block in the datapath section");
    let conflist: serde_json::Value =
        serde_json::from_str(block).expect("the README's conflist is JSON");
    conflist["plugins"].clone()
}

/// The conflist the agent's CNI ConfigMap carries.
fn installed_conflist(objects: &[Value]) -> serde_json::Value {
    serde_json::from_str(
        get(find(objects, "ConfigMap", "ipam-agent-cni"), "data")
            .get("05-ipam.conflist")
            .and_then(Value::as_str)
            .expect("the conflist"),
    )
    .expect("the conflist is JSON")
}

/// The init container is `ipam-agent install-cni` (no shell in the image),
/// writing the plugin from the image into the host's CNI bin directory
/// (beside its target, renamed over it); the agent is given the
/// ConfigMap's conflist to install into the host's conf directory once it
/// serves (no take-over by default) and the bin directory to remove the
/// plugin from at uninstall; the configuration names ipam-cni with the
/// agent's socket.
fn check_cni_install(what: &str, objects: &[Value], pod: &Value, socket: &str, datapath: bool) {
    let init = get(pod, "initContainers.0");
    assert_eq!(get(init, "name").as_str(), Some("install-cni"), "{what}");
    assert_eq!(get(pod, "initContainers.1"), &Value::Null, "{what}");
    check_locked_down(&format!("{what}: install-cni"), init, &[]);
    assert_eq!(
        get(init, "image"),
        get(pod, "containers.0.image"),
        "{what}: the agent's image"
    );
    let init_mounts = mounts(init);
    assert_eq!(
        strings(get(init, "command")),
        ["/usr/local/bin/ipam-agent"],
        "{what}"
    );
    let args = strings(get(init, "args"));
    let (subcommand, flags) = args.split_first().expect("install-cni's arguments");
    assert_eq!(subcommand, "install-cni", "{what}");
    let flags: BTreeMap<&str, &str> = flags
        .chunks(2)
        .map(|pair| match pair {
            [flag, value] => (flag.as_str(), value.as_str()),
            _ => panic!("{what}: a flag without a value in {args:?}"),
        })
        .collect();
    let config = find(objects, "ConfigMap", "ipam-agent-cni");
    assert_eq!(
        get(
            named(get(pod, "volumes"), "cni-config").expect("the cni-config volume"),
            "configMap.name"
        )
        .as_str(),
        Some("ipam-agent-cni")
    );
    let conf_names: Vec<&str> = get(config, "data")
        .as_mapping()
        .expect("data")
        .keys()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(conf_names, ["05-ipam.conflist"], "{what}");
    assert_eq!(
        init_mounts.keys().collect::<Vec<_>>(),
        ["cni-bin"],
        "{what}: install-cni writes the plugin alone"
    );
    assert_eq!(
        flags,
        BTreeMap::from([
            ("--plugin", "/usr/local/bin/ipam-cni"),
            ("--cni-bin-dir", init_mounts["cni-bin"].as_str()),
        ]),
        "{what}: install-cni's flags"
    );
    let agent = get(pod, "containers.0");
    let agent_mounts = mounts(agent);
    let conf_source = format!("{}/05-ipam.conflist", agent_mounts["cni-config"]);
    for (variable, value) in [
        ("IPAM_CNI_CONFLIST", conf_source.as_str()),
        ("IPAM_CNI_CONF_DIR", agent_mounts["cni-conf"].as_str()),
        ("IPAM_CNI_BIN_DIR", agent_mounts["cni-bin"].as_str()),
        ("IPAM_CNI_TAKE_OVER", "false"),
    ] {
        assert_eq!(
            env_value(agent, variable),
            Some(value),
            "{what}: {variable}"
        );
    }
    assert_eq!(
        agent_mounts["cni-bin"], init_mounts["cni-bin"],
        "{what}: the plugin is removed from where it was installed"
    );
    let conflist = installed_conflist(objects);
    assert_eq!(conflist["cniVersion"], "1.0.0");
    assert_eq!(conflist["plugins"][0]["type"], "ptp", "{what}");
    assert_eq!(conflist["plugins"][0]["ipam"]["type"], "ipam-cni");
    assert_eq!(conflist["plugins"][0]["ipam"]["socket"], socket, "{what}");
    let plugins = conflist["plugins"].as_array().expect("plugins");
    if datapath {
        // The datapath step: no `ipam` key (that is how ipam-cni tells its
        // roles apart), the agent's socket at the top level.
        assert_eq!(plugins.len(), 2, "{what}: {conflist}");
        assert_eq!(
            plugins[1],
            serde_json::json!({"type": "ipam-cni", "socket": socket}),
            "{what}: the chained datapath step"
        );
    } else {
        assert_eq!(plugins.len(), 1, "{what}: ptp alone: {conflist}");
    }
}

/// The agent's ClusterRole grants exactly what it uses: no delete, no
/// secrets, nothing namespaced.
fn check_agent_rbac(what: &str, objects: &[Value]) {
    let role = find(objects, "ClusterRole", "ipam-agent");
    let mut granted: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for rule in get(role, "rules").as_sequence().expect("rules") {
        for group in strings(get(rule, "apiGroups")) {
            for resource in strings(get(rule, "resources")) {
                granted
                    .entry((group.clone(), resource))
                    .or_default()
                    .extend(strings(get(rule, "verbs")));
            }
        }
        assert!(get(rule, "resourceNames").is_null() && get(rule, "nonResourceURLs").is_null());
    }
    let expected: BTreeMap<(String, String), Vec<String>> = [
        (
            "cilium.io",
            "ciliumnodes",
            &["get", "list", "watch", "create", "update", "patch"][..],
        ),
        ("cilium.io", "ciliumnodes/status", &["update", "patch"]),
        ("", "nodes", &["get", "list", "watch"]),
        ("", "pods", &["get", "list", "watch"]),
        ("apps", "daemonsets", &["get"]),
    ]
    .into_iter()
    .map(|(group, resource, verbs)| {
        (
            (group.to_string(), resource.to_string()),
            verbs.iter().map(|v| v.to_string()).collect(),
        )
    })
    .collect();
    assert_eq!(granted, expected, "{what}: the agent's ClusterRole");
    let binding = find(objects, "ClusterRoleBinding", "ipam-agent");
    assert_eq!(get(binding, "roleRef.name").as_str(), Some("ipam-agent"));
    assert_eq!(get(binding, "subjects.0.name").as_str(), Some("ipam-agent"));
    assert_eq!(
        get(binding, "subjects.0.namespace").as_str(),
        Some("kube-system")
    );
    assert!(
        objects
            .iter()
            .filter(|o| matches!(get(o, "kind").as_str(), Some("Role" | "RoleBinding")))
            .all(|o| !get(o, "metadata.name")
                .as_str()
                .unwrap_or_default()
                .contains("agent")),
        "{what}: the agent has no namespaced role"
    );
}

#[test]
fn the_agent_is_least_privilege_and_helm_and_kustomize_agree() {
    let helm = helm_template(&[&example("agent.yaml")]);
    check_agent("helm agent.yaml", &helm, None);
    let kustomize = kustomize_with("overlays/agent", &[("IPAM_PROVIDER", MODULE)]);
    check_agent("overlays/agent", &kustomize, None);
    assert_same(helm, kustomize, "agent");
    let helm = helm_template(&[&example("agent-datapath.yaml")]);
    check_agent("helm agent-datapath.yaml", &helm, Some(&DEFAULT_DATAPATH));
    let kustomize = kustomize_with("overlays/agent-datapath", &[("IPAM_PROVIDER", MODULE)]);
    check_agent(
        "overlays/agent-datapath",
        &kustomize,
        Some(&DEFAULT_DATAPATH),
    );
    // The conflist installed is the one host/cni/README.md documents.
    assert_eq!(
        installed_conflist(&helm)["plugins"],
        readme_chained_plugins()
    );
    assert_same(helm, kustomize, "agent with the datapath");
    // Off by default: cilium-agent does this job where it runs.
    assert!(
        helm_template(&[]).iter().all(|o| !get(o, "metadata.name")
            .as_str()
            .unwrap_or_default()
            .starts_with("ipam-agent")),
        "agent objects with the default values"
    );
}

#[test]
fn the_agent_passes_its_settings_and_the_schema_refuses_malformed_ones() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let values = dir.path().join("agent.yaml");
    std::fs::write(
        &values,
        "cilium: {agent: false}\nprovider: {name: aws}\n\
         agent:\n  enabled: true\n  image: {repository: agent, tag: \"1\"}\n  cloud: aws\n  eni:\n    \
         firstInterfaceIndex: 1\n    subnetIds: [subnet-1, subnet-2]\n    \
         subnetTags: {b: \"2\", a: \"1\"}\n    securityGroupTags: {team: net}\n  \
         ipam: {preAllocate: 0, maxAboveWatermark: 8}\n  routing: false\n  \
         socketDir: /run/elsewhere\n  listenPort: 9000\n",
    )
    .expect("values written");
    let objects = helm_template(&[&values]);
    let pod = get(
        find(&objects, "DaemonSet", "ipam-agent"),
        "spec.template.spec",
    );
    let agent = get(pod, "containers.0");
    for (name, value) in [
        ("IPAM_CLOUD", Some("aws")),
        ("IPAM_ENI_FIRST_INTERFACE_INDEX", Some("1")),
        ("IPAM_ENI_SUBNET_IDS", Some("subnet-1,subnet-2")),
        ("IPAM_ENI_SUBNET_TAGS", Some("a=1,b=2")),
        ("IPAM_ENI_SECURITY_GROUP_IDS", None),
        ("IPAM_ENI_SECURITY_GROUP_TAGS", Some("team=net")),
        // 0 is a value, not "unset".
        ("IPAM_PRE_ALLOCATE", Some("0")),
        ("IPAM_MIN_ALLOCATE", None),
        ("IPAM_MAX_ALLOCATE", None),
        ("IPAM_MAX_ABOVE_WATERMARK", Some("8")),
        ("IPAM_AGENT_ROUTING", Some("false")),
        ("IPAM_AGENT_SOCKET", Some("/run/elsewhere/agent.sock")),
        ("IPAM_AGENT_LISTEN", Some("0.0.0.0:9000")),
        // Unset: the agent's default by cloud (on with aws and azure).
        ("IPAM_AGENT_SNAT", None),
        ("IPAM_AGENT_SNAT_EXCLUDE_CIDRS", None),
    ] {
        assert_eq!(env_value(agent, name), value, "{name}");
    }
    for container in [agent, get(pod, "initContainers.0")] {
        assert_eq!(get(container, "image").as_str(), Some("agent:1"));
    }
    let conflist = get(find(&objects, "ConfigMap", "ipam-agent-cni"), "data")
        .get("05-ipam.conflist")
        .and_then(Value::as_str)
        .expect("the conflist");
    assert!(
        conflist.contains("\"/run/elsewhere/agent.sock\""),
        "{conflist}"
    );

    // Without the CNI install: no init container, no CNI host paths.
    let no_cni = dir.path().join("no-cni.yaml");
    std::fs::write(
        &no_cni,
        "cilium: {agent: false}\nagent: {enabled: true, cni: {install: false}}\n",
    )
    .expect("values written");
    let objects = helm_template(&[&no_cni]);
    let pod = get(
        find(&objects, "DaemonSet", "ipam-agent"),
        "spec.template.spec",
    );
    assert!(get(pod, "initContainers").is_null());
    assert!(named(get(pod, "volumes"), "cni-bin").is_none());
    assert!(objects_of(&objects, "ipam-agent-cni").is_empty());
    let agent = get(pod, "containers.0");
    for variable in ["IPAM_CNI_CONFLIST", "IPAM_CNI_CONF_DIR", "IPAM_CNI_BIN_DIR"] {
        assert_eq!(
            env_value(agent, variable),
            None,
            "no CNI install: {variable}"
        );
    }
    assert!(mounts(agent).keys().all(|m| !m.starts_with("cni")));

    // The datapath's settings, with a socket elsewhere.
    let datapath = dir.path().join("datapath.yaml");
    std::fs::write(
        &datapath,
        "cilium: {agent: false}\nagent:\n  enabled: true\n  socketDir: /run/elsewhere\n  datapath:\n    \
         enabled: true\n    object: /opt/agent/datapath.o\n    bpffs: /run/bpf\n",
    )
    .expect("values written");
    let objects = helm_template(&[&datapath]);
    check_agent_elsewhere(
        &objects,
        &Datapath {
            object: "/opt/agent/datapath.o",
            bpffs: "/run/bpf",
        },
    );
    // Without the CNI install the datapath is the same in the DaemonSet
    // (the node's own conflist must chain the step).
    let datapath_no_cni = dir.path().join("datapath-no-cni.yaml");
    std::fs::write(
        &datapath_no_cni,
        "cilium: {agent: false}\n\
         agent: {enabled: true, cni: {install: false}, datapath: {enabled: true}}\n",
    )
    .expect("values written");
    let objects = helm_template(&[&datapath_no_cni]);
    assert!(objects_of(&objects, "ipam-agent-cni").is_empty());
    let agent = get(
        find(&objects, "DaemonSet", "ipam-agent"),
        "spec.template.spec.containers.0",
    );
    check_locked_down("datapath, no CNI install", agent, &["BPF", "NET_ADMIN"]);
    check_datapath("datapath, no CNI install", agent, Some(&DEFAULT_DATAPATH));

    for (malformed, field) in [
        ("agent: {datapath: {bpffs: relative}}", "bpffs"),
        ("agent: {datapath: {object: 'agent ebpf.o'}}", "object"),
        ("agent: {datapath: {enable: true}}", "enable"),
        ("agent: {cloud: gcp}", "cloud"),
        (
            "agent: {cni: {confName: 'x;rm -rf /.conflist'}}",
            "confName",
        ),
        ("agent: {ipam: {preAllocate: -1}}", "preAllocate"),
        ("agent: {eni: {subnetTags: {'a,b': c}}}", "'a,b'"),
        ("agent: {stateDir: relative}", "stateDir"),
        ("agent: {snat: {enabled: maybe}}", "enabled"),
        ("agent: {snat: {excludeCidrs: [10.0.0.0]}}", "excludeCidrs"),
        ("agent: {cni: {takeOver: 'yes'}}", "takeOver"),
        (
            "agent: {enabled: true, stateDir: /run/./ipam-agent/}",
            "stateDir",
        ),
    ] {
        let file = dir.path().join("malformed.yaml");
        std::fs::write(&file, format!("cilium: {{agent: false}}\n{malformed}\n"))
            .expect("values written");
        let refused = refused_values(&file);
        assert!(refused.contains(field), "{malformed}: {refused}");
    }
}

/// The datapath with settings of its own and the socket in
/// /run/elsewhere: both conflist steps name that socket, the bpffs is
/// mounted and passed where it was asked.
fn check_agent_elsewhere(objects: &[Value], datapath: &Datapath) {
    let pod = get(
        find(objects, "DaemonSet", "ipam-agent"),
        "spec.template.spec",
    );
    let agent = get(pod, "containers.0");
    check_locked_down("datapath elsewhere", agent, &["BPF", "NET_ADMIN"]);
    check_datapath("datapath elsewhere", agent, Some(datapath));
    assert_eq!(
        get(
            named(get(pod, "volumes"), "bpffs").expect("the bpffs volume"),
            "hostPath"
        ),
        &serde_yaml::from_str::<Value>(&format!("{{path: {}, type: Directory}}", datapath.bpffs))
            .expect("YAML"),
    );
    let socket = "/run/elsewhere/agent.sock";
    assert_eq!(
        installed_conflist(objects)["plugins"],
        serde_json::json!([
            {"type": "ptp", "ipam": {"type": "ipam-cni", "socket": socket}},
            {"type": "ipam-cni", "socket": socket},
        ])
    );
}

// ---- the node-restriction policy ----

/// The policy as rendered, with its CEL read into what the model needs.
struct NodeRestriction {
    groups: Vec<String>,
    resources: Vec<String>,
    operations: Vec<String>,
    /// The one caller the policy is about.
    username: String,
}

/// The CEL the model below implements; a changed expression fails the test
/// until the model is changed with it.
const NODE_NAME_CLAIM: &str =
    "request.userInfo.extra[?'authentication.kubernetes.io/node-name'].orValue([])";
const OWN_NODE_ONLY: &str =
    "size(variables.nodeNameClaim) > 0 && object.metadata.name == variables.nodeNameClaim[0]";

fn node_restriction(objects: &[Value]) -> NodeRestriction {
    let policy = find(objects, "ValidatingAdmissionPolicy", POLICY);
    assert_eq!(
        get(policy, "apiVersion").as_str(),
        Some("admissionregistration.k8s.io/v1")
    );
    assert_eq!(get(policy, "spec.failurePolicy").as_str(), Some("Fail"));
    let binding = find(objects, "ValidatingAdmissionPolicyBinding", POLICY);
    assert_eq!(get(binding, "spec.policyName").as_str(), Some(POLICY));
    assert_eq!(strings(get(binding, "spec.validationActions")), ["Deny"]);
    assert!(
        get(binding, "spec.matchResources").is_null(),
        "the binding narrows nothing"
    );
    for cluster_scoped in [policy, binding] {
        assert!(get(cluster_scoped, "metadata.namespace").is_null());
    }
    let spec = get(policy, "spec");
    assert_eq!(get(spec, "matchConstraints.resourceRules.1"), &Value::Null);
    assert_eq!(get(spec, "matchConditions.1"), &Value::Null);
    assert_eq!(
        get(spec, "variables.0.name").as_str(),
        Some("nodeNameClaim")
    );
    assert_eq!(
        get(spec, "variables.0.expression").as_str(),
        Some(NODE_NAME_CLAIM)
    );
    assert_eq!(get(spec, "variables.1"), &Value::Null);
    assert_eq!(
        get(spec, "validations.0.expression").as_str(),
        Some(OWN_NODE_ONLY)
    );
    assert_eq!(get(spec, "validations.1"), &Value::Null);
    let condition = get(spec, "matchConditions.0.expression")
        .as_str()
        .expect("a match condition");
    let username = condition
        .strip_prefix("request.userInfo.username == '")
        .and_then(|rest| rest.strip_suffix('\''))
        .unwrap_or_else(|| panic!("not a username match: {condition}"));
    let rule = get(spec, "matchConstraints.resourceRules.0");
    assert_eq!(strings(get(rule, "apiVersions")), ["*"]);
    NodeRestriction {
        groups: strings(get(rule, "apiGroups")),
        resources: strings(get(rule, "resources")),
        operations: strings(get(rule, "operations")),
        username: username.to_string(),
    }
}

struct Request<'a> {
    username: &'a str,
    /// `authentication.kubernetes.io/node-name` in the caller's extra.
    node_name_claim: Option<&'a [&'a str]>,
    operation: &'a str,
    group: &'a str,
    /// With the subresource: `ciliumnodes/status`.
    resource: &'a str,
    name: &'a str,
}

#[derive(Debug, PartialEq)]
enum Admission {
    /// The policy does not apply to the request.
    NotMatched,
    Allowed,
    Denied,
}

/// The API server's decision for the policy, its CEL read as written:
/// matchConstraints then matchConditions select the request; the claim
/// defaults to an empty list; the first element must name the object.
fn admit(policy: &NodeRestriction, request: &Request) -> Admission {
    let matched = policy.groups.iter().any(|g| g == request.group)
        && policy.resources.iter().any(|r| r == request.resource)
        && policy.operations.iter().any(|o| o == request.operation)
        && request.username == policy.username;
    if !matched {
        return Admission::NotMatched;
    }
    let claim = request.node_name_claim.unwrap_or(&[]);
    if claim.first() == Some(&request.name) {
        Admission::Allowed
    } else {
        Admission::Denied
    }
}

/// A request on a cilium.io resource.
fn request<'a>(
    username: &'a str,
    node_name_claim: Option<&'a [&'a str]>,
    operation: &'a str,
    resource: &'a str,
    name: &'a str,
) -> Request<'a> {
    Request {
        username,
        node_name_claim,
        operation,
        group: "cilium.io",
        resource,
        name,
    }
}

#[test]
fn the_node_restriction_policy_admits_only_the_agents_own_node() {
    let objects = helm_template(&[&example("agent.yaml")]);
    let policy = node_restriction(&objects);
    let agent = "system:serviceaccount:kube-system:ipam-agent";
    let daemonset = find(&objects, "DaemonSet", "ipam-agent");
    assert_eq!(
        policy.username,
        format!(
            "system:serviceaccount:{}:{}",
            get(daemonset, "metadata.namespace")
                .as_str()
                .expect("a namespace"),
            get(daemonset, "spec.template.spec.serviceAccountName")
                .as_str()
                .expect("a service account")
        ),
        "the policy names the agent's own service account"
    );
    let node_a: &[&str] = &["node-a"];
    use Admission::*;
    let table = [
        (
            request(agent, Some(node_a), "CREATE", "ciliumnodes", "node-a"),
            Allowed,
        ),
        (
            request(agent, Some(node_a), "UPDATE", "ciliumnodes", "node-a"),
            Allowed,
        ),
        (
            request(
                agent,
                Some(node_a),
                "UPDATE",
                "ciliumnodes/status",
                "node-a",
            ),
            Allowed,
        ),
        // A patch is an UPDATE in admission.
        (
            request(agent, Some(node_a), "UPDATE", "ciliumnodes", "node-b"),
            Denied,
        ),
        (
            request(agent, Some(node_a), "CREATE", "ciliumnodes", "node-b"),
            Denied,
        ),
        (
            request(
                agent,
                Some(node_a),
                "UPDATE",
                "ciliumnodes/status",
                "node-b",
            ),
            Denied,
        ),
        // A token without the claim (not bound to a pod, or before 1.30).
        (
            request(agent, None, "UPDATE", "ciliumnodes", "node-a"),
            Denied,
        ),
        (
            request(agent, Some(&[]), "CREATE", "ciliumnodes", "node-a"),
            Denied,
        ),
        // Other callers are RBAC's business alone.
        (
            request(
                "system:serviceaccount:kube-system:ipam-operator",
                None,
                "UPDATE",
                "ciliumnodes",
                "node-b",
            ),
            NotMatched,
        ),
        (
            request(
                "system:serviceaccount:default:ipam-agent",
                Some(node_a),
                "UPDATE",
                "ciliumnodes",
                "node-b",
            ),
            NotMatched,
        ),
        // The agent may not delete at all (RBAC).
        (
            request(agent, Some(node_a), "DELETE", "ciliumnodes", "node-b"),
            NotMatched,
        ),
        (
            request(agent, Some(node_a), "CREATE", "ciliumendpoints", "node-b"),
            NotMatched,
        ),
    ];
    for (request, expected) in &table {
        assert_eq!(
            admit(&policy, request),
            *expected,
            "{} {} {} {} by {} claiming {:?}",
            request.operation,
            request.group,
            request.resource,
            request.name,
            request.username,
            request.node_name_claim
        );
    }
    let pods = Request {
        group: "",
        resource: "pods",
        ..request(agent, Some(node_a), "CREATE", "pods", "x")
    };
    assert_eq!(admit(&policy, &pods), NotMatched);
}

#[test]
fn the_node_restriction_policy_follows_the_release_namespace_and_can_be_turned_off() {
    let output = helm([
        "template",
        "ipam-operator",
        chart().to_str().expect("a UTF-8 path"),
        "--namespace",
        "ipam",
        "--values",
        base_values().to_str().expect("a UTF-8 path"),
        "--set",
        "agent.enabled=true,cilium.agent=false",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let objects = documents(&String::from_utf8_lossy(&output.stdout));
    assert_eq!(
        node_restriction(&objects).username,
        "system:serviceaccount:ipam:ipam-agent"
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let off = dir.path().join("off.yaml");
    std::fs::write(
        &off,
        "cilium: {agent: false}\nagent: {enabled: true, nodeRestriction: {enabled: false}}\n",
    )
    .expect("values written");
    let objects = helm_template(&[&off]);
    assert!(!find(&objects, "DaemonSet", "ipam-agent").is_null());
    assert!(
        objects_of(&objects, POLICY).is_empty(),
        "the policy with nodeRestriction.enabled: false"
    );
}
