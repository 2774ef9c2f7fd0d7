//! `ipam-agent install-cni`: puts the `ipam-cni` plugin into the node's CNI
//! plugin directory, as the DaemonSet's init container runs it (the image
//! has no shell, so no `cp` and `mv`). With `--conflist` it also writes the
//! network configuration list into the configuration directory, at once and
//! whatever else is there: for a node image or a bootstrap step that runs
//! before any runtime reads the directory. The DaemonSet does not use that
//! mode: the agent itself installs the conflist once it serves
//! (`cni_conf_dir`), and only where no other network is configured.
//!
//! Each file is written beside its target under `.NAME.new` (dot-prefixed
//! and ending in `.new`: no runtime loads it), fsynced, given its mode and
//! renamed over the target, then the directory is fsynced. A runtime thus
//! never reads a half-written configuration nor runs a half-copied plugin,
//! and replacing a plugin that is running never fails with "text file busy"
//! (the rename swaps the name; the running copy keeps its inode).
//!
//! Everything is read and checked before anything is written: a conflist
//! that is not one the agent serves (`cni_conflist`) or a plugin that is not
//! an ELF executable is an error naming what is wrong, and the node's
//! directories are left as they were. The plugin goes in first, so a runtime
//! that reads the new conflist finds the plugin it names.

use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::cni_conflist::{self, Conflist, ConflistError, IPAM_TYPE};

/// Where the plugin and the conflist go. The DaemonSets pass flags; every
/// flag also has its environment variable.
#[derive(Debug, Clone, clap::Args)]
pub struct InstallCniArgs {
    /// The statically linked `ipam-cni` plugin to install (the image's);
    /// installed as `ipam-cni`, the IPAM type the conflist names.
    #[arg(
        long,
        env = "IPAM_AGENT_CNI_PLUGIN",
        value_name = "FILE",
        default_value = "/usr/local/bin/ipam-cni"
    )]
    pub plugin: PathBuf,
    /// A network configuration list to install too, at once and whatever
    /// else the configuration directory holds, under its own file name,
    /// which must end in `.conflist`. Unset: the plugin alone (the agent
    /// installs the conflist once it serves).
    #[arg(long, env = "IPAM_AGENT_CNI_CONFLIST", value_name = "FILE")]
    pub conflist: Option<PathBuf>,
    /// The node's CNI plugin directory (created when missing).
    #[arg(
        long,
        env = "IPAM_AGENT_CNI_BIN_DIR",
        value_name = "DIR",
        default_value = "/opt/cni/bin"
    )]
    pub cni_bin_dir: PathBuf,
    /// The node's CNI configuration directory (created when missing).
    #[arg(
        long,
        env = "IPAM_AGENT_CNI_CONF_DIR",
        value_name = "DIR",
        default_value = "/etc/cni/net.d"
    )]
    pub cni_conf_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum InstallCniError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the plugin {path} is not an ELF executable")]
    PluginNotElf { path: PathBuf },
    #[error("the conflist {path} must be named NAME.conflist (a runtime reads other names as a single plugin's configuration)")]
    ConflistName { path: PathBuf },
    #[error("the conflist {path}: {source}")]
    Conflist {
        path: PathBuf,
        source: ConflistError,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A file put in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub path: PathBuf,
    pub bytes: usize,
    pub mode: u32,
}

impl fmt::Display for Installed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "installed {} ({} bytes, mode {:04o})",
            self.path.display(),
            self.bytes,
            self.mode
        )
    }
}

/// The plugin's file name on the node: the IPAM type the conflist names,
/// whatever the source file is called.
const PLUGIN_NAME: &str = IPAM_TYPE;
const PLUGIN_MODE: u32 = 0o755;
const CONFLIST_MODE: u32 = 0o644;

/// A conflist read from its file and checked: its file name, its bytes and
/// what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflistFile {
    pub name: String,
    pub bytes: Vec<u8>,
    pub summary: Conflist,
}

