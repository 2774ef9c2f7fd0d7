//! `cargo xtask images [--release] [--arch amd64|arm64]`: the container
//! images, built without a daemon by Debian's `buildah`, each `FROM scratch`
//! (nothing is pulled from a registry), into OCI layout directories under
//! `target/images/<arch>/<image>/` (tag: the workspace version):
//!
//! - `ipam-operator`: the operator, statically linked, a CA bundle (Debian's
//!   ca-certificates), `/etc/passwd` and `/etc/group` naming the nonroot user
//!   and group 65532, `USER 65532:65532`; no shell.
//! - `ipam-agent`: the agent and the `ipam-cni` plugin, both static, and the
//!   datapath's eBPF object at `/usr/local/lib/ipam-agent/agent-ebpf.o`; no
//!   shell. The DaemonSet's init container runs `ipam-agent install-cni`.
//!
//! Both carry the OCI labels `org.opencontainers.image.{source,version,
//! revision,title,licenses}` and are reproducible: every file and the image
//! are stamped with SOURCE_DATE_EPOCH (0 when unset), buildah writes the
//! layer's files in path order, no builder label; the same inputs give the
//! same digests, which each build checks by building every image twice. The
//! result is kept in the build cache under a key of its
//! inputs (the host workspace's sources and lockfile, this file, the eBPF
//! object, the CA bundle, the toolchain, buildah's version, the labels), so a
//! run whose inputs did not change copies it and builds nothing.
//!
//! The binaries are linked static by the tests' own build or one of their
//! own (`static_link`: the dependencies are shared with the tests), checked
//! to name no program interpreter (`cni_plugin::check_static`) and
//! stripped. arm64 is a cross build for aarch64-unknown-linux-gnu linked by
//! Debian's gcc-aarch64-linux-gnu.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::setup::{self, Toolchain};
use crate::{build_cache, cni_plugin, component_cache, repo_root, run, static_link};

/// What the images are built from besides the eBPF object and the CA
/// bundle (hashed into the key separately), relative to the repository root.
const INPUTS: &[&str] = &[
    "host",
    "Cargo.toml",
    "Cargo.lock",
    // The operator embeds the mock's default settings.
    "providers/mock/default-settings.yaml",
    "xtask/src/images.rs",
];

/// What the images step runs: buildah, the CA bundle it copies in, strip.
const PACKAGES: &[&str] = &["buildah", "ca-certificates", "binutils"];
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The cross toolchain of `--arch arm64` on another host.
const ARM64_PACKAGES: &[&str] = &["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"];

/// The nonroot user and group of the operator's image (distroless's).
const NONROOT: u32 = 65532;
const LICENSES: &str = env!("CARGO_PKG_LICENSE");
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The `source` label unless IPAM_IMAGE_SOURCE names another.
const DEFAULT_SOURCE: &str = "https://github.com/ipam-operator/ipam-operator";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    /// The architecture xtask runs on (amd64 elsewhere than aarch64).
    pub fn of_host() -> Self {
        match std::env::consts::ARCH {
            "aarch64" => Arch::Arm64,
            _ => Arch::Amd64,
        }
    }

    /// The OCI (GOARCH) name.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    fn triple(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64-unknown-linux-gnu",
            Arch::Arm64 => "aarch64-unknown-linux-gnu",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The release profile (for shipping) instead of dev (for the tests).
    pub release: bool,
    pub arch: Arch,
}

impl Options {
    /// The dev images of the host's architecture, as the tests use them.
    pub fn host_dev() -> Self {
        Options {
            release: false,
            arch: Arch::of_host(),
        }
    }

    /// `[--release] [--arch amd64|arm64]`; the host's architecture by
    /// default.
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut options = Self::host_dev();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let arch = match arg.as_str() {
                "--release" => {
                    options.release = true;
                    continue;
                }
                "--arch" => args.next().map(String::as_str),
                other => match other.strip_prefix("--arch=") {
                    Some(arch) => Some(arch),
                    None => return Err(format!("images: unknown argument {other:?}")),
                },
            };
            options.arch = match arch {
                Some("amd64") => Arch::Amd64,
                Some("arm64") => Arch::Arm64,
                other => {
                    return Err(format!(
                        "images: --arch takes amd64 or arm64, not {other:?}"
                    ))
                }
            };
        }
        Ok(options)
    }

    fn profile_dir(self) -> &'static str {
        if self.release {
            "release"
        } else {
            "debug"
        }
    }
}

