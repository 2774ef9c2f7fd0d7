use std::path::{Path, PathBuf};

use agent_ebpf_common::LAYOUT_VERSION;

/// The versioned folder on bpffs where the datapath pins its maps and links:
/// `<base>/v<LAYOUT_VERSION>/` with the maps by name and the tcx links under
/// `links/`. A build with another map layout bumps the version and starts
/// afresh beside the old folder instead of reading maps it does not
/// understand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinDir {
    versioned: PathBuf,
}

impl PinDir {
    /// Pins under `base` (a folder on bpffs, e.g. `/sys/fs/bpf/ipam`).
    pub fn new(base: impl AsRef<Path>) -> Self {
        Self {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
