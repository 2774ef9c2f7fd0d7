//! A named network namespace that lives as long as its [`NetNs`] value.
//!
//! Made the way `ip netns add` makes one: an empty file under `/run/netns`
//! onto which the new namespace's `/proc/thread-self/ns/net` is bind-mounted,
//! so the namespace outlives the thread that made it and outside programs can
//! enter it by path (`ip netns exec <name>`, `nsenter --net=<path>`).

use std::fs::{File, OpenOptions};
use std::future::Future;
use std::os::fd::AsFd;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use rustix::mount::{mount_bind, unmount, UnmountFlags};
use rustix::thread::{move_into_link_name_space, unshare_unsafe, LinkNameSpaceType, UnshareFlags};

use crate::NetnsError;

/// Where named namespaces are bind-mounted, as iproute2 does.
pub const NETNS_DIR: &str = "/run/netns";

/// Tells apart the namespaces one test process makes with the same prefix.
static NEXT_UNIQUE: AtomicU32 = AtomicU32::new(0);

/// A named network namespace, unmounted and its file removed on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
    path: PathBuf,
}

impl NetNs {
    /// Creates the namespace `/run/netns/<name>`; fails if it exists.
    pub fn create(name: &str) -> Result<Self, NetnsError> {
        if !is_plain_file_name(name) {
            return Err(NetnsError::InvalidName {
                name: name.to_owned(),
            });
        }
        std::fs::create_dir_all(NETNS_DIR)
            .map_err(NetnsError::io(format!("creating {NETNS_DIR}")))?;
        let path = Path::new(NETNS_DIR).join(name);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(NetnsError::Exists { path })
            }
            Err(e) => return Err(NetnsError::io(format!("creating {}", path.display()))(e)),
        }
        // From here on, dropping `ns` undoes whatever part was done.
        let ns = Self {
            name: name.to_owned(),
            path,
        };
        let target = ns.path.clone();
        // unshare() moves only the calling thread, so a throwaway thread makes
        // the namespace and pins it with the bind mount; the caller's thread
        // stays where it was.
        let made = std::thread::spawn(move || -> std::io::Result<()> {
            // SAFETY: the flags hold CLONE_NEWNET only. rustix marks unshare
            // unsafe for CLONE_FILES, which would split the fd table between
            // threads; a new network namespace leaves the fd table shared.
            unsafe { unshare_unsafe(UnshareFlags::NEWNET) }?;
            mount_bind("/proc/thread-self/ns/net", &target)?;
            Ok(())
        })
        .join();
        match made {
            Ok(Ok(())) => Ok(ns),
            Ok(Err(e)) => Err(NetnsError::io(format!(
                "making network namespace {} (unshare and bind mount)",
                ns.path.display()
            ))(e)),
            Err(panic) => panic::resume_unwind(panic),
        }
    }

    /// Creates a namespace named `<prefix>-<pid>-<n>`, unique within this
    /// process and apart from other processes' by the pid.
    pub fn create_unique(prefix: &str) -> Result<Self, NetnsError> {
        let n = NEXT_UNIQUE.fetch_add(1, Ordering::Relaxed);
        Self::create(&format!("{prefix}-{}-{n}", std::process::id()))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bind mount, for `setns` or for outside programs.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the namespace file; its fd can be given to `setns` or used to
    /// move a link into the namespace.
    pub fn open(&self) -> Result<File, NetnsError> {
        File::open(&self.path).map_err(NetnsError::io(format!("opening {}", self.path.display())))
    }

    /// Runs `f` on a new thread inside the namespace and returns what it
    /// returns; a panic in `f` is resumed on the caller's thread.
    pub fn run<T, F>(&self, f: F) -> Result<T, NetnsError>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        let file = self.open()?;
        let path = &self.path;
        std::thread::scope(|scope| {
            let joined = scope
                .spawn(move || {
                    enter(&file, path)?;
                    Ok(f())
                })
                .join();
            joined.unwrap_or_else(|panic| panic::resume_unwind(panic))
        })
    }

    /// Runs the future made by `make` to completion on a new thread inside
    /// the namespace, on a current-thread tokio runtime of its own (so
    /// netlink sockets it opens belong to the namespace). Blocks the caller;
    /// from async code use [`NetNs::run_future`].
    pub fn block_on<T, F, Fut>(&self, make: F) -> Result<T, NetnsError>
    where
        F: FnOnce() -> Fut + Send,
        Fut: Future<Output = T>,
        T: Send,
    {
        self.run(|| Ok(current_thread_runtime()?.block_on(make())))?
    }

    /// Like [`NetNs::block_on`], but awaits the namespace's thread instead
    /// of blocking the caller, for use inside an async test.
    pub async fn run_future<T, F, Fut>(&self, make: F) -> Result<T, NetnsError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T>,
        T: Send + 'static,
    {
        let file = self.open()?;
        let path = self.path.clone();
        let (done, outcome) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let ran = panic::catch_unwind(AssertUnwindSafe(|| -> Result<T, NetnsError> {
                enter(&file, &path)?;
                Ok(current_thread_runtime()?.block_on(make()))
            }));
            // The receiver is gone only if the caller stopped waiting.
            let _ = done.send(ran);
        });
        match outcome.await {
            Ok(Ok(result)) => result,
            Ok(Err(panic)) => panic::resume_unwind(panic),
            // Only if the thread died outside catch_unwind, e.g. while
            // unwinding a panic's payload.
            Err(_) => Err(NetnsError::Io {
                doing: format!("running a future in namespace {}", self.name),
                source: std::io::Error::other("the namespace thread ended without a result"),
            }),
        }
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // A lazy unmount succeeds even while a thread is still inside; the
        // namespace itself goes away when its last user leaves. A mount that
        // was never made (creation failed half-way) gives EINVAL: nothing to undo.
        if let Err(e) = unmount(&self.path, UnmountFlags::DETACH) {
            if e != rustix::io::Errno::INVAL {
                eprintln!("ipam-netns: unmounting {}: {e}", self.path.display());
            }
        }
        if let Err(e) = std::fs::remove_file(&self.path) {
            eprintln!("ipam-netns: removing {}: {e}", self.path.display());
        }
    }
}

fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

/// Moves the calling thread into the network namespace open as `file`.
fn enter(file: &File, path: &Path) -> Result<(), NetnsError> {
    move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network)).map_err(|e| {
        NetnsError::io(format!("entering network namespace {}", path.display()))(e.into())
    })
}

fn current_thread_runtime() -> Result<tokio::runtime::Runtime, NetnsError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(NetnsError::io(
            "building a tokio runtime for the namespace thread",
        ))
}

#[cfg(test)]
mod tests {
    use super::is_plain_file_name;

    #[test]
    fn namespace_names_must_be_plain_file_names() {
        let cases = [
            ("pod-1", true),
            ("a.b", true),
            ("", false),
            (".", false),
            ("..", false),
            ("a/b", false),
            ("../x", false),
            ("a\0b", false),
        ];
        for (name, plain) in cases {
            assert_eq!(is_plain_file_name(name), plain, "{name:?}");
        }
    }
}
