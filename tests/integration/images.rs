//! The container images `cargo xtask images` builds (OCI layouts in
//! `IPAM_IMAGES_DIR`, which `cargo xtask test` sets after building them).
//! Containers cannot be started on the test machines, so each image's root
//! filesystem is unpacked from its layers, given the devices a runtime makes
//! (/dev/null, zero, random, urandom), and its entrypoint run there under
//! `chroot` as the image's user (root is needed for chroot: the tests fail
//! without it): the operator's `simulate` to completion as 65532, the
//! agent's `--version` and `install-cni` into a directory of the root
//! filesystem. The image configs name their user, entrypoint and labels;
//! the layers hold exactly the files listed here (so no shell), owned by
//! root, stamped with one time, in path order. Each image is pushed to a
//! registry (Debian's docker-registry with TLS and htpasswd) with its login
//! and read back by the digest the build made; without the login it is
//! refused.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use ipam_tests::registry::RegistryServer;
use serde_json::Value;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const LABELS: [&str; 5] = ["source", "version", "revision", "title", "licenses"];
/// Names of shells and of the multi-call binaries that carry one.
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "ash", "zsh", "ksh", "busybox", "toybox",
];

/// The OCI layout of `name`, in IPAM_IMAGES_DIR; fails saying how to build
/// it when missing.
fn layout(name: &str) -> PathBuf {
    let dir = std::env::var_os("IPAM_IMAGES_DIR").unwrap_or_else(|| {
        panic!(
            "IPAM_IMAGES_DIR is not set: build the images with `cargo xtask images` and name \
             target/images/<arch> in IPAM_IMAGES_DIR (`cargo xtask test` does both)"
        )
    });
    let layout = PathBuf::from(dir).join(name);
    assert!(
        layout.join("index.json").is_file(),
        "{}: no OCI layout of {name}; build it with `cargo xtask images`",
        layout.display()
    );
    layout
}

/// chroot, mknod and keeping the layers' owners need root: the tests run as
/// root, and fail saying so.
fn require_root() {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let uid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .expect("an effective uid in /proc/self/status");
    assert_eq!(
        uid, "0",
        "the image tests unpack the images as root (owners, device nodes) and run their \
         entrypoints under chroot, which needs root"
    );
}

/// An image read from its OCI layout.
struct Image {
    name: &'static str,
    config: Value,
    /// The layers' files, in the order they hold them.
    layers: Vec<PathBuf>,
}

fn json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn image(name: &'static str) -> Image {
    let layout = layout(name);
    let blob = |descriptor: &Value| {
        let digest = descriptor["digest"]
            .as_str()
            .expect("a descriptor's digest");
        let (algorithm, hex) = digest.split_once(':').expect("algorithm:hex");
        layout.join("blobs").join(algorithm).join(hex)
    };
    let index = json(&layout.join("index.json"));
    let manifests = index["manifests"]
        .as_array()
        .expect("the index's manifests");
    assert_eq!(manifests.len(), 1, "{name}: one manifest");
    assert_eq!(
        manifests[0]["annotations"]["org.opencontainers.image.ref.name"].as_str(),
        Some(VERSION),
        "{name}: tagged with the version"
    );
    let manifest = json(&blob(&manifests[0]));
    let config = json(&blob(&manifest["config"]));
    let layers = manifest["layers"]
        .as_array()
        .expect("the manifest's layers")
        .iter()
        .map(blob)
        .collect();
    Image {
        name,
        config,
        layers,
    }
}

/// A layer entry as `tar --list --verbose` shows it.
#[derive(Debug)]
struct Entry {
    mode: String,
    owner: String,
    time: String,
    path: String,
}

fn entries(layer: &Path) -> Vec<Entry> {
    let listing = command_output(
        Command::new("tar")
            .env("TZ", "UTC")
            .args([
                "--list",
                "--verbose",
                "--numeric-owner",
                "--full-time",
                "--file",
            ])
            .arg(layer),
        "tar --list",
    );
    String::from_utf8_lossy(&listing.stdout)
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [mode, owner, _size, date, time, path] = fields[..] else {
                panic!(
                    "{}: an entry not in tar's listing form: {line}",
                    layer.display()
                )
            };
            Entry {
                mode: mode.into(),
                owner: owner.into(),
                time: format!("{date} {time}"),
                path: path.trim_end_matches('/').into(),
            }
        })
        .collect()
}

