//! What can go wrong making namespaces and links, each naming what was being done.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("network namespace name {name:?} is not a plain file name (empty, '.', '..', a '/' or a NUL in it)")]
    InvalidName { name: String },
    #[error("network namespace {path} already exists")]
    Exists { path: PathBuf },
    #[error("{doing}: {source}")]
    Io {
        doing: String,
        #[source]
        source: io::Error,
    },
    #[error("netlink: {doing}: {source}")]
    Netlink {
        doing: String,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("no link named {name:?} in this network namespace")]
    LinkNotFound { name: String },
}

impl NetnsError {
    pub(crate) fn io(doing: impl Into<String>) -> impl FnOnce(io::Error) -> Self {
        let doing = doing.into();
        move |source| Self::Io { doing, source }
    }

    pub(crate) fn netlink(doing: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> Self {
        let doing = doing.into();
        move |source| Self::Netlink { doing, source }
    }
}