/// Reads the conflist at `path` and checks it: a `NAME.conflist` file name
/// and a conflist the agent serves (`cni_conflist::check`).
pub fn read_conflist(path: &Path) -> Result<ConflistFile, InstallCniError> {
    let name = path
        .file_name()
        .filter(|name| Path::new(name).extension().is_some_and(|e| e == "conflist"))
        .and_then(|name| name.to_str())
        .ok_or_else(|| InstallCniError::ConflistName {
            path: path.to_path_buf(),
        })?
        .to_string();
    let bytes = read(path)?;
    let summary = cni_conflist::check(&bytes).map_err(|source| InstallCniError::Conflist {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(ConflistFile {
        name,
        bytes,
        summary,
    })
}

/// Reads and checks the plugin (and the conflist, when given), then
/// installs the plugin and the conflist; what it installed, in that order,
/// and the conflist's summary.
pub fn install(
    args: &InstallCniArgs,
) -> Result<(Vec<Installed>, Option<Conflist>), InstallCniError> {
    let plugin = read(&args.plugin)?;
    if !plugin.starts_with(b"\x7fELF") {
        return Err(InstallCniError::PluginNotElf {
            path: args.plugin.clone(),
        });
    }
    let conflist = args.conflist.as_deref().map(read_conflist).transpose()?;
    let mut installed = vec![replace(
        &args.cni_bin_dir,
        PLUGIN_NAME.as_ref(),
        &plugin,
        PLUGIN_MODE,
    )?];
    if let Some(conflist) = &conflist {
        installed.push(install_conflist(&args.cni_conf_dir, conflist)?);
    }
    Ok((installed, conflist.map(|c| c.summary)))
}

/// Puts `conflist` in `dir` under its name, atomically.
pub fn install_conflist(dir: &Path, conflist: &ConflistFile) -> Result<Installed, InstallCniError> {
    replace(dir, conflist.name.as_ref(), &conflist.bytes, CONFLIST_MODE)
}

/// Removes `dir/name` if it is there, and makes the removal durable.
pub fn remove(dir: &Path, name: &str) -> Result<bool, InstallCniError> {
    let path = dir.join(name);
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |source| InstallCniError::Write { path, source }
    };
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(failed(&path)(e)),
    }
    File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(failed(dir))?;
    Ok(true)
}

/// The plugin's file name in the node's plugin directory.
pub fn plugin_name() -> &'static str {
    PLUGIN_NAME
}