/// Where the images of `arch` land: one OCI layout directory per image.
pub fn images_dir(arch: Arch) -> PathBuf {
    repo_root().join("target").join("images").join(arch.name())
}

/// One image's contents: files copied from the build (or written) to their
/// paths in the root filesystem, and its configuration.
struct ImageSpec {
    name: &'static str,
    /// (path in the image, source, mode).
    files: Vec<(&'static str, Content, u32)>,
    /// `UID:GID`.
    user: String,
    entrypoint: &'static str,
    description: &'static str,
}

enum Content {
    File(PathBuf),
    Text(String),
}

/// Builds the images of `options` (or takes them from the build cache) into
/// [`images_dir`] and prints each one's name, digest and size. `cargo` makes
/// a cargo command for the host workspace whose target dir is `target_dir`.
/// `with_tests`: build the binaries with the tests' build (`cargo xtask
/// test`) rather than on their own.
pub fn build(
    cargo: impl Fn() -> Command,
    target_dir: &Path,
    ebpf_object: &Path,
    options: Options,
    with_tests: bool,
) -> Result<PathBuf, String> {
    setup::ensure_debian_packages(PACKAGES)?;
    let host = cni_plugin::host_triple()?;
    let cross = options.arch.triple() != host;
    if cross {
        if options.arch != Arch::Arm64 {
            return Err(format!(
                "images: cross builds go to arm64 only; this host is {host}"
            ));
        }
        setup::ensure_debian_packages(ARM64_PACKAGES)?;
        if !setup::try_rustup_target(options.arch.triple()) {
            return Err(format!(
                "rustup cannot add the {} target",
                options.arch.triple()
            ));
        }
    }
    let labels = labels()?;
    let key = key(options, ebpf_object, &labels)?;
    let cache_name = format!("images-{}-{}", options.arch.name(), options.profile_dir());
    let out = images_dir(options.arch);
    let cached = match component_cache::artifact_dir(&cache_name, &key) {
        Some(cached) => {
            eprintln!(
                "xtask: {} images from the build cache (inputs unchanged, key {})",
                options.arch.name(),
                &key[..16]
            );
            cached
        }
        None => {
            let binaries = static_binaries(&cargo, target_dir, options, cross, with_tests)?;
            let specs = specs(&binaries, ebpf_object)?;
            let staging = build_cache().join("images-staging");
            let built = staging.join(&cache_name);
            remove_dir(&built)?;
            for spec in &specs {
                build_image(spec, options.arch, &labels, &built, &staging)?;
            }
            // Reproducible: the same inputs, staged afresh (new files, new
            // times), give the same digests, or the build fails.
            let again = staging.join(format!("{cache_name}-again"));
            for spec in &specs {
                build_image(spec, options.arch, &labels, &again, &staging)?;
                let (first, second) = (
                    summary(&built.join(spec.name))?,
                    summary(&again.join(spec.name))?,
                );
                if first.digest != second.digest {
                    return Err(format!(
                        "{} is not reproducible: built twice from the same inputs, \
                         its digests are {} and {}",
                        spec.name, first.digest, second.digest
                    ));
                }
            }
            remove_dir(&again)?;
            let stored = component_cache::store_dir(&cache_name, &key, &built)?;
            remove_dir(&staging)?;
            stored
        }
    };
    remove_dir(&out)?;
    copy_tree(&cached, &out)?;
    print_table(&out, options.arch)?;
    Ok(out)
}

/// The labels every image carries but `title`.
struct Labels {
    source: String,
    revision: String,
    /// Seconds since the epoch stamped on the image and its files.
    epoch: u64,
}

fn labels() -> Result<Labels, String> {
    let source = std::env::var("IPAM_IMAGE_SOURCE").unwrap_or_else(|_| DEFAULT_SOURCE.into());
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|_| format!("SOURCE_DATE_EPOCH={text:?} is not whole seconds"))?,
        Err(_) => 0,
    };
    Ok(Labels {
        source,
        revision: git_revision(),
        epoch,
    })
}

