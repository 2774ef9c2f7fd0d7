//! Test support for code that changes a host's network: throwaway named
//! network namespaces, running code inside them, and links to test with.
//!
//! - [`NetNs`] makes `/run/netns/<name>` as `ip netns add` does (so outside
//!   programs can enter it by path) and removes it on drop.
//! - [`NetNs::run`], [`NetNs::block_on`] and [`NetNs::run_future`] run a
//!   closure or a future on a new thread that has entered the namespace;
//!   netlink sockets opened there act on that namespace only.
//! - [`NetLinks`] makes veth pairs (one end moved into another namespace
//!   if asked) and sets MAC and IP addresses, up and down.
//! - [`require_root`] makes a test that needs all this fail loudly, with the
//!   reason, where it cannot run: tests never skip silently.
//!
//! Nothing here changes the namespace the tests were started in, other than
//! the files under `/run/netns`, unless asked to: [`NetLinks`] acts on the
//! namespace of the thread that connects, so connect inside a [`NetNs`].

mod error;
mod links;
mod namespace;

pub use error::NetnsError;
pub use links::NetLinks;
pub use namespace::{NetNs, NETNS_DIR};

/// Panics, saying why, unless this process is root and can make a network
/// namespace. Call it first in every test that uses this crate.
pub fn require_root() {
    if !rustix::process::geteuid().is_root() {
        panic!(
            "this test needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to make network \
             namespaces and links; run it as root"
        );
    }
    if let Err(e) = NetNs::create_unique("ipam-netns-probe") {
        panic!("this test needs to make network namespaces under {NETNS_DIR}, and could not: {e}");
    }
}
