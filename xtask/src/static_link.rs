//! Linking the images' binaries (`ipam-operator`, `ipam-agent`,
//! `ipam-cni`) static inside an ordinary cargo build, so they share every
//! dependency with the tests' build.
//!
//! `cargo rustc -p X -- -C target-feature=+crt-static` would pass the flag
//! to X's final link alone, but it resolves features for X alone: tokio,
//! libc, rustix and the like get other feature sets than in `cargo test
//! --workspace`, and about a hundred dependencies of the operator and
//! seventy of the agent (wasmtime, kube, k8s-openapi among them) would be
//! compiled a second time on a cold machine. Instead xtask names a copy of
//! itself as cargo's RUSTC_WRAPPER: it runs rustc as asked and adds
//! `-C target-feature=+crt-static` to the link of those three binary crates
//! only. Cargo does not fingerprint the wrapper, so the tests' build and the
//! images' share every unit; the tests then run the static binaries (as
//! deployed). A binary that cargo finds fresh from a build without the
//! wrapper is still dynamic: [`relink_if_dynamic`] touches its main file
//! so the next build links it again.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::{build_cache, cni_plugin, repo_root};

/// The variable that puts xtask in wrapper mode: the binary crates to link
/// static, comma-separated.
const STATIC_CRATES: &str = "IPAM_XTASK_STATIC_CRATES";
/// A RUSTC_WRAPPER the caller had (sccache...), run by ours.
const INNER_WRAPPER: &str = "IPAM_XTASK_INNER_RUSTC_WRAPPER";

/// The binaries linked static: package (the binary's name too), crate name,
/// main file relative to the repository root.
pub const BINARIES: &[(&str, &str, &str)] = &[
    (
        "ipam-operator",
        "ipam_operator",
        "host/operator/src/main.rs",
    ),
    ("ipam-agent", "ipam_agent", "host/agent/src/main.rs"),
    ("ipam-cni", "ipam_cni", "host/cni/src/bin/ipam-cni.rs"),
];

/// When cargo runs xtask as its rustc wrapper (`<xtask> <rustc> ARGS`),
/// runs rustc and returns its exit code; None otherwise.
pub fn run_as_rustc_wrapper() -> Option<ExitCode> {
    let crates = std::env::var(STATIC_CRATES).ok()?;
    let mut args = std::env::args_os().skip(1);
    let rustc = args.next()?;
    let rest: Vec<OsString> = args.collect();
    let mut command = match std::env::var_os(INNER_WRAPPER) {
        Some(inner) => {
            let mut command = Command::new(inner);
            command.arg(rustc);
            command
        }
        None => Command::new(rustc),
    };
    command.args(&rest);
    let text: Vec<String> = rest
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if links_one_of(&text, &crates) {
        command.args(["-C", "target-feature=+crt-static"]);
    }
    Some(match command.status() {
        Ok(status) => ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("xtask rustc wrapper: {e}");
            ExitCode::FAILURE
        }
    })
}

/// Whether `args` compile and link a binary crate named in `crates`
/// (comma-separated): `--crate-name N --crate-type bin`, emitting a link,
/// not a test harness.
fn links_one_of(args: &[String], crates: &str) -> bool {
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    let named = value("--crate-name").is_some_and(|name| crates.split(',').any(|c| c == name));
    let bin = value("--crate-type") == Some("bin");
    let links = args
        .iter()
        .any(|a| a.starts_with("--emit=") && a.contains("link"));
    named && bin && links && !args.iter().any(|a| a == "--test")
}

/// Makes `cargo` link the three binaries static through the wrapper (a copy
/// of this xtask binary in the build cache, so that a build of xtask itself
/// never replaces the running wrapper).
pub fn wrap(cargo: &mut Command) -> Result<(), String> {
    let wrapper = install_wrapper()?;
    if let Some(inner) = std::env::var_os("RUSTC_WRAPPER").filter(|w| !w.is_empty()) {
        cargo.env(INNER_WRAPPER, inner);
    }
    let crates: Vec<&str> = BINARIES.iter().map(|(_, name, _)| *name).collect();
    cargo
        .env("RUSTC_WRAPPER", wrapper)
        .env(STATIC_CRATES, crates.join(","));
    Ok(())
}

fn install_wrapper() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("xtask's own path: {e}"))?;
    let dir = build_cache();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let wrapper = dir.join("xtask-rustc-wrapper");
    // Beside it and renamed over it: a build running the old copy keeps it.
    let temporary = dir.join(format!(".xtask-rustc-wrapper.{}", std::process::id()));
    std::fs::copy(&me, &temporary)
        .map_err(|e| format!("copying {} to {}: {e}", me.display(), temporary.display()))?;
    std::fs::rename(&temporary, &wrapper)
        .map_err(|e| format!("{} to {}: {e}", temporary.display(), wrapper.display()))?;
    Ok(wrapper)
}

/// The binaries in `dir` that are not static; for each, its main file is
/// touched so that the next build relinks it (cargo found it fresh from a
/// build without the wrapper). True when one was.
pub fn relink_if_dynamic(dir: &Path) -> Result<bool, String> {
    let mut touched = false;
    for (binary, _, main) in BINARIES {
        if cni_plugin::check_static(&dir.join(binary)).is_ok() {
            continue;
        }
        let main = repo_root().join(main);
        eprintln!(
            "xtask: {binary} in {} is not static (built without xtask's wrapper); \
             touching {} to relink it",
            dir.display(),
            main.display()
        );
        std::fs::File::options()
            .append(true)
            .open(&main)
            .and_then(|file| file.set_modified(std::time::SystemTime::now()))
            .map_err(|e| format!("{}: {e}", main.display()))?;
        touched = true;
    }
    Ok(touched)
}

#[cfg(test)]
mod unit {
    use super::links_one_of;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn only_the_named_binaries_final_links_are_static() {
        let crates = "ipam_operator,ipam_agent";
        let bin = "--crate-name ipam_agent --edition=2021 src/main.rs --crate-type bin \
                   --emit=dep-info,link -C opt-level=0";
        assert!(links_one_of(&args(bin), crates));
        // The library of the same name, its test harness, a check build,
        // another binary.
        assert!(!links_one_of(
            &args("--crate-name ipam_agent --crate-type lib --emit=dep-info,metadata,link"),
            crates
        ));
        assert!(!links_one_of(
            &args("--crate-name ipam_agent --emit=dep-info,link --test"),
            crates
        ));
        assert!(!links_one_of(
            &args("--crate-name ipam_agent --crate-type bin --emit=dep-info,metadata"),
            crates
        ));
        assert!(!links_one_of(
            &args("--crate-name xtask --crate-type bin --emit=dep-info,link"),
            crates
        ));
    }
}
