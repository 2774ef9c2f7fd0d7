//! Building the provider components (`providers/`, a workspace of its own)
//! for wasm32-wasip2, and putting them in `target/components/<name>.wasm`.

use std::path::PathBuf;
use std::process::Command;

use crate::aws_lane::{AwsLane, Mode};
use crate::{build_cache, repo_root, run, setup};

const TARGET: &str = "wasm32-wasip2";

/// Debian's Rust for the web and what it needs to link wasip2 components
/// (design.md section 7): used when rustup has no wasm32-wasip2 std.
const DEBIAN_PACKAGES: &[&str] = &[
    "rustc-web",
    "cargo-web",
    "rust-web-src",
    "rust-web-llvm",
    "wasi-libc",
    "lld-19",
];

/// Component file name for each cdylib package of `providers/` built on
/// every run (cargo's own incremental build makes that cheap).
const COMPONENTS: &[(&str, &str)] = &[
    ("mock_provider", "mock"),
    ("misbehave_provider", "misbehave"),
    ("future_wit_provider", "future-wit"),
];

/// The AWS provider: package, artifact, component name. Built only when its
/// inputs change (`component_cache`).
pub(crate) const AWS: (&str, &str, &str) = ("aws-provider", "aws_provider", "aws");

/// Flags for Debian's rustc-web to link wasip2 components (design.md §7).
const DEBIAN_RUSTFLAGS: &str =
    "-L /usr/lib/wasm32-wasi -Clink-self-contained=no -Clink-arg=--wasm-ld-path=/usr/bin/wasm-ld-19";

#[derive(Clone, Copy)]
pub(crate) enum Toolchain {
    Rustup,
    Debian,
}

pub(crate) fn choose_toolchain() -> Result<Toolchain, String> {
    let choice = std::env::var("IPAM_WASM_TOOLCHAIN").unwrap_or_else(|_| "auto".into());
    match choice.as_str() {
        "rustup" if setup::try_rustup_target(TARGET) => Ok(Toolchain::Rustup),
        "rustup" => Err(format!("rustup cannot provide the {TARGET} target")),
        "debian" => Ok(Toolchain::Debian),
        "auto" if setup::try_rustup_target(TARGET) => Ok(Toolchain::Rustup),
        "auto" => {
            eprintln!(
                "xtask: rustup has no {TARGET} std; using Debian's rustc-web with -Zbuild-std"
            );
            Ok(Toolchain::Debian)
        }
        other => Err(format!(
            "IPAM_WASM_TOOLCHAIN={other}: expected auto, rustup or debian"
        )),
    }
}

pub(crate) fn providers_dir() -> PathBuf {
    repo_root().join("providers")
}

/// A cargo command for the providers workspace, for wasm32-wasip2, with its
/// build output in the toolchain's directory of the build cache.
pub(crate) fn wasm_cargo(toolchain: &Toolchain, subcommand: &str) -> Result<Command, String> {
    wasm_cargo_in(toolchain, subcommand, target_dir_name(toolchain))
}

fn target_dir_name(toolchain: &Toolchain) -> &'static str {
    match toolchain {
        Toolchain::Rustup => "wasm-target-rustup",
        Toolchain::Debian => "wasm-target-debian",
    }
}

/// The same with its output in `dir` of the build cache (cargo locks a build
/// directory: a command running beside another needs its own).
fn wasm_cargo_in(toolchain: &Toolchain, subcommand: &str, dir: &str) -> Result<Command, String> {
    let mut cargo = match toolchain {
        Toolchain::Rustup => {
            let mut cargo = Command::new("cargo");
            cargo
                .arg(subcommand)
                .args(["--release", "--target", TARGET]);
            cargo
        }
        Toolchain::Debian => {
            setup::ensure_debian_packages(DEBIAN_PACKAGES)?;
            let mut cargo = Command::new("/usr/bin/cargo");
            cargo.arg(subcommand).args([
                "--release",
                "--target",
                TARGET,
                "-Zbuild-std=std,panic_abort",
            ]);
            cargo
                .env("RUSTC", "/usr/bin/rustc")
                .env("RUSTC_BOOTSTRAP", "1")
                .env("RUSTFLAGS", DEBIAN_RUSTFLAGS)
                .env_remove("RUSTUP_TOOLCHAIN")
                .env_remove("CARGO");
            cargo
        }
    };
    cargo
        .env("CARGO_TARGET_DIR", build_cache().join(dir))
        .current_dir(providers_dir());
    Ok(cargo)
}

