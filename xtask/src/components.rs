//! Building the provider components (`providers/`, a workspace of its own)
//! for wasm32-wasip2, and putting them in `target/components/<name>.wasm`.

use std::path::PathBuf;
use std::process::Command;

use crate::setup::{self, Toolchain};
use crate::{build_cache, component_cache, repo_root, run};

const TARGET: &str = "wasm32-wasip2";

/// Debian's Rust for the web and what it needs to link wasip2 components
/// (Debian 12's route): used when rustup has no wasm32-wasip2 std.
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
    ("mock_component", "mock"),
    ("misbehave_provider", "misbehave"),
    ("future_wit_provider", "future-wit"),
    ("wrong_type_provider", "wrong-type"),
    ("mock_v0_1_0_provider", "mock-v0.1.0"),
];

/// Packages of COMPONENTS built in a cargo invocation of their own. The
/// 0.1.0 fixture links the SDK without its `component` feature (0.2.0's
/// world, whose exports would be demanded of it); built with the rest of the
/// workspace, cargo would unify the feature on. Its dependencies are rlibs,
/// so both builds share the target directory without clobbering each other.
const BUILT_ALONE: &[&str] = &["mock-v0-1-0-provider"];

/// A cloud provider component, built only when its inputs change
/// (`component_cache`).
struct Cached {
    package: &'static str,
    artifact: &'static str,
    name: &'static str,
    /// Its crate, relative to the repository root.
    crate_dir: &'static str,
    /// How long a cold build takes on 2 cores, for the message before it.
    cold_build: &'static str,
}

const CACHED: &[Cached] = &[
    Cached {
        package: "aws-provider",
        artifact: "aws_provider",
        name: "aws",
        crate_dir: "providers/aws",
        cold_build:
            "when aws-sdk-ec2 itself is not built yet this takes about 12 minutes on 2 cores",
    },
    Cached {
        package: "azure-provider",
        artifact: "azure_provider",
        name: "azure",
        crate_dir: "providers/azure",
        cold_build: "about two minutes on 2 cores when its dependencies are not built yet",
    },
];

/// Flags for Debian's rustc-web to link wasip2 components.
const DEBIAN_RUSTFLAGS: &str =
    "-L /usr/lib/wasm32-wasi -Clink-self-contained=no -Clink-arg=--wasm-ld-path=/usr/bin/wasm-ld-19";

fn choose_toolchain() -> Result<Toolchain, String> {
    Toolchain::choose("IPAM_WASM_TOOLCHAIN", &format!("the {TARGET} std"), || {
        setup::try_rustup_target(TARGET)
    })
}

fn providers_dir() -> PathBuf {
    repo_root().join("providers")
}

/// The target directory of a toolchain's builds, in the build cache.
fn target_root(toolchain: &Toolchain) -> PathBuf {
    build_cache().join(match toolchain {
        Toolchain::Rustup => "wasm-target-rustup",
        Toolchain::Debian => "wasm-target-debian",
    })
}

/// A cargo command for the providers workspace, for wasm32-wasip2.
fn wasm_cargo(toolchain: &Toolchain, subcommand: &str) -> Result<Command, String> {
    let mut cargo = toolchain.cargo(DEBIAN_PACKAGES)?;
    cargo
        .current_dir(providers_dir())
        .arg(subcommand)
        .args(["--release", "--target", TARGET])
        .env("CARGO_TARGET_DIR", target_root(toolchain));
    if let Toolchain::Debian = toolchain {
        cargo
            .arg("-Zbuild-std=std,panic_abort")
            .env("RUSTC_BOOTSTRAP", "1")
            .env("RUSTFLAGS", DEBIAN_RUSTFLAGS);
    }
    Ok(cargo)
}

/// What identifies the toolchain's output, for the component cache key.
fn toolchain_identity(toolchain: &Toolchain) -> Result<String, String> {
    let flags = match toolchain {
        Toolchain::Rustup => "rustup",
        Toolchain::Debian => DEBIAN_RUSTFLAGS,
    };
    Ok(format!(
        "{}\n{flags}",
        toolchain.rustc_version(&providers_dir())?
    ))
}

fn target_dir(toolchain: &Toolchain) -> PathBuf {
    target_root(toolchain).join(TARGET).join("release")
}