fn read(path: &Path) -> Result<Vec<u8>, InstallCniError> {
    std::fs::read(path).map_err(|source| InstallCniError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Replaces `dir/name` with `bytes` of `mode` through `dir/.name.new`; on
/// failure the temporary file is removed and the target left as it was.
fn replace(
    dir: &Path,
    name: &std::ffi::OsStr,
    bytes: &[u8],
    mode: u32,
) -> Result<Installed, InstallCniError> {
    let target = dir.join(name);
    let mut temporary_name = OsString::from(".");
    temporary_name.push(name);
    temporary_name.push(".new");
    let temporary = dir.join(temporary_name);
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |source| InstallCniError::Write { path, source }
    };
    std::fs::create_dir_all(dir).map_err(failed(dir))?;
    let written = write_synced(&temporary, bytes, mode).map_err(failed(&temporary));
    let renamed =
        written.and_then(|()| std::fs::rename(&temporary, &target).map_err(failed(&target)));
    if renamed.is_err() {
        // Best effort: the error that matters is the one returned.
        let _ = std::fs::remove_file(&temporary);
    }
    renamed?;
    // The rename is durable only once the directory is.
    File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(failed(dir))?;
    Ok(Installed {
        path: target,
        bytes: bytes.len(),
        mode,
    })
}

/// A new file at `path` holding `bytes` with exactly `mode` (whatever the
/// umask), on disk before this returns. A leftover from an interrupted
/// install is replaced.
fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    file.write_all(bytes)?;
    file.set_permissions(Permissions::from_mode(mode))?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFLIST: &str = r#"{"cniVersion": "1.0.0", "name": "ipam",
        "plugins": [{"type": "ptp", "ipam": {"type": "ipam-cni"}}]}"#;
    const PLUGIN: &[u8] = b"\x7fELF plugin";

    struct Node {
        _dir: tempfile::TempDir,
        args: InstallCniArgs,
    }

    /// A plugin and a conflist in `image/`, the CNI directories in `host/`
    /// (not made yet).
    fn node(conflist_name: &str, conflist: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("image");
        std::fs::create_dir(&image).unwrap();
        std::fs::write(image.join("ipam-cni"), PLUGIN).unwrap();
        std::fs::write(image.join(conflist_name), conflist).unwrap();
        let args = InstallCniArgs {
            plugin: image.join("ipam-cni"),
            conflist: Some(image.join(conflist_name)),
            cni_bin_dir: dir.path().join("host/opt/cni/bin"),
            cni_conf_dir: dir.path().join("host/etc/cni/net.d"),
        };
        Node { _dir: dir, args }
    }

    fn listing(dir: &Path) -> Vec<(String, u32)> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .map(|e| {
                        let e = e.unwrap();
                        let mode = e.metadata().unwrap().permissions().mode() & 0o7777;
                        (e.file_name().to_string_lossy().into_owned(), mode)
                    })
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn both_files_land_with_their_modes_and_nothing_else() {
        let node = node("05-ipam.conflist", CONFLIST);
        // An earlier plugin and a leftover of an interrupted install.
        std::fs::create_dir_all(&node.args.cni_bin_dir).unwrap();
        std::fs::write(node.args.cni_bin_dir.join("ipam-cni"), "old").unwrap();
        std::fs::write(node.args.cni_bin_dir.join(".ipam-cni.new"), "half").unwrap();
        let (installed, summary) = install(&node.args).unwrap();
        assert_eq!(summary.expect("the conflist's").plugin_types, ["ptp"]);
        assert_eq!(
            installed,
            [
                Installed {
                    path: node.args.cni_bin_dir.join("ipam-cni"),
                    bytes: PLUGIN.len(),
                    mode: 0o755
                },
                Installed {
                    path: node.args.cni_conf_dir.join("05-ipam.conflist"),
                    bytes: CONFLIST.len(),
                    mode: 0o644
                },
            ]
        );
        assert_eq!(
            listing(&node.args.cni_bin_dir),
            [("ipam-cni".into(), 0o755)]
        );
        assert_eq!(
            listing(&node.args.cni_conf_dir),
            [("05-ipam.conflist".into(), 0o644)]
        );
        assert_eq!(
            std::fs::read(node.args.cni_bin_dir.join("ipam-cni")).unwrap(),
            PLUGIN
        );
        assert_eq!(
            std::fs::read_to_string(node.args.cni_conf_dir.join("05-ipam.conflist")).unwrap(),
            CONFLIST
        );
    }

    #[test]
    fn without_a_conflist_the_plugin_alone_is_installed() {
        let mut node = node("05-ipam.conflist", CONFLIST);
        node.args.conflist = None;
        let (installed, summary) = install(&node.args).unwrap();
        assert_eq!(summary, None);
        assert_eq!(installed.len(), 1);
        assert_eq!(
            listing(&node.args.cni_bin_dir),
            [("ipam-cni".into(), 0o755)]
        );
        assert!(listing(&node.args.cni_conf_dir).is_empty());
        // remove: there, then not.
        assert!(remove(&node.args.cni_bin_dir, plugin_name()).unwrap());
        assert!(!remove(&node.args.cni_bin_dir, plugin_name()).unwrap());
        assert!(listing(&node.args.cni_bin_dir).is_empty());
    }

    #[test]
    fn bad_input_writes_nothing() {
        let no_ipam = r#"{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "ptp"}]}"#;
        type Expected = fn(&InstallCniError) -> bool;
        let cases: [(&str, &str, Expected); 3] = [
            ("05-ipam.conflist", no_ipam, |e| {
                matches!(
                    e,
                    InstallCniError::Conflist {
                        source: ConflistError::NoIpamCni,
                        ..
                    }
                )
            }),
            ("05-ipam.conf", CONFLIST, |e| {
                matches!(e, InstallCniError::ConflistName { .. })
            }),
            ("05-ipam.conflist", "{", |e| {
                matches!(
                    e,
                    InstallCniError::Conflist {
                        source: ConflistError::NotJson(_),
                        ..
                    }
                )
            }),
        ];
        for (name, conflist, expected) in cases {
            let node = node(name, conflist);
            let error = install(&node.args).unwrap_err();
            assert!(expected(&error), "{name}: {error}");
            assert!(listing(&node.args.cni_bin_dir).is_empty(), "{name}");
            assert!(listing(&node.args.cni_conf_dir).is_empty(), "{name}");
        }
        let mut node = node("05-ipam.conflist", CONFLIST);
        std::fs::write(&node.args.plugin, "#!/bin/sh\n").unwrap();
        let error = install(&node.args).unwrap_err();
        assert!(
            matches!(error, InstallCniError::PluginNotElf { .. }),
            "{error}"
        );
        node.args.plugin = node.args.plugin.with_file_name("missing");
        let error = install(&node.args).unwrap_err();
        assert!(matches!(error, InstallCniError::Read { .. }), "{error}");
        assert!(error.to_string().contains("missing"), "{error}");
        assert!(listing(&node.args.cni_bin_dir).is_empty());
    }
}
