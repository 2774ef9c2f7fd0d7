//! Where a module named on the command line is found. A path is used as it
//! is; a bare name (`mock`, `aws`) is `<name>.wasm` in the first of these
//! that has it: the configured directory (`IPAM_COMPONENTS_DIR`), the
//! binary's own directory, `components/` beside it, `../components` (where
//! `cargo xtask providers` puts them for a binary built in `target/<profile>`),
//! and the user's module folder (`$XDG_CACHE_HOME`, else `~/.cache`, then
//! `ipam-operator/modules`). Never a path of the machine that built the
//! binary.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("no component named {name:?}: looked for {file} in {}", searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
pub struct ModuleNotFound {
    pub name: String,
    pub file: String,
    pub searched: Vec<PathBuf>,
}

/// The folders a bare module name is looked up in, in order.
pub fn search_path() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::var_os("IPAM_COMPONENTS_DIR") {
        dirs.push(PathBuf::from(dir));
    }
    if let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        dirs.push(exe_dir.clone());
        dirs.push(exe_dir.join("components"));
        if let Some(parent) = exe_dir.parent() {
            dirs.push(parent.join("components"));
        }
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")));
    if let Some(cache) = cache {
        dirs.push(cache.join("ipam-operator").join("modules"));
    }
    dirs
}

/// A bare name: no path separator and no extension.
fn is_bare_name(arg: &str) -> bool {
    !arg.contains(std::path::MAIN_SEPARATOR) && Path::new(arg).extension().is_none()
}

/// A module argument as a file: a path, or the first match of a bare name
/// along `search`.
pub fn resolve_module(arg: &str, search: &[PathBuf]) -> Result<PathBuf, ModuleNotFound> {
    let path = Path::new(arg);
    if !is_bare_name(arg) || path.exists() {
        return Ok(path.to_path_buf());
    }
    let file = format!("{arg}.wasm");
    search
        .iter()
        .map(|dir| dir.join(&file))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| ModuleNotFound {
            name: arg.to_string(),
            file,
            searched: search.to_vec(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_name_is_found_in_the_first_folder_that_has_it() {
        let first = tempfile::tempdir().unwrap();
        let second = tempfile::tempdir().unwrap();
        std::fs::write(second.path().join("mock.wasm"), b"x").unwrap();
        let search = [first.path().to_path_buf(), second.path().to_path_buf()];
        assert_eq!(
            resolve_module("mock", &search).unwrap(),
            second.path().join("mock.wasm")
        );
        std::fs::write(first.path().join("mock.wasm"), b"x").unwrap();
        assert_eq!(
            resolve_module("mock", &search).unwrap(),
            first.path().join("mock.wasm")
        );
        let missing = resolve_module("azure", &search).unwrap_err().to_string();
        assert!(missing.contains("azure.wasm"), "{missing}");
        assert!(
            missing.contains(&first.path().display().to_string()),
            "names where it looked: {missing}"
        );
    }

    #[test]
    fn paths_are_taken_as_they_are() {
        assert_eq!(
            resolve_module("./my.wasm", &[]).unwrap(),
            PathBuf::from("./my.wasm")
        );
        assert_eq!(
            resolve_module("/modules/aws.wasm", &[]).unwrap(),
            PathBuf::from("/modules/aws.wasm")
        );
    }

    #[test]
    fn the_search_path_is_relative_to_the_binary_not_the_build_machine() {
        let exe_dir = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        let path = search_path();
        assert!(path.contains(&exe_dir));
        assert!(path.contains(&exe_dir.join("components")));
        assert!(
            path.iter().all(
                |dir| !dir.starts_with(env!("CARGO_MANIFEST_DIR")) || dir.starts_with(&exe_dir)
            ),
            "{path:?}"
        );
    }
}