fn command_output(command: &mut Command, what: &str) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what} cannot be run: {e}"));
    assert!(
        output.status.success(),
        "{what}: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The image's root filesystem, unpacked from its layers as root keeps
/// owners and modes.
fn unpack(image: &Image) -> tempfile::TempDir {
    require_root();
    let rootfs = tempfile::Builder::new()
        .prefix(&format!("rootfs-{}-", image.name))
        .tempdir()
        .expect("a temporary directory");
    std::fs::set_permissions(rootfs.path(), std::fs::Permissions::from_mode(0o755))
        .expect("the root's mode");
    // The devices every OCI runtime creates in a container's /dev: the
    // static binaries read /dev/urandom for their random seeds (getrandom
    // finds no libc getrandom to call through dlsym in a static binary).
    let dev = rootfs.path().join("dev");
    std::fs::create_dir(&dev).expect("mkdir dev");
    for (name, minor) in [
        ("null", "3"),
        ("zero", "5"),
        ("random", "8"),
        ("urandom", "9"),
    ] {
        command_output(
            Command::new("mknod")
                .args(["--mode=0666"])
                .arg(dev.join(name))
                .args(["c", "1", minor]),
            "mknod (as root)",
        );
    }
    for layer in &image.layers {
        command_output(
            Command::new("tar")
                .args(["--extract", "--same-owner", "--numeric-owner", "--file"])
                .arg(layer)
                .arg("--directory")
                .arg(rootfs.path()),
            "tar --extract",
        );
    }
    rootfs
}

/// The image's config, labels, and files (path -> mode) checked against
/// what it must hold; the layers' entries root-owned, stamped with one
/// time, in path order.
fn check_image(image: &Image, user: &str, entrypoint: &str, files: &[(&str, &str)]) {
    let name = image.name;
    let config = &image.config["config"];
    assert_eq!(config["User"].as_str(), Some(user), "{name}: user");
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!([entrypoint]),
        "{name}: entrypoint"
    );
    assert!(config["Cmd"].is_null(), "{name}: no default arguments");
    assert_eq!(image.config["os"].as_str(), Some("linux"));
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    assert_eq!(
        image.config["architecture"].as_str(),
        Some(arch),
        "{name}: built for this machine"
    );
    let labels = &config["Labels"];
    for label in LABELS {
        let value = labels[format!("org.opencontainers.image.{label}")].as_str();
        assert!(
            value.is_some_and(|v| !v.is_empty()),
            "{name}: label {label} missing: {labels}"
        );
    }
    assert_eq!(
        labels["org.opencontainers.image.title"].as_str(),
        Some(name)
    );
    assert_eq!(
        labels["org.opencontainers.image.version"].as_str(),
        Some(VERSION)
    );
    assert_eq!(
        labels["org.opencontainers.image.licenses"].as_str(),
        Some("Apache-2.0")
    );
    let created = image.config["created"].as_str().expect("created");

    let entries: Vec<Entry> = image.layers.iter().flat_map(|l| entries(l)).collect();
    let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted, "{name}: the layer's files in path order");
    for entry in &entries {
        assert_eq!(entry.owner, "0/0", "{name}: {} owned by root", entry.path);
        // `created` is RFC 3339 (1970-01-01T00:00:00Z); tar shows the
        // same instant as `1970-01-01 00:00:00` in UTC.
        assert_eq!(
            entry.time.replace(' ', "T") + "Z",
            created,
            "{name}: {} stamped with the image's time",
            entry.path
        );
        let file_name = entry.path.rsplit('/').next().unwrap_or_default();
        assert!(
            !SHELLS.contains(&file_name),
            "{name}: a shell at {}",
            entry.path
        );
    }
    let regular: BTreeMap<&str, &str> = entries
        .iter()
        .filter(|e| e.mode.starts_with('-'))
        .map(|e| (e.path.as_str(), e.mode.as_str()))
        .collect();
    let expected: BTreeMap<&str, &str> = files.iter().copied().collect();
    assert_eq!(regular, expected, "{name}: exactly these files and modes");
    let others: Vec<&Entry> = entries
        .iter()
        .filter(|e| !e.mode.starts_with('-') && !e.mode.starts_with('d'))
        .collect();
    assert!(
        others.is_empty(),
        "{name}: only files and directories: {others:?}"
    );
}

