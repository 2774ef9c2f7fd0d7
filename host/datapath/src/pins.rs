use std::path::{Path, PathBuf};

use agent_ebpf_common::LAYOUT_VERSION;

use crate::DatapathError;

/// The versioned folder on bpffs where the datapath pins its maps and links:
/// `<base>/v<LAYOUT_VERSION>/` with the maps by name and the tcx links under
/// `links/`. A build with another map layout bumps the version and starts
/// afresh beside the old folder instead of reading maps it does not
/// understand; once its own links are on the interfaces it removes the
/// old folder ([`PinDir::remove_other_versions`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinDir {
    base: PathBuf,
    versioned: PathBuf,
}

impl PinDir {
    /// Pins under `base` (a folder on bpffs, e.g. `/sys/fs/bpf/ipam`).
    pub fn new(base: impl AsRef<Path>) -> Self {
        Self {
            base: base.as_ref().to_path_buf(),
            versioned: base.as_ref().join(format!("v{LAYOUT_VERSION}")),
        }
    }

    /// `<base>/v<LAYOUT_VERSION>`.
    pub fn path(&self) -> &Path {
        &self.versioned
    }

    /// Where the map named `name` is pinned.
    pub fn map(&self, name: &str) -> PathBuf {
        self.versioned.join(name)
    }

    pub fn links(&self) -> PathBuf {
        self.versioned.join("links")
    }

    /// Where the tcx link on the interface with this ifindex is pinned.
    pub fn link(&self, ifindex: u32) -> PathBuf {
        self.links().join(format!("tcx-ingress-{ifindex}"))
    }

    /// Removes the folders other layout versions pinned in beside this
    /// one, and returns them. Unpinning a map frees it once no program
    /// holds it; unpinning a link detaches that build's program from its
    /// interface. So call this after this build's program is on every
    /// interface it should be: until then the older program keeps checking
    /// those pods (with both attached, a packet passes only if both pass
    /// it, and both pass a pod's own address).
    pub fn remove_other_versions(&self) -> Result<Vec<PathBuf>, DatapathError> {
        let entries = match std::fs::read_dir(&self.base) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(DatapathError::io(&self.base, e)),
        };
        let mut removed = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| DatapathError::io(&self.base, e))?;
            let name = entry.file_name();
            if !is_other_version(&name.to_string_lossy()) {
                continue;
            }
            let path = entry.path();
            std::fs::remove_dir_all(&path).map_err(|e| DatapathError::io(&path, e))?;
            removed.push(path);
        }
        removed.sort();
        Ok(removed)
    }
}

/// Whether a folder name under the pin base is another layout version's
/// (`v` and a number other than this build's); anything else there is not
/// ours to remove.
pub fn is_other_version(name: &str) -> bool {
    name.strip_prefix('v')
        .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|digits| digits.parse::<u32>().ok())
        .is_some_and(|version| version != LAYOUT_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_versions_are_recognised() {
        let current = format!("v{LAYOUT_VERSION}");
        let other = format!("v{}", LAYOUT_VERSION + 1);
        let cases: &[(&str, bool)] = &[
            (&current, false),
            ("v1", LAYOUT_VERSION != 1),
            (&other, true),
            ("v", false),
            ("v1x", false),
            ("vx", false),
            ("links", false),
            ("1", false),
            ("v99999999999", false),
        ];
        for (name, want) in cases {
            assert_eq!(is_other_version(name), *want, "{name}");
        }
    }

    #[test]
    fn paths_are_versioned() {
        let pins = PinDir::new("/sys/fs/bpf/ipam");
        let version = format!("/sys/fs/bpf/ipam/v{LAYOUT_VERSION}");
        assert_eq!(pins.path(), Path::new(&version));
        assert_eq!(
            pins.map("ENDPOINTS"),
            Path::new(&format!("{version}/ENDPOINTS"))
        );
        assert_eq!(
            pins.link(7),
            Path::new(&format!("{version}/links/tcx-ingress-7"))
        );
    }
}