/// Where the host's tests and CLI look for components.
pub fn components_dir() -> PathBuf {
    repo_root().join("target").join("components")
}

pub fn build() -> Result<PathBuf, String> {
    let toolchain = choose_toolchain()?;
    let mut workspace = wasm_cargo(&toolchain, "build")?;
    workspace.arg("--workspace");
    for cached in CACHED {
        workspace.args(["--exclude", cached.package]);
    }
    for package in BUILT_ALONE {
        workspace.args(["--exclude", package]);
    }
    run(&mut workspace)?;
    for package in BUILT_ALONE {
        run(wasm_cargo(&toolchain, "build")?.args(["--package", package]))?;
    }
    let out = components_dir();
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    for (artifact, name) in COMPONENTS {
        copy(
            &target_dir(&toolchain).join(format!("{artifact}.wasm")),
            &out.join(format!("{name}.wasm")),
        )?;
    }
    for cached in CACHED {
        build_cached(&toolchain, cached, &out)?;
    }
    eprintln!("xtask: components in {}", out.display());
    Ok(out)
}

/// A cloud provider component from the cache when its inputs have not
/// changed, else built and cached.
fn build_cached(
    toolchain: &Toolchain,
    cached: &Cached,
    out: &std::path::Path,
) -> Result<(), String> {
    let name = cached.name;
    let key = component_cache::key(&toolchain_identity(toolchain)?, cached.crate_dir)?;
    let to = out.join(format!("{name}.wasm"));
    if let Some(cached) = component_cache::component(name, &key) {
        eprintln!(
            "xtask: {name} component from the build cache (inputs unchanged, key {})",
            &key[..16]
        );
        return copy(&cached, &to);
    }
    eprintln!(
        "xtask: building the {name} component (its inputs changed since the cached build, key {}; \
         {})",
        &key[..16],
        cached.cold_build
    );
    run(wasm_cargo(toolchain, "build")?.args(["--package", cached.package]))?;
    let built = target_dir(toolchain).join(format!("{}.wasm", cached.artifact));
    component_cache::store(name, &key, &built)?;
    copy(&built, &to)
}

fn copy(from: &std::path::Path, to: &std::path::Path) -> Result<(), String> {
    std::fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))
}

/// Clippy over the guest crates, for the target they are built for. A cloud
/// provider's crate is linted only when its inputs changed since it last
/// passed.
pub fn clippy() -> Result<(), String> {
    let toolchain = choose_toolchain()?;
    let identity = toolchain_identity(&toolchain)?;
    let mut to_lint = Vec::new();
    let mut cargo = match toolchain {
        // Debian's rustc-web ships no clippy; lint the guests natively instead.
        Toolchain::Debian => {
            let mut cargo = Command::new("cargo");
            cargo
                .current_dir(providers_dir())
                .env("CARGO_TARGET_DIR", build_cache().join("providers-native"))
                .arg("clippy");
            cargo
        }
        Toolchain::Rustup => wasm_cargo(&toolchain, "clippy")?,
    };
    cargo.arg("--workspace");
    for cached in CACHED {
        let key = component_cache::key(&identity, cached.crate_dir)?;
        if component_cache::linted(cached.name, &key) {
            eprintln!(
                "xtask: clippy passed on {} with these inputs before (key {})",
                cached.package,
                &key[..16]
            );
            cargo.args(["--exclude", cached.package]);
        } else {
            to_lint.push((cached.name, key));
        }
    }
    run(cargo.args(["--all-targets", "--", "-D", "warnings"]))?;
    for (name, key) in to_lint {
        component_cache::mark_linted(name, &key)?;
    }
    Ok(())
}

/// The guests' own unit tests (address math, faults, the SDK's helpers, the
/// AWS and Azure providers' conversions, error mapping and rate models, the misbehave
/// guest's cloud and lies, the 0.1.0 fixture's conversions), run natively:
/// only the crates that have them.
/// The first run builds aws-sdk-ec2 natively (about 9 minutes on 2 cores);
/// later ones reuse it from the build cache.
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
            "--package",
            "aws-provider",
            "--package",
            "azure-provider",
            "--package",
            "misbehave-provider",
            "--package",
            "mock-v0-1-0-provider",
        ]);
    cargo
}