/// Clippy over guest crates for the target they are built for; natively on
/// the Debian path, whose rustc-web ships no clippy. `dir` names its build
/// output in the build cache.
pub(crate) fn clippy_cargo(toolchain: &Toolchain, dir: &str) -> Result<Command, String> {
    match toolchain {
        Toolchain::Debian => {
            let mut cargo = Command::new("cargo");
            cargo
                .current_dir(providers_dir())
                .env(
                    "CARGO_TARGET_DIR",
                    build_cache().join(format!("{dir}-native")),
                )
                .arg("clippy");
            Ok(cargo)
        }
        Toolchain::Rustup => wasm_cargo_in(toolchain, "clippy", dir),
    }
}

/// What identifies the toolchain's output, for the component cache key.
pub(crate) fn toolchain_identity(toolchain: &Toolchain) -> Result<String, String> {
    let (rustc, flags) = match toolchain {
        Toolchain::Rustup => ("rustc", "rustup"),
        Toolchain::Debian => ("/usr/bin/rustc", DEBIAN_RUSTFLAGS),
    };
    let output = Command::new(rustc)
        .arg("-vV")
        .current_dir(providers_dir())
        .output()
        .map_err(|e| format!("{rustc} -vV: {e}"))?;
    Ok(format!(
        "{}\n{flags}",
        String::from_utf8_lossy(&output.stdout)
    ))
}

pub(crate) fn target_dir(toolchain: &Toolchain) -> PathBuf {
    build_cache()
        .join(target_dir_name(toolchain))
        .join(TARGET)
        .join("release")
}

/// Where the host's tests and CLI look for components.
pub fn components_dir() -> PathBuf {
    repo_root().join("target").join("components")
}

/// Every component, the AWS one built in the foreground when its inputs
/// changed.
pub fn build() -> Result<PathBuf, String> {
    let toolchain = choose_toolchain()?;
    let out = build_others(&toolchain)?;
    AwsLane::start(toolchain, Mode::Foreground)?.finish()?;
    eprintln!("xtask: components in {}", out.display());
    Ok(out)
}

/// Every component but the AWS one (cargo's incremental build makes them
/// cheap on every run).
pub(crate) fn build_others(toolchain: &Toolchain) -> Result<PathBuf, String> {
    run(wasm_cargo(toolchain, "build")?.args(["--workspace", "--exclude", AWS.0]))?;
    let out = components_dir();
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    for (artifact, name) in COMPONENTS {
        copy(
            &target_dir(toolchain).join(format!("{artifact}.wasm")),
            &out.join(format!("{name}.wasm")),
        )?;
    }
    Ok(out)
}

pub(crate) fn copy(from: &std::path::Path, to: &std::path::Path) -> Result<(), String> {
    std::fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))
}

/// Clippy over the guest crates but the AWS one (its lane lints it), in a
/// build directory of its own so that it can run beside the AWS lane.
pub(crate) fn clippy_others(toolchain: &Toolchain) -> Result<(), String> {
    run(clippy_cargo(toolchain, "guest-clippy")?.args([
        "--workspace",
        "--exclude",
        AWS.0,
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))
}

/// The guests' own unit tests (address math, faults), run natively: only the
/// crates that have them, as the other guests are cdylibs for wasm alone.
pub fn unit_tests_command() -> Command {
    let mut cargo = Command::new("cargo");
    cargo
        .current_dir(providers_dir())
        .env("CARGO_TARGET_DIR", build_cache().join("providers-native"))
        .args([
            "test",
            "--package",
            "mock-provider",
            "--package",
            "ipam-provider-sdk",
        ]);
    cargo
}
