//! Building the provider components (`providers/`, a workspace of its own)
//! for wasm32-wasip2, and putting them in `target/components/<name>.wasm`.

use std::path::PathBuf;
use std::process::Command;

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

/// Component file name for each cdylib package of `providers/`.
const COMPONENTS: &[(&str, &str)] = &[
    ("mock_provider", "mock"),
    ("misbehave_provider", "misbehave"),
    ("future_wit_provider", "future-wit"),
];

enum Toolchain {
    Rustup,
    Debian,
}

fn choose_toolchain() -> Result<Toolchain, String> {
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

fn providers_dir() -> PathBuf {
    repo_root().join("providers")
}

/// A cargo command for the providers workspace, for wasm32-wasip2.
fn wasm_cargo(toolchain: &Toolchain, subcommand: &str) -> Result<Command, String> {
    let mut cargo = match toolchain {
        Toolchain::Rustup => {
            let mut cargo = Command::new("cargo");
            cargo
                .arg(subcommand)
                .args(["--release", "--target", TARGET]);
            cargo.env("CARGO_TARGET_DIR", build_cache().join("wasm-target-rustup"));
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
                .env(
                    "RUSTFLAGS",
                    "-L /usr/lib/wasm32-wasi -Clink-self-contained=no -Clink-arg=--wasm-ld-path=/usr/bin/wasm-ld-19",
                )
                .env("CARGO_TARGET_DIR", build_cache().join("wasm-target-debian"))
                .env_remove("RUSTUP_TOOLCHAIN")
                .env_remove("CARGO");
            cargo
        }
    };
    cargo.current_dir(providers_dir()).arg("--workspace");
    Ok(cargo)
}

fn target_dir(toolchain: &Toolchain) -> PathBuf {
    let name = match toolchain {
        Toolchain::Rustup => "wasm-target-rustup",
        Toolchain::Debian => "wasm-target-debian",
    };
    build_cache().join(name).join(TARGET).join("release")
}

/// Where the host's tests and CLI look for components.
pub fn components_dir() -> PathBuf {
    repo_root().join("target").join("components")
}

pub fn build() -> Result<PathBuf, String> {
    let toolchain = choose_toolchain()?;
    run(&mut wasm_cargo(&toolchain, "build")?)?;
    let out = components_dir();
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    for (artifact, name) in COMPONENTS {
        let from = target_dir(&toolchain).join(format!("{artifact}.wasm"));
        let to = out.join(format!("{name}.wasm"));
        std::fs::copy(&from, &to)
            .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))?;
    }
    eprintln!("xtask: components in {}", out.display());
    Ok(out)
}

/// Clippy over the guest crates, for the target they are built for.
pub fn clippy() -> Result<(), String> {
    let toolchain = choose_toolchain()?;
    if matches!(toolchain, Toolchain::Debian) {
        // Debian's rustc-web ships no clippy; lint the guests natively instead.
        return run(Command::new("cargo")
            .current_dir(providers_dir())
            .env("CARGO_TARGET_DIR", build_cache().join("providers-native"))
            .args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]));
    }
    let mut cargo = wasm_cargo(&toolchain, "clippy")?;
    run(cargo.args(["--all-targets", "--", "-D", "warnings"]))
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
