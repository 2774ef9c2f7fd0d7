use std::path::PathBuf;

use agent_ebpf_common::MapLayout;

/// What went wrong loading, attaching or driving the datapath program.
#[derive(Debug, thiserror::Error)]
pub enum DatapathError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("mounting bpffs on {path}: {source} (needs CAP_SYS_ADMIN)")]
    MountBpffs {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not on bpffs and something else is mounted there")]
    NotBpffs { path: PathBuf },
    #[error("reading the pinned map {path}: {source}")]
    PinnedMapInfo {
        path: PathBuf,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("loading the eBPF object (maps pinned under {pins}): {source}")]
    Load {
        pins: PathBuf,
        #[source]
        source: Box<aya::EbpfError>,
    },
    #[error("the eBPF object has no {what} named {name}")]
    Missing {
        what: &'static str,
        name: &'static str,
    },
    #[error("{what}: {source}")]
    Program {
        what: String,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    #[error("{what}: {source}")]
    Map {
        what: String,
        #[source]
        source: Box<aya::maps::MapError>,
    },
    #[error("{what}: {source}")]
    Link {
        what: String,
        #[source]
        source: Box<aya::programs::links::LinkError>,
    },
    #[error("interface {name:?}: {source}")]
    Interface {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the map {name} the loader made does not have the layout it was asked for: \
         expected {expected:?}, found {found:?}"
    )]
    LayoutAfterLoad {
        name: &'static str,
        expected: MapLayout,
        found: MapLayout,
    },
}

impl DatapathError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn map(what: impl Into<String>, source: aya::maps::MapError) -> Self {
        Self::Map {
            what: what.into(),
            source: Box::new(source),
        }
    }

    pub(crate) fn program(what: impl Into<String>, source: aya::programs::ProgramError) -> Self {
        Self::Program {
            what: what.into(),
            source: Box::new(source),
        }
    }
}
