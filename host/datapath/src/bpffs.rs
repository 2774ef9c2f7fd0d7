//! Making sure a folder is on bpffs before pinning there: pins outside bpffs
//! fail, and pins on a bpffs that is not mounted where expected would not
//! survive the way the agent's restarts rely on.

use std::path::Path;

use rustix::fs::statfs;
use rustix::mount::{mount, MountFlags};

use crate::DatapathError;

/// `BPF_FS_MAGIC`, bpffs's `f_type` in statfs.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// The usual bpffs mount point.
pub const DEFAULT_BPFFS: &str = "/sys/fs/bpf";

/// What [`ensure_bpffs`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bpffs {
    AlreadyMounted,
    /// Not mounted before; mounted now.
    Mounted,
}

/// Whether `path` is on bpffs.
pub fn is_bpffs(path: &Path) -> Result<bool, DatapathError> {
    let stat = statfs(path).map_err(|e| DatapathError::io(path, e.into()))?;
    #[allow(
        clippy::unnecessary_cast,
        reason = "f_type's width differs between targets"
    )]
    let f_type = stat.f_type as i64;
    Ok(f_type == BPF_FS_MAGIC)
}

/// Mounts bpffs on `path` (made if missing) unless it is bpffs already.
pub fn ensure_bpffs(path: &Path) -> Result<Bpffs, DatapathError> {
    std::fs::create_dir_all(path).map_err(|e| DatapathError::io(path, e))?;
    if is_bpffs(path)? {
        return Ok(Bpffs::AlreadyMounted);
    }
    mount("bpffs", path, "bpf", MountFlags::empty(), None).map_err(|e| {
        DatapathError::MountBpffs {
            path: path.to_path_buf(),
            source: e.into(),
        }
    })?;
    if is_bpffs(path)? {
        Ok(Bpffs::Mounted)
    } else {
        Err(DatapathError::NotBpffs {
            path: path.to_path_buf(),
        })
    }
}