/// The commit checked out, with `-dirty` when the work tree differs from
/// it; `unknown` outside a git clone.
fn git_revision() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(repo_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "HEAD"]) {
        Some(commit) => match git(&["status", "--porcelain", "--untracked-files=no"]) {
            Some(changes) if changes.is_empty() => commit,
            _ => format!("{commit}-dirty"),
        },
        None => "unknown".into(),
    }
}

/// The build cache key: the inputs' files and everything else that lands in
/// the images or decides how they are built.
fn key(options: Options, ebpf_object: &Path, labels: &Labels) -> Result<String, String> {
    let buildah = Command::new("buildah")
        .arg("--version")
        .output()
        .map_err(|e| format!("buildah --version: {e}"))?;
    let identity = format!(
        "{}\n{}\narch {} profile {}\nebpf {}\nca {}\nsource {} revision {} epoch {}",
        Toolchain::Rustup.rustc_version(&repo_root())?,
        String::from_utf8_lossy(&buildah.stdout).trim(),
        options.arch.name(),
        options.profile_dir(),
        file_sha256(ebpf_object)?,
        file_sha256(Path::new(CA_BUNDLE))?,
        labels.source,
        labels.revision,
        labels.epoch,
    );
    component_cache::key_over(INPUTS, &identity)
}

