//! Building the datapath's eBPF program (`agent-ebpf/`, a workspace of its
//! own) for bpfel-unknown-none into `target/ebpf/agent-ebpf.o`. Like the AWS
//! component it is kept in the build cache under a key of its inputs and
//! toolchain, and rebuilt only when that key changes.
//!
//! The object is built with `-Zbuild-std=core` (RUSTC_BOOTSTRAP=1) from the
//! toolchain's rust-src and linked by bpf-linker, whose LLVM major must be
//! the toolchain's: stable 1.95 and Debian's rustc-web 1.96 are LLVM 22, so
//! bpf-linker is built `--features llvm-22` against Debian's llvm-22-dev and
//! installed into the build cache.

use std::path::PathBuf;
use std::process::Command;

use crate::setup::{self, Toolchain};
use crate::{build_cache, component_cache, repo_root, run};

const TARGET: &str = "bpfel-unknown-none";
const PACKAGE: &str = "agent-ebpf";
/// What the object is built from (prose and build output excluded).
const INPUTS: &[&str] = &["agent-ebpf"];
/// The LLVM major bpf-linker is built against; the toolchain's must match.
const LLVM_MAJOR: &str = "22";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
/// What bpf-linker links against (Debian 12 has LLVM 22 in its security
/// updates).
const LLVM_PACKAGES: &[&str] = &[
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
];
const BPF_LINKER_VERSION: &str = "0.13.0";
/// Debian's Rust for where rustup cannot add rust-src.
const DEBIAN_PACKAGES: &[&str] = &["rustc-web", "cargo-web", "rust-web-src"];

fn choose_toolchain() -> Result<Toolchain, String> {
    Toolchain::choose(
        "IPAM_EBPF_TOOLCHAIN",
        "rust-src",
        setup::try_rustup_rust_src,
    )
}

fn ebpf_dir() -> PathBuf {
    repo_root().join("agent-ebpf")
}

/// Where the host's tests and the agent find the object.
pub fn object_path() -> PathBuf {
    repo_root().join("target").join("ebpf").join("agent-ebpf.o")
}

fn target_dir(toolchain: &Toolchain) -> PathBuf {
    build_cache().join(match toolchain {
        Toolchain::Rustup => "ebpf-target-rustup",
        Toolchain::Debian => "ebpf-target-debian",
    })
}

fn bpf_linker_root() -> PathBuf {
    build_cache().join("bpf-linker")
}

/// A cargo command in `agent-ebpf/` for the BPF target.
fn bpf_cargo(toolchain: &Toolchain, subcommand: &str) -> Result<Command, String> {
    let mut cargo = toolchain.cargo(DEBIAN_PACKAGES)?;
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bpf_linker_root().join("bin")];
    paths.extend(std::env::split_paths(&path));
    let path = std::env::join_paths(paths).map_err(|e| format!("PATH: {e}"))?;
    cargo
        .current_dir(ebpf_dir())
        .arg(subcommand)
        .args(["--release", "--target", TARGET, "-Zbuild-std=core"])
        .args(["--package", PACKAGE])
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_TARGET_DIR", target_dir(toolchain))
        .env("PATH", path);
    Ok(cargo)
}

/// What identifies the toolchain's output, for the cache key; fails when
/// its LLVM is not the one bpf-linker is built for.
fn toolchain_identity(toolchain: &Toolchain) -> Result<String, String> {
    let rustc = toolchain.rustc();
    let version = toolchain.rustc_version(&ebpf_dir())?;
    let llvm = version
        .lines()
        .find_map(|line| line.strip_prefix("LLVM version: "))
        .unwrap_or("unknown");
    if llvm.split('.').next() != Some(LLVM_MAJOR) {
        return Err(format!(
            "{rustc} is built on LLVM {llvm}, but bpf-linker is built for LLVM {LLVM_MAJOR}: \
             use a toolchain on LLVM {LLVM_MAJOR} (stable 1.95, or IPAM_EBPF_TOOLCHAIN=debian)"
        ));
    }
    Ok(format!(
        "{version}\nbpf-linker {BPF_LINKER_VERSION} llvm-{LLVM_MAJOR}"
    ))
}

