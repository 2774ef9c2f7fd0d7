//! The node's CNI configuration directory as the agent sees it: its
//! configuration files read and classified (the agent's own or another
//! network's), the plan of `cni_conf_plan` carried out (the conflist
//! written beside its target and renamed over it, as `install-cni` writes
//! it; the agent's own files removed), and, at uninstall, every file of
//! the agent's removed.

use std::path::{Path, PathBuf};

use crate::cni_conf_plan::{self, ConfFile, ConfKind, ConfPlan};
use crate::cni_conflist;
use crate::install_cni::{self, ConflistFile, InstallCniError};

#[derive(Debug, thiserror::Error)]
pub enum CniConfDirError {
    #[error("listing the CNI configuration directory {dir}: {source}")]
    List {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Write(#[from] InstallCniError),
}

/// The configuration files of `dir` (none when it does not exist), each
/// classified against `ours`.
pub fn scan(dir: &Path, ours: &ConflistFile) -> Result<Vec<ConfFile>, CniConfDirError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(CniConfDirError::List {
                dir: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| CniConfDirError::List {
            dir: dir.to_path_buf(),
            source,
        })?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let path = entry.path();
        // Directories are not read by a runtime; a symbolic link is
        // followed, as the runtime follows it.
        if !cni_conf_plan::is_config_name(&name) || path.is_dir() {
            continue;
        }
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            // Gone meanwhile: nothing a runtime would read.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(CniConfDirError::Read { path, source }),
        };
        let kind = if cni_conflist::is_agents(&bytes) {
            ConfKind::Ours {
                same: bytes == ours.bytes,
            }
        } else {
            ConfKind::Other
        };
        files.push(ConfFile { name, kind });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

/// Reads `dir`, plans and carries the plan out: the agent's conflist
/// written if the plan says so, then its other files removed.
pub fn install(
    dir: &Path,
    ours: &ConflistFile,
    take_over: bool,
) -> Result<ConfPlan, CniConfDirError> {
    let files = scan(dir, ours)?;
    let plan = cni_conf_plan::plan(&files, &ours.name, take_over);
    if plan.write {
        install_cni::install_conflist(dir, ours)?;
    }
    for name in &plan.remove {
        install_cni::remove(dir, name)?;
    }
    Ok(plan)
}

/// Removes every configuration file of the agent's from `dir` (uninstall);
/// their names.
pub fn remove_agents(dir: &Path) -> Result<Vec<String>, CniConfDirError> {
    let mut removed = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(source) => {
            return Err(CniConfDirError::List {
                dir: dir.to_path_buf(),
                source,
            })
        }
    };
    for entry in entries.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if !cni_conf_plan::is_config_name(&name) {
            continue;
        }
        let ours = std::fs::read(entry.path()).is_ok_and(|b| cni_conflist::is_agents(&b));
        if ours && install_cni::remove(dir, &name)? {
            removed.push(name);
        }
    }
    removed.sort();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni_conf_plan::ConfVerdict;

    const CONFLIST: &str = r#"{"cniVersion": "1.0.0", "name": "ipam",
        "plugins": [{"type": "ptp", "ipam": {"type": "ipam-cni"}}]}"#;
    const AWS: &str = r#"{"cniVersion": "0.4.0", "name": "aws-cni",
        "plugins": [{"type": "aws-cni"}]}"#;

    fn ours() -> ConflistFile {
        ConflistFile {
            name: "05-ipam.conflist".into(),
            bytes: CONFLIST.as_bytes().to_vec(),
            summary: cni_conflist::check(CONFLIST.as_bytes()).unwrap(),
        }
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn installs_into_an_empty_or_missing_directory_once() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("net.d");
        let plan = install(&dir, &ours(), false).unwrap();
        assert_eq!(plan.verdict, ConfVerdict::Installed);
        assert_eq!(listing(&dir), ["05-ipam.conflist"]);
        assert_eq!(
            std::fs::read_to_string(dir.join("05-ipam.conflist")).unwrap(),
            CONFLIST
        );
        let again = install(&dir, &ours(), false).unwrap();
        assert_eq!(again.verdict, ConfVerdict::Unchanged);
        assert!(!again.write);
    }

    #[test]
    fn another_network_is_left_alone_and_ours_removed_unless_taking_over() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        std::fs::write(dir.join("10-aws.conflist"), AWS).unwrap();
        std::fs::write(dir.join("05-ipam.conflist"), CONFLIST).unwrap();
        std::fs::write(dir.join("README"), "not a configuration").unwrap();
        std::fs::create_dir(dir.join("sub.conf")).unwrap();
        let plan = install(dir, &ours(), false).unwrap();
        assert_eq!(
            plan.verdict,
            ConfVerdict::OtherNetwork {
                others: vec!["10-aws.conflist".into()]
            }
        );
        assert_eq!(listing(dir), ["10-aws.conflist", "README", "sub.conf"]);
        let plan = install(dir, &ours(), true).unwrap();
        assert_eq!(plan.verdict, ConfVerdict::Installed);
        assert_eq!(
            listing(dir),
            ["05-ipam.conflist", "10-aws.conflist", "README", "sub.conf"]
        );
        assert_eq!(
            remove_agents(dir).unwrap(),
            ["05-ipam.conflist"],
            "uninstall removes ours only"
        );
        assert_eq!(listing(dir), ["10-aws.conflist", "README", "sub.conf"]);
    }
}