fn file_sha256(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(hex(&Sha256::digest(&bytes)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut text, b| {
        let _ = write!(text, "{b:02x}");
        text
    })
}

/// The three binaries, statically linked and stripped.
struct Binaries {
    operator: PathBuf,
    agent: PathBuf,
    cni: PathBuf,
}

/// Builds the three binaries static (`static_link`) with the tests' build
/// (`cargo test --workspace --no-run`, which `cargo xtask test` runs anyway)
/// or on their own, and keeps stripped copies.
fn static_binaries(
    cargo: &impl Fn() -> Command,
    target_dir: &Path,
    options: Options,
    cross: bool,
    with_tests: bool,
) -> Result<Binaries, String> {
    let command = || -> Result<Command, String> {
        let mut command = cargo();
        static_link::wrap(&mut command)?;
        if with_tests {
            command.args(["test", "--workspace", "--no-run"]);
        } else {
            command.args(["build", "--bins"]);
            for (package, _, _) in static_link::BINARIES {
                command.args(["--package", package]);
            }
        }
        if cross {
            command.args(["--target", options.arch.triple()]);
            // Debian's cross gcc links, and compiles the C in dependencies.
            command
                .env(
                    "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
                    "aarch64-linux-gnu-gcc",
                )
                .env("CC_aarch64_unknown_linux_gnu", "aarch64-linux-gnu-gcc");
        }
        if options.release {
            command.arg("--release");
        }
        Ok(command)
    };
    let mut dir = target_dir.to_path_buf();
    if cross {
        dir = dir.join(options.arch.triple());
    }
    let dir = dir.join(options.profile_dir());
    run(&mut command()?)?;
    if static_link::relink_if_dynamic(&dir)? {
        run(&mut command()?)?;
    }
    let staging = build_cache().join("images-binaries");
    remove_dir(&staging)?;
    std::fs::create_dir_all(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    let strip = if cross {
        "aarch64-linux-gnu-strip"
    } else {
        "strip"
    };
    let kept = |package: &str| -> Result<PathBuf, String> {
        let built = dir.join(package);
        cni_plugin::check_static(&built)?;
        let kept = staging.join(package);
        run(Command::new(strip)
            .arg("--strip-all")
            .arg("-o")
            .arg(&kept)
            .arg(&built))?;
        Ok(kept)
    };
    Ok(Binaries {
        operator: kept("ipam-operator")?,
        agent: kept("ipam-agent")?,
        cni: kept("ipam-cni")?,
    })
}

fn specs(binaries: &Binaries, ebpf_object: &Path) -> Result<Vec<ImageSpec>, String> {
    let passwd = format!(
        "root:x:0:0:root:/root:/sbin/nologin\n\
         nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n"
    );
    let group = format!("root:x:0:\nnonroot:x:{NONROOT}:\n");
    Ok(vec![
        ImageSpec {
            name: "ipam-operator",
            files: vec![
                (
                    "usr/local/bin/ipam-operator",
                    Content::File(binaries.operator.clone()),
                    0o755,
                ),
                (
                    "etc/ssl/certs/ca-certificates.crt",
                    Content::File(CA_BUNDLE.into()),
                    0o644,
                ),
                ("etc/passwd", Content::Text(passwd), 0o644),
                ("etc/group", Content::Text(group), 0o644),
            ],
            user: format!("{NONROOT}:{NONROOT}"),
            entrypoint: "/usr/local/bin/ipam-operator",
            description: "The cloud-IPAM operator for Cilium's ENI and Azure IPAM modes",
        },
        ImageSpec {
            name: "ipam-agent",
            files: vec![
                (
                    "usr/local/bin/ipam-agent",
                    Content::File(binaries.agent.clone()),
                    0o755,
                ),
                (
                    "usr/local/bin/ipam-cni",
                    Content::File(binaries.cni.clone()),
                    0o755,
                ),
                (
                    "usr/local/lib/ipam-agent/agent-ebpf.o",
                    Content::File(ebpf_object.to_path_buf()),
                    0o644,
                ),
            ],
            // Root: the agent's DaemonSet runs it as uid 0 with NET_ADMIN
            // (and BPF) alone, because Kubernetes sets no ambient
            // capabilities and a non-root process would hold none of them;
            // its init container writes the node's root-owned CNI
            // directories. The DaemonSet sets runAsUser: 0 too.
            user: "0:0".into(),
            entrypoint: "/usr/local/bin/ipam-agent",
            description: "The ipam-operator node agent, the ipam-cni plugin and the eBPF datapath",
        },
    ])
}

/// `buildah --root ... --runroot ...` on storage of its own in the build
/// cache (vfs: no overlay mount needed), apart from any other user's.
fn buildah() -> Command {
    let root = build_cache().join("buildah");
    let mut command = Command::new("buildah");
    command
        .arg("--root")
        .arg(root.join("storage"))
        .arg("--runroot")
        .arg(root.join("run"))
        .args(["--storage-driver", "vfs"]);
    command
}

/// Builds `spec` into the OCI layout `<into>/<name>`, tagged VERSION.
fn build_image(
    spec: &ImageSpec,
    arch: Arch,
    labels: &Labels,
    into: &Path,
    staging: &Path,
) -> Result<(), String> {
    let rootfs = staging.join(format!("{}-rootfs", spec.name));
    remove_dir(&rootfs)?;
    for (path, content, mode) in &spec.files {
        let to = rootfs.join(path);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        match content {
            Content::File(from) => std::fs::copy(from, &to)
                .map(drop)
                .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))?,
            Content::Text(text) => {
                std::fs::write(&to, text).map_err(|e| format!("{}: {e}", to.display()))?
            }
        }
        set_mode(&to, *mode)?;
    }
    // Directories 0755 whatever the umask.
    set_dir_modes(&rootfs)?;
    let container = format!("xtask-images-{}-{}", spec.name, std::process::id());
    // A container of an interrupted run with the same name goes first.
    let _ = buildah().args(["rm", &container]).output();
    run(buildah().args(["from", "--quiet", "--name", &container, "scratch"]))?;
    let committed = configure_and_commit(spec, arch, labels, into, &rootfs, &container);
    if committed.is_err() {
        let _ = buildah().args(["rm", &container]).output();
    }
    committed
}

