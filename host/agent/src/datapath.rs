//! The eBPF datapath on the node (`--datapath-object`): `ipam-datapath`'s
//! program loaded with its maps pinned under `<bpffs>/ipam-agent`, kept in
//! step with the allocations. The pinned endpoint map is the record of
//! which address sits behind which host-side veth, so a restarted agent
//! finds its endpoints where it left them; what is decided from it (which
//! entries no allocation holds any more) is plain functions below.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use futures::TryStreamExt;
use ipam_datapath::{
    ensure_bpffs, key_address, Attached, Bpffs, Datapath, DatapathError, EndpointCounters,
    EndpointInfo, EndpointKey, PinDir,
};
use rtnetlink::packet_route::address::AddressAttribute;

/// The folder under bpffs the agent pins in.
pub const PIN_FOLDER: &str = "ipam-agent";

#[derive(Debug, thiserror::Error)]
pub enum NodeDatapathError {
    #[error("reading the eBPF object {path}: {source}")]
    Object {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Datapath(#[from] DatapathError),
    #[error("listing the host's addresses over netlink: {0}")]
    HostAddresses(String),
    #[error("interface with ifindex {ifindex}: {source}")]
    Interface {
        ifindex: u32,
        source: std::io::Error,
    },
}

/// The pod entries of the endpoint map no allocation holds any more, with
/// their ifindex: what a restart removes after judging the saved
/// allocations.
pub fn stale_endpoints(
    entries: &[(EndpointKey, EndpointInfo)],
    held: &BTreeSet<IpAddr>,
) -> Vec<(IpAddr, u32)> {
    entries
        .iter()
        .filter(|(_, info)| !info.is_host())
        .filter_map(|(key, info)| Some((key_address(key)?, info.ifindex)))
        .filter(|(ip, _)| !held.contains(ip))
        .collect()
}

/// The pod entries that stay, by ifindex: the interfaces whose pinned link
/// gets this run's program.
pub fn kept_interfaces(
    entries: &[(EndpointKey, EndpointInfo)],
    held: &BTreeSet<IpAddr>,
) -> BTreeSet<u32> {
    entries
        .iter()
        .filter(|(_, info)| !info.is_host())
        .filter(|(key, _)| key_address(key).is_some_and(|ip| held.contains(&ip)))
        .map(|(_, info)| info.ifindex)
        .collect()
}

struct Inner {
    datapath: Datapath,
    /// The counters of interfaces detached since start, so the sums the
    /// metrics show never go down.
    retired: EndpointCounters,
}

/// The loaded datapath, shared by the allocator and the metrics.
pub struct NodeDatapath {
    inner: Mutex<Inner>,
}

/// What loading found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    pub bpffs: Bpffs,
    /// Maps whose pin had another layout and were re-created.
    pub recreated: Vec<&'static str>,
}

impl NodeDatapath {
    /// Mounts bpffs on `bpffs` if needed, and loads `object` with its maps
    /// pinned under `<bpffs>/ipam-agent` (reused when their layout is this
    /// build's).
    pub fn load(object: &Path, bpffs: &Path) -> Result<(Self, Loaded), NodeDatapathError> {
        let bytes = std::fs::read(object).map_err(|source| NodeDatapathError::Object {
            path: object.to_path_buf(),
            source,
        })?;
        let mounted = ensure_bpffs(bpffs)?;
        let (datapath, report) = Datapath::load(&bytes, PinDir::new(bpffs.join(PIN_FOLDER)))?;
        let recreated = report.recreated().map(|(name, _)| name).collect();
        Ok((
            Self {
                inner: Mutex::new(Inner {
                    datapath,
                    retired: EndpointCounters::ZERO,
                }),
            },
            Loaded {
                bpffs: mounted,
                recreated,
            },
        ))
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every change to the maps is one syscall: a panicking holder
        // leaves nothing half-written here.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the host's own addresses in the endpoint map.
    pub fn sync_host_addresses(&self, addresses: &[IpAddr]) -> Result<(), NodeDatapathError> {
        let sync = self.inner().datapath.sync_host_addresses(addresses)?;
        if !sync.add.is_empty() || !sync.remove.is_empty() {
            tracing::info!(
                added = sync.add.len(),
                removed = sync.remove.len(),
                "host addresses synced into the endpoint map"
            );
        }
        Ok(())
    }

    /// Syncs the host's addresses every `every`, for as long as the agent
    /// runs: addresses come and go with interfaces (Cilium re-syncs too).
    pub async fn keep_host_addresses(self: std::sync::Arc<Self>, every: std::time::Duration) {
        loop {
            tokio::time::sleep(every).await;
            let synced = match host_addresses().await {
                Ok(addresses) => self.sync_host_addresses(&addresses),
                Err(error) => Err(error),
            };
            if let Err(error) = synced {
                tracing::warn!(%error, "syncing the host's addresses into the endpoint map");
            }
        }
    }

    /// After a restart, with the allocations kept (address, host veth if
    /// known, interface number): removes the endpoints (and links) of
    /// addresses no longer held; writes the endpoint of each kept address
    /// whose veth is known and puts this run's program into its link (the
    /// swap in a pinned link is atomic: no packet goes unchecked), which
    /// also restores the endpoints of a re-created map; and gives this
    /// run's program to the links of kept entries without a known veth.
    /// Last, removes the pins another map layout version left (an older
    /// build's maps and links).
    pub fn restore(&self, held: &[(IpAddr, Option<&str>, u32)]) -> Result<(), NodeDatapathError> {
        let entries = self.inner().datapath.endpoints()?;
        let all: BTreeSet<IpAddr> = held.iter().map(|(ip, _, _)| *ip).collect();
        for (ip, _) in stale_endpoints(&entries, &all) {
            self.release(ip)?;
        }
        let mut relinked = BTreeSet::new();
        for (ip, veth, number) in held {
            let Some(veth) = veth else { continue };
            match self.attach(*ip, veth, *number) {
                Ok((ifindex, how)) => {
                    relinked.insert(ifindex);
                    tracing::info!(%ip, interface = veth, ifindex, ?how, "endpoint restored");
                }
                Err(NodeDatapathError::Datapath(DatapathError::Interface { .. })) => {
                    tracing::warn!(%ip, interface = veth, "the pod's host veth is gone: its endpoint waits for the runtime's DEL");
                }
                Err(error) => return Err(error),
            }
        }
        let unnamed: BTreeSet<IpAddr> = held
            .iter()
            .filter(|(_, veth, _)| veth.is_none())
            .map(|(ip, _, _)| *ip)
            .collect();
        for ifindex in kept_interfaces(&entries, &unnamed).difference(&relinked) {
            let name = interface_name(*ifindex)?;
            let (_, how) = self.inner().datapath.attach(&name)?;
            tracing::info!(interface = %name, ifindex, ?how, "endpoint's link kept");
        }
        // This run's program is on every kept interface now: an older
        // build's (another map layout, pinned beside ours) can go.
        for folder in self.inner().datapath.remove_other_versions()? {
            tracing::info!(
                folder = %folder.display(),
                "pins of another map layout removed; its program is detached"
            );
        }
        Ok(())
    }

    /// Writes `ip`'s endpoint entry for `host_ifname`, then puts the program
    /// there (in that order, so its first packet finds the entry).
    pub fn attach(
        &self,
        ip: IpAddr,
        host_ifname: &str,
        interface_number: u32,
    ) -> Result<(u32, Attached), NodeDatapathError> {
        let mut inner = self.inner();
        let ifindex = ipam_datapath::interface_index(host_ifname)?;
        inner
            .datapath
            .set_endpoint(ip, EndpointInfo::pod(ifindex, interface_number))?;
        let (attached_to, how) = inner.datapath.attach(host_ifname)?;
        if attached_to != ifindex {
            // The name moved to another interface in between.
            inner
                .datapath
                .set_endpoint(ip, EndpointInfo::pod(attached_to, interface_number))?;
        }
        Ok((attached_to, how))
    }

    /// Removes `ip`'s endpoint entry, and its interface's link and counters
    /// when no other endpoint uses that interface; nothing when `ip` has no
    /// pod entry (idempotent).
    pub fn release(&self, ip: IpAddr) -> Result<(), NodeDatapathError> {
        let mut inner = self.inner();
        let entries = inner.datapath.endpoints()?;
        let key = ipam_datapath::endpoint_key(ip);
        let Some(ifindex) = entries
            .iter()
            .find(|(k, info)| *k == key && !info.is_host())
            .map(|(_, info)| info.ifindex)
        else {
            return Ok(());
        };
        if let Some(traffic) = inner.datapath.remove_endpoint(ip)? {
            inner.retired.add(&traffic);
        }
        let shared = entries
            .iter()
            .any(|(k, info)| *k != key && !info.is_host() && info.ifindex == ifindex);
        if !shared {
            inner.datapath.detach(ifindex)?;
            // The interface's last endpoint entry is gone (its traffic
            // retired above): what is left to keep is its counter entry.
            if let Some(counters) = inner.datapath.forget_counters(ifindex)? {
                inner.retired.add(&counters);
            }
        }
        tracing::info!(%ip, ifindex, "endpoint removed");
        Ok(())
    }

    /// Every endpoint's counters summed, those of detached ones included.
    pub fn totals(&self) -> Result<EndpointCounters, NodeDatapathError> {
        let inner = self.inner();
        let mut total = inner.retired;
        for (_, counters) in inner.datapath.all_counters()? {
            total.add(&counters);
        }
        Ok(total)
    }
}

impl crate::metrics::DatapathTotals for NodeDatapath {
    fn totals(&self) -> Result<EndpointCounters, String> {
        NodeDatapath::totals(self).map_err(|e| e.to_string())
    }
}

/// The name of the interface with this ifindex in the agent's namespace.
fn interface_name(ifindex: u32) -> Result<String, NodeDatapathError> {
    let error = |e: rustix::io::Errno| NodeDatapathError::Interface {
        ifindex,
        source: e.into(),
    };
    let socket = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        None,
    )
    .map_err(error)?;
    rustix::net::netdevice::index_to_name(&socket, ifindex).map_err(error)
}

/// Every address on the host's interfaces (the agent's network namespace).
pub async fn host_addresses() -> Result<Vec<IpAddr>, NodeDatapathError> {
    let failed = |e: &dyn std::fmt::Display| NodeDatapathError::HostAddresses(e.to_string());
    let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| failed(&e))?;
    let driver = tokio::spawn(connection);
    let messages: Vec<_> = handle
        .address()
        .get()
        .execute()
        .try_collect()
        .await
        .map_err(|e| failed(&e))?;
    driver.abort();
    let mut addresses: Vec<IpAddr> = messages
        .iter()
        .flat_map(|message| message.attributes.iter())
        .filter_map(|attribute| match attribute {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
        .collect();
    addresses.sort();
    addresses.dedup();
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_datapath::endpoint_key;

    fn entry(ip: &str, info: EndpointInfo) -> (EndpointKey, EndpointInfo) {
        (endpoint_key(ip.parse().unwrap()), info)
    }

    fn held(ips: &[&str]) -> BTreeSet<IpAddr> {
        ips.iter().map(|ip| ip.parse().unwrap()).collect()
    }

    #[test]
    fn stale_and_kept() {
        let entries = vec![
            entry("10.0.1.1", EndpointInfo::host()),
            entry("10.0.1.5", EndpointInfo::pod(7, 1)),
            entry("10.0.1.6", EndpointInfo::pod(8, 1)),
            entry("fd00::6", EndpointInfo::pod(8, 1)),
        ];
        // (name, held, stale, kept ifindexes)
        type Row = (
            &'static str,
            &'static [&'static str],
            Vec<(&'static str, u32)>,
            Vec<u32>,
        );
        let table: Vec<Row> = vec![
            (
                "all held",
                &["10.0.1.5", "10.0.1.6", "fd00::6"],
                vec![],
                vec![7, 8],
            ),
            (
                "nothing held: host entries stay",
                &[],
                vec![("10.0.1.5", 7), ("10.0.1.6", 8), ("fd00::6", 8)],
                vec![],
            ),
            (
                "one of two on an interface",
                &["10.0.1.5", "fd00::6"],
                vec![("10.0.1.6", 8)],
                vec![7, 8],
            ),
            (
                "a held host address is no pod",
                &["10.0.1.1"],
                vec![("10.0.1.5", 7), ("10.0.1.6", 8), ("fd00::6", 8)],
                vec![],
            ),
        ];
        for (name, ips, stale, kept) in table {
            let held = held(ips);
            let want: Vec<(IpAddr, u32)> = stale
                .iter()
                .map(|(ip, i)| (ip.parse().unwrap(), *i))
                .collect();
            assert_eq!(stale_endpoints(&entries, &held), want, "{name}");
            assert_eq!(
                kept_interfaces(&entries, &held),
                kept.into_iter().collect::<BTreeSet<_>>(),
                "{name}"
            );
        }
    }
}