#[test]
fn the_operator_image_holds_the_operator_a_ca_bundle_and_the_nonroot_user() {
    let image = image("ipam-operator");
    check_image(
        &image,
        "65532:65532",
        "/usr/local/bin/ipam-operator",
        &[
            ("etc/group", "-rw-r--r--"),
            ("etc/passwd", "-rw-r--r--"),
            ("etc/ssl/certs/ca-certificates.crt", "-rw-r--r--"),
            ("usr/local/bin/ipam-operator", "-rwxr-xr-x"),
        ],
    );
    let rootfs = unpack(&image);
    let read = |path: &str| {
        std::fs::read_to_string(rootfs.path().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let bundle = read("etc/ssl/certs/ca-certificates.crt");
    assert!(
        bundle.matches("-----BEGIN CERTIFICATE-----").count() > 50,
        "the CA bundle holds the public roots"
    );
    assert!(read("etc/passwd")
        .lines()
        .any(|l| l.starts_with("nonroot:x:65532:65532:")));
    assert!(read("etc/group").lines().any(|l| l == "nonroot:x:65532:"));
}

#[test]
fn the_operator_image_runs_simulate_as_its_user() {
    require_root();
    let image = image("ipam-operator");
    let rootfs = unpack(&image);
    // As the Deployment mounts them: the provider module (an OCI artifact
    // or an init container's copy in a cluster; here the built mock) in
    // /modules, and an emptyDir (mode 0777) for the compile cache, the
    // root filesystem being read-only.
    let modules = rootfs.path().join("modules");
    let cache = rootfs.path().join("var/cache/ipam-operator");
    std::fs::create_dir_all(&modules).expect("mkdir modules");
    std::fs::create_dir_all(&cache).expect("mkdir cache");
    std::fs::copy(
        ipam_tests::components_dir().join("mock.wasm"),
        modules.join("provider.wasm"),
    )
    .expect("the mock component (cargo xtask providers builds it)");
    std::fs::set_permissions(&modules, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let output = command_output(
        chroot(&image, rootfs.path())
            .env("IPAM_CACHE_DIR", "/var/cache/ipam-operator")
            .args(["simulate", "--module", "/modules/provider.wasm"]),
        "ipam-operator simulate",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("simulating"), "{stdout}");
}

#[test]
fn the_agent_image_holds_the_agent_the_plugin_and_the_datapath() {
    let image = image("ipam-agent");
    check_image(
        &image,
        "0:0",
        "/usr/local/bin/ipam-agent",
        &[
            ("usr/local/bin/ipam-agent", "-rwxr-xr-x"),
            ("usr/local/bin/ipam-cni", "-rwxr-xr-x"),
            ("usr/local/lib/ipam-agent/agent-ebpf.o", "-rw-r--r--"),
        ],
    );
    let rootfs = unpack(&image);
    let object = std::fs::read(rootfs.path().join("usr/local/lib/ipam-agent/agent-ebpf.o"))
        .expect("the eBPF object");
    // ELF, 64-bit, little-endian, e_machine EM_BPF (247).
    assert_eq!(&object[..6], b"\x7fELF\x02\x01");
    assert_eq!(
        u16::from_le_bytes([object[18], object[19]]),
        247,
        "an eBPF object"
    );
}

#[test]
fn the_agent_image_prints_its_version_and_installs_the_cni_plugin() {
    require_root();
    let image = image("ipam-agent");
    let rootfs = unpack(&image);
    let version = run_entrypoint(&image, rootfs.path(), &["--version"]);
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("ipam-agent {VERSION}")
    );

    // The conflist the kustomize component installs, where the DaemonSet
    // mounts its ConfigMap.
    let conf_dir = rootfs.path().join("etc/ipam-agent/cni");
    std::fs::create_dir_all(&conf_dir).expect("mkdir");
    std::fs::write(conf_dir.join("05-ipam.conflist"), kustomize_conflist()).expect("conflist");
    std::fs::write(conf_dir.join("bad.conflist"), r#"{"cniVersion": "1.0.0"}"#).expect("conflist");
    let install = |conflist: &str| {
        let mut command = chroot(&image, rootfs.path());
        command.args([
            "install-cni",
            "--conflist",
            conflist,
            "--cni-bin-dir",
            "/host/opt/cni/bin",
            "--cni-conf-dir",
            "/host/etc/cni/net.d",
        ]);
        command.output().expect("chroot runs")
    };
    let host = rootfs.path().join("host");

    let refused = install("/etc/ipam-agent/cni/bad.conflist");
    assert!(
        !refused.status.success(),
        "a conflist without a name is installed"
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("`name`"), "{stderr}");
    assert!(!host.exists(), "a refused install wrote something");

    let installed = install("/etc/ipam-agent/cni/05-ipam.conflist");
    assert!(
        installed.status.success(),
        "install-cni: {}",
        String::from_utf8_lossy(&installed.stderr)
    );
    let plugin = host.join("opt/cni/bin/ipam-cni");
    let conflist = host.join("etc/cni/net.d/05-ipam.conflist");
    for (path, mode) in [(&plugin, 0o755), (&conflist, 0o644)] {
        let meta = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            meta.permissions().mode() & 0o7777,
            mode,
            "{}",
            path.display()
        );
        assert_eq!((meta.uid(), meta.gid()), (0, 0));
    }
    let listing = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        listing(&host.join("opt/cni/bin")),
        ["ipam-cni"],
        "no temporary left"
    );
    assert_eq!(listing(&host.join("etc/cni/net.d")), ["05-ipam.conflist"]);
    assert_eq!(
        std::fs::read(&plugin).expect("installed plugin"),
        std::fs::read(rootfs.path().join("usr/local/bin/ipam-cni")).expect("image's plugin")
    );
    assert_eq!(
        std::fs::read_to_string(&conflist).expect("installed conflist"),
        kustomize_conflist()
    );

    // The installed copy runs on the host as it is (static): the VERSION call.
    let mut child = Command::new(&plugin)
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the installed plugin runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(br#"{"cniVersion": "1.0.0"}"#)
        .expect("writing the plugin's stdin");
    let output = child.wait_with_output().expect("the plugin's answer");
    assert!(output.status.success(), "{output:?}");
    let answer: Value = serde_json::from_slice(&output.stdout).expect("a JSON answer");
    assert!(
        answer["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v == "1.0.0")),
        "{answer}"
    );
}

/// `chroot --userspec=USER ROOTFS ENTRYPOINT`, as a runtime would start the
/// image (its config's user and entrypoint).
fn chroot(image: &Image, rootfs: &Path) -> Command {
    let config = &image.config["config"];
    let user = config["User"].as_str().expect("the image's user");
    let mut command = Command::new("chroot");
    // An environment of nothing but a PATH to find chroot by (the image has
    // nothing it could find).
    command
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .arg(format!("--userspec={user}"))
        .arg(rootfs);
    for part in config["Entrypoint"].as_array().expect("the entrypoint") {
        command.arg(part.as_str().expect("an entrypoint word"));
    }
    command
}

fn run_entrypoint(image: &Image, rootfs: &Path, args: &[&str]) -> Output {
    command_output(
        chroot(image, rootfs).args(args),
        &format!("{} {}", image.name, args.join(" ")),
    )
}

/// The conflist of deploy/kustomize/components/agent's ConfigMap.
fn kustomize_conflist() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kustomize/components/agent/cni-config.yaml");
    let text = std::fs::read_to_string(&path).expect("the agent's ConfigMap");
    let map: serde_yaml::Value = serde_yaml::from_str(&text).expect("YAML");
    map["data"]["05-ipam.conflist"]
        .as_str()
        .expect("the conflist in the ConfigMap")
        .to_string()
}

/// The manifest digest of the OCI layout `layout` (its index's first entry).
fn layout_digest(layout: &Path) -> String {
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(layout.join("index.json")).expect("index.json"),
    )
    .expect("index.json is JSON");
    index["manifests"][0]["digest"]
        .as_str()
        .expect("a manifest digest")
        .to_string()
}

/// `skopeo inspect` of `reference` trusting the registry's CA, with the
/// registry's login when `login` is given; its output.
fn inspect(registry: &RegistryServer, reference: &str, login: bool) -> Output {
    let mut command = Command::new("skopeo");
    command
        .args(["inspect", "--format", "{{.Digest}}", "--cert-dir"])
        .arg(registry.cert_dir());
    if login {
        command.arg("--authfile").arg(registry.docker_config_file());
    } else {
        command.arg("--no-creds");
    }
    command
        .arg(reference)
        .output()
        .expect("skopeo runs (cargo xtask test installs Debian's skopeo)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_image_is_pushed_to_a_registry_with_its_login_and_read_back_by_digest() {
    let registry = RegistryServer::start().await;
    for name in ["ipam-operator", "ipam-agent"] {
        let layout = layout(name);
        let digest = layout_digest(&layout);
        registry
            .push(
                &format!("oci:{}:{VERSION}", layout.display()),
                &format!("images/{name}:{VERSION}"),
            )
            .await
            .unwrap_or_else(|e| panic!("pushing {name}: {e}"));
        let by_digest = format!("docker://{}/images/{name}@{digest}", registry.address());
        let read = inspect(&registry, &by_digest, true);
        assert!(
            read.status.success(),
            "{name} by digest: {}",
            String::from_utf8_lossy(&read.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&read.stdout).trim(),
            digest,
            "{name}: the registry holds the digest the build made"
        );
        let anonymous = inspect(&registry, &by_digest, false);
        assert!(
            !anonymous.status.success(),
            "{name} was read without the registry's login"
        );
    }
}