fn configure_and_commit(
    spec: &ImageSpec,
    arch: Arch,
    labels: &Labels,
    into: &Path,
    rootfs: &Path,
    container: &str,
) -> Result<(), String> {
    let mut source = rootfs.as_os_str().to_owned();
    source.push("/");
    run(buildah()
        .args(["copy", "--quiet", "--chown", "0:0", container])
        .arg(source)
        .arg("/"))?;
    let label = |key: &str, value: &str| format!("org.opencontainers.image.{key}={value}");
    run(buildah().args([
        "config",
        "--created-by",
        "cargo xtask images",
        "--os",
        "linux",
        "--arch",
        arch.name(),
        "--user",
        &spec.user,
        "--entrypoint",
        &format!("[\"{}\"]", spec.entrypoint),
        "--cmd",
        "",
        "--label",
        &label("title", spec.name),
        "--label",
        &label("description", spec.description),
        "--label",
        &label("source", &labels.source),
        "--label",
        &label("version", VERSION),
        "--label",
        &label("revision", &labels.revision),
        "--label",
        &label("licenses", LICENSES),
        container,
    ]))?;
    // buildah refuses an `oci:` path whose parent is missing.
    std::fs::create_dir_all(into).map_err(|e| format!("{}: {e}", into.display()))?;
    let layout = into.join(spec.name);
    let destination = format!("oci:{}:{VERSION}", layout.display());
    run(buildah().args([
        "commit",
        "--quiet",
        "--rm",
        "--format",
        "oci",
        "--identity-label=false",
        "--disable-compression=false",
        "--timestamp",
        &labels.epoch.to_string(),
        container,
        &destination,
    ]))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn set_dir_modes(dir: &Path) -> Result<(), String> {
    set_mode(dir, 0o755)?;
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if path.is_dir() {
            set_dir_modes(&path)?;
        }
    }
    Ok(())
}

fn remove_dir(dir: &Path) -> Result<(), String> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("removing {}: {e}", dir.display()))
        }
        _ => Ok(()),
    }
}

/// Copies the tree `from` to `to` (regular files and directories: what an
/// OCI layout holds).
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for entry in std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let entry = entry.map_err(|e| format!("{}: {e}", from.display()))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if source.is_dir() {
            copy_tree(&source, &target)?;
        } else {
            std::fs::copy(&source, &target).map_err(|e| {
                format!("copying {} to {}: {e}", source.display(), target.display())
            })?;
        }
    }
    Ok(())
}

/// An image as its OCI layout describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub name: String,
    /// The manifest's digest (`sha256:...`), what a registry pulls by.
    pub digest: String,
    /// The compressed layers and the config, as a registry stores them.
    pub size: u64,
}

/// The image in the OCI layout `dir` (one manifest in its index).
pub fn summary(dir: &Path) -> Result<Summary, String> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let json = |path: PathBuf| -> Result<serde_json::Value, String> {
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    };
    let index = json(dir.join("index.json"))?;
    let digest = match index["manifests"].as_array().map(Vec::as_slice) {
        Some([manifest]) => manifest["digest"].as_str().map(str::to_string),
        _ => None,
    }
    .ok_or_else(|| format!("{}: not one manifest in index.json", dir.display()))?;
    let blob = |digest: &str| {
        dir.join("blobs")
            .join(digest.replacen(':', std::path::MAIN_SEPARATOR_STR, 1))
    };
    let manifest = json(blob(&digest))?;
    let size = std::iter::once(&manifest["config"])
        .chain(manifest["layers"].as_array().into_iter().flatten())
        .map(|descriptor| descriptor["size"].as_u64().unwrap_or(0))
        .sum();
    Ok(Summary { name, digest, size })
}

fn print_table(dir: &Path, arch: Arch) -> Result<(), String> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.join("index.json").is_file())
        .collect();
    names.sort();
    println!(
        "{:<16} {:<6} {:<72} {:>10}",
        "IMAGE", "ARCH", "DIGEST", "SIZE"
    );
    for path in names {
        let image = summary(&path)?;
        println!(
            "{:<16} {:<6} {:<72} {:>7.1} MB",
            image.name,
            arch.name(),
            image.digest,
            image.size as f64 / 1e6
        );
    }
    println!("(OCI layouts in {}, tag {VERSION})", dir.display());
    Ok(())
}

#[cfg(test)]
mod unit {
    use super::{Arch, Options};

    fn parse(args: &[&str]) -> Result<Options, String> {
        Options::parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn options_parse_and_bad_ones_are_refused() {
        assert_eq!(parse(&[]), Ok(Options::host_dev()));
        assert_eq!(
            parse(&["--release", "--arch", "arm64"]),
            Ok(Options {
                release: true,
                arch: Arch::Arm64
            })
        );
        assert_eq!(parse(&["--arch=arm64"]).map(|o| o.arch), Ok(Arch::Arm64));
        assert!(parse(&["--arch", "riscv64"]).is_err());
        assert!(parse(&["--arch"]).is_err());
        assert!(parse(&["--relase"]).is_err());
    }
}
