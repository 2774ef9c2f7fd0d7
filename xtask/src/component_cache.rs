//! The cloud provider components take minutes to build cold (aws-sdk-ec2 is
//! one crate of over a million lines), so each is kept in the build cache
//! under a key made of everything it is built from: its sources, the SDK's,
//! the WIT, the workspace manifest and lockfile, and the toolchain. It is
//! rebuilt (and linted) only when that key changes.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{build_cache, repo_root};

/// What every provider component is built from besides its own crate,
/// relative to the repository root.
const SHARED_INPUTS: &[&str] = &[
    "providers/sdk",
    "wit/0.2.0",
    "providers/Cargo.toml",
    "providers/Cargo.lock",
];

/// A cache key of the component whose crate is `crate_dir` (`providers/aws`):
/// the hex SHA-256 over the toolchain's identity and every input file (path,
/// length, bytes), in path order.
pub fn key(toolchain_identity: &str, crate_dir: &str) -> Result<String, String> {
    let inputs: Vec<&str> = std::iter::once(crate_dir)
        .chain(SHARED_INPUTS.iter().copied())
        .collect();
    key_over(&inputs, toolchain_identity)
}

/// A cache key over other inputs (relative to the repository root), for
/// other artifacts built only when their inputs change (the eBPF object).
pub fn key_over(inputs: &[&str], toolchain_identity: &str) -> Result<String, String> {
    let root = repo_root();
    let mut files = Vec::new();
    for input in inputs {
        collect(&root.join(input), &mut files)?;
    }
    files.sort();
    let mut hasher = Sha256::new();
    hasher.update(toolchain_identity.as_bytes());
    for file in files {
        let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let relative = file.strip_prefix(&root).unwrap_or(&file);
        hasher.update(relative.to_string_lossy().as_bytes());
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

fn collect(path: &Path, into: &mut Vec<PathBuf>) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_file() {
        into.push(path.to_path_buf());
        return Ok(());
    }
    let entries = std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", path.display()))?;
        // Build output (ignored by git) is not an input, and neither is
        // prose: a README edit must not cost a twelve-minute rebuild.
        let name = entry.file_name();
        if name == "target" || Path::new(&name).extension().is_some_and(|e| e == "md") {
            continue;
        }
        collect(&entry.path(), into)?;
    }
    Ok(())
}

fn dir() -> PathBuf {
    // Not "components": the host's compiled-module cache lives there.
    build_cache().join("component-builds")
}

/// The cached component for this key, if built before.
pub fn component(name: &str, key: &str) -> Option<PathBuf> {
    artifact(name, key, "wasm")
}

/// The cached artifact `<name>-<key>.<extension>`, if built before.
pub fn artifact(name: &str, key: &str, extension: &str) -> Option<PathBuf> {
    let path = dir().join(format!("{name}-{key}.{extension}"));
    path.is_file().then_some(path)
}

/// Keep a freshly built component under its key, dropping older builds of it.
pub fn store(name: &str, key: &str, built: &Path) -> Result<(), String> {
    store_artifact(name, key, "wasm", built)
}

/// Keep a freshly built artifact under its key, dropping older builds of it.
pub fn store_artifact(name: &str, key: &str, extension: &str, built: &Path) -> Result<(), String> {
    let dir = dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    remove_older(name, &format!(".{extension}"))?;
    let to = dir.join(format!("{name}-{key}.{extension}"));
    std::fs::copy(built, &to)
        .map_err(|e| format!("{} to {}: {e}", built.display(), to.display()))?;
    Ok(())
}

/// The cached directory `<name>-<key>.d`, if built before.
pub fn artifact_dir(name: &str, key: &str) -> Option<PathBuf> {
    let path = dir().join(format!("{name}-{key}.d"));
    path.is_dir().then_some(path)
}

/// Keep a freshly built directory under its key (moved there, so it must
/// be on the build cache's file system), dropping older builds of it; its
/// path in the cache.
pub fn store_dir(name: &str, key: &str, built: &Path) -> Result<PathBuf, String> {
    let dir = dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    remove_older(name, ".d")?;
    let to = dir.join(format!("{name}-{key}.d"));
    std::fs::rename(built, &to)
        .map_err(|e| format!("moving {} to {}: {e}", built.display(), to.display()))?;
    Ok(to)
}

/// Whether clippy passed on the component's crate for this key.
pub fn linted(name: &str, key: &str) -> bool {
    dir().join(format!("{name}-{key}.clippy-ok")).is_file()
}

pub fn mark_linted(name: &str, key: &str) -> Result<(), String> {
    let dir = dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    remove_older(name, ".clippy-ok")?;
    let marker = dir.join(format!("{name}-{key}.clippy-ok"));
    std::fs::write(&marker, key).map_err(|e| format!("{}: {e}", marker.display()))
}

fn remove_older(name: &str, suffix: &str) -> Result<(), String> {
    let Ok(entries) = std::fs::read_dir(dir()) else {
        return Ok(());
    };
    let prefix = format!("{name}-");
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if file.starts_with(&prefix) && file.ends_with(suffix) {
            let path = entry.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|e| format!("{file}: {e}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod unit {
    use super::collect;

    #[test]
    fn prose_and_build_output_are_not_inputs() {
        let dir = std::env::temp_dir().join(format!("xtask-collect-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::create_dir_all(dir.join("target")).unwrap();
        for file in ["Cargo.toml", "README.md", "src/lib.rs", "target/out.wasm"] {
            std::fs::write(dir.join(file), "x").unwrap();
        }
        let mut files = Vec::new();
        collect(&dir, &mut files).unwrap();
        files.sort();
        let names: Vec<_> = files
            .iter()
            .map(|f| f.strip_prefix(&dir).unwrap().to_string_lossy().into_owned())
            .collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(names, ["Cargo.toml", "src/lib.rs"]);
    }
}