/// bpf-linker in the build cache, built against Debian's LLVM the first
/// time (it compiles for a few minutes, niced).
fn ensure_bpf_linker() -> Result<(), String> {
    let linker = bpf_linker_root().join("bin").join("bpf-linker");
    let runs = Command::new(&linker)
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(BPF_LINKER_VERSION));
    if runs {
        return Ok(());
    }
    setup::ensure_debian_packages(LLVM_PACKAGES)?;
    eprintln!(
        "xtask: building bpf-linker {BPF_LINKER_VERSION} against {LLVM_PREFIX} into {} \
         (a few minutes, once)",
        bpf_linker_root().display()
    );
    run(Command::new("nice")
        .args(["-n", "10", "cargo", "install", "--locked", "bpf-linker"])
        .args(["--version", BPF_LINKER_VERSION])
        .args(["--no-default-features", "--features", "llvm-22", "--root"])
        .arg(bpf_linker_root())
        .env("LLVM_PREFIX", LLVM_PREFIX)
        .env("CARGO_TARGET_DIR", bpf_linker_root().join("target")))
}

/// Builds the object (or takes it from the cache) into [`object_path`].
pub fn build() -> Result<PathBuf, String> {
    let toolchain = choose_toolchain()?;
    let key = component_cache::key_over(INPUTS, &toolchain_identity(&toolchain)?)?;
    let to = object_path();
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    if let Some(cached) = component_cache::artifact(PACKAGE, &key, "o") {
        eprintln!(
            "xtask: eBPF object from the build cache (inputs unchanged, key {})",
            &key[..16]
        );
        return copy(&cached, &to);
    }
    ensure_bpf_linker()?;
    run(&mut bpf_cargo(&toolchain, "build")?)?;
    let built = target_dir(&toolchain)
        .join(TARGET)
        .join("release")
        .join(PACKAGE);
    component_cache::store_artifact(PACKAGE, &key, "o", &built)?;
    copy(&built, &to)
}

fn copy(from: &std::path::Path, to: &std::path::Path) -> Result<PathBuf, String> {
    std::fs::copy(from, to)
        .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))?;
    eprintln!("xtask: eBPF object in {}", to.display());
    Ok(to.to_path_buf())
}

/// `cargo fmt --check` and clippy over `agent-ebpf/`: the common crate
/// natively (with its tests), the program for the BPF target where rustup
/// has clippy (Debian's rustc-web has none).
pub fn lint() -> Result<(), String> {
    run(Command::new("cargo")
        .current_dir(ebpf_dir())
        .args(["fmt", "--all", "--check"]))?;
    run(native_cargo().args(["clippy", "--all-targets", "--", "-D", "warnings"]))?;
    match choose_toolchain()? {
        Toolchain::Rustup => {
            ensure_bpf_linker()?;
            run(bpf_cargo(&Toolchain::Rustup, "clippy")?.args(["--", "-D", "warnings"]))
        }
        Toolchain::Debian => {
            eprintln!("xtask: Debian's rustc-web has no clippy; the eBPF program is not linted");
            Ok(())
        }
    }
}

fn native_cargo() -> Command {
    let mut cargo = Command::new("cargo");
    cargo
        .current_dir(ebpf_dir())
        .env("CARGO_TARGET_DIR", build_cache().join("agent-ebpf-native"));
    cargo
}

/// The common crate's unit tests (packet parsing, verdicts, counters), run
/// natively: it is the eBPF workspace's only default member.
pub fn unit_tests_command() -> Command {
    let mut cargo = native_cargo();
    cargo.arg("test");
    cargo
}
