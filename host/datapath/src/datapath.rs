//! The loaded program and its maps, and what the agent does with them.

use std::io;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use std::collections::BTreeMap;

use agent_ebpf_common::{
    EndpointCounters, EndpointEntry, EndpointInfo, EndpointKey, MapLayout, COUNTERS_MAP,
    ENDPOINTS_MAP,
};
use aya::maps::{MapData, MapError, MapInfo, PerCpuHashMap, PerCpuValues};
use aya::programs::links::{FdLink, LinkError, PinnedLink};
use aya::programs::tc::{SchedClassifierLink, TcAttachOptions};
use aya::programs::{LinkOrder, ProgramError, SchedClassifier, TcAttachType};
use aya::sys::SyscallError;
use aya::{Ebpf, EbpfLoader, TestRun, TestRunOptions};

use crate::address::endpoint_key;
use crate::host_addresses::{plan_host_sync, HostSync};
use crate::layout::{check_pin, MapOutcome, PinCheck};
use crate::pod::{CountersPod, EntryPod, KeyPod};
use crate::{DatapathError, PinDir};

/// The tc program's name in the object.
pub const PROGRAM: &str = "from_endpoint";

/// The maps this build defines, with their expected layouts.
const MAPS: [(&str, MapLayout); 2] = [
    (ENDPOINTS_MAP, MapLayout::ENDPOINTS),
    (COUNTERS_MAP, MapLayout::COUNTERS),
];

/// Where the kernel says which CPUs may exist (aya's CPU count).
const POSSIBLE_CPUS: &str = "/sys/devices/system/cpu/possible";

/// Where `ifindex` sits in `struct __sk_buff` (uapi, so fixed): the only
/// context field a test run sets.
const SKB_IFINDEX_OFFSET: usize = 40;

/// What loading did to each pinned map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadReport {
    pub maps: Vec<(&'static str, MapOutcome)>,
}

impl LoadReport {
    /// The maps that were re-created because their pin had another layout.
    pub fn recreated(&self) -> impl Iterator<Item = (&'static str, MapLayout)> + '_ {
        self.maps
            .iter()
            .filter_map(|(name, outcome)| match outcome {
                MapOutcome::Recreated { found } => Some((*name, *found)),
                _ => None,
            })
    }
}

/// How [`Datapath::attach`] got the program onto an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attached {
    /// A new tcx link, now pinned.
    NewLink,
    /// The link pinned by an earlier run now runs this program (swapped
    /// atomically: no packet goes unchecked).
    ReplacedInPinnedLink,
}

/// One `BPF_PROG_TEST_RUN` of the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestRunOutcome {
    /// The program's return value (`TC_ACT_*`).
    pub action: i32,
    /// The kernel's average time per run.
    pub per_run: Duration,
}

/// The datapath program, loaded, with its pinned maps open.
pub struct Datapath {
    ebpf: Ebpf,
    pins: PinDir,
    endpoints: PerCpuHashMap<MapData, KeyPod, EntryPod>,
    counters: PerCpuHashMap<MapData, u32, CountersPod>,
    /// The kernel's possible CPUs: how many values a per-CPU write takes.
    cpus: usize,
}

impl Datapath {
    /// Loads the object (built by `cargo xtask ebpf`) into the kernel,
    /// with its maps pinned in `pins`. A pinned map is reused only if its
    /// type, key size, value size and max entries are this build's;
    /// otherwise its pin is removed, the map re-created, and a warning
    /// logged. The report says which happened to each map. The folder must
    /// be on bpffs ([`crate::ensure_bpffs`]).
    pub fn load(object: &[u8], pins: PinDir) -> Result<(Self, LoadReport), DatapathError> {
        std::fs::create_dir_all(pins.path()).map_err(|e| DatapathError::io(pins.path(), e))?;
        let mut report = LoadReport { maps: Vec::new() };
        let map_paths: Vec<_> = MAPS.iter().map(|(name, _)| pins.map(name)).collect();
        for ((name, expected), path) in MAPS.iter().zip(&map_paths) {
            let check = check_pin(*expected, pinned_layout(path)?);
            if let PinCheck::Differs { found } = check {
                tracing::warn!(
                    map = name,
                    path = %path.display(),
                    ?found,
                    ?expected,
                    "pinned map has another layout; re-creating it empty"
                );
                std::fs::remove_file(path).map_err(|e| DatapathError::io(path, e))?;
            }
            report.maps.push((name, check.into()));
        }
        let mut loader = EbpfLoader::new();
        for ((name, _), path) in MAPS.iter().zip(&map_paths) {
            loader.map_pin_path(name, path.as_path());
        }
        let mut ebpf = loader.load(object).map_err(|e| DatapathError::Load {
            pins: pins.path().to_path_buf(),
            source: Box::new(e),
        })?;
        for ((name, expected), path) in MAPS.iter().zip(&map_paths) {
            let found = pinned_layout(path)?.unwrap_or(MapLayout {
                max_entries: 0,
                ..*expected
            });
            if found != *expected {
                return Err(DatapathError::LayoutAfterLoad {
                    name,
                    expected: *expected,
                    found,
                });
            }
        }
        let program: &mut SchedClassifier = classifier(ebpf.program_mut(PROGRAM))?;
        program
            .load()
            .map_err(|e| DatapathError::program(format!("loading {PROGRAM}"), e))?;
        let endpoints = take_map(&mut ebpf, ENDPOINTS_MAP)?;
        let counters = take_map(&mut ebpf, COUNTERS_MAP)?;
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| DatapathError::io(POSSIBLE_CPUS, e))?;
        Ok((
            Self {
                ebpf,
                pins,
                endpoints,
                counters,
                cpus,
            },
            report,
        ))
    }

    /// Attaches the program to `interface`'s ingress (a pod's host-side
    /// veth: what the pod sends) with a tcx link pinned under the pin
    /// folder, so it outlives this process. A link pinned there by an
    /// earlier run is reused, its program swapped for this one. Returns the
    /// interface's ifindex, the key of its counters.
    pub fn attach(&mut self, interface: &str) -> Result<(u32, Attached), DatapathError> {
        let ifindex = interface_index(interface)?;
        let pin = self.pins.link(ifindex);
        let what = format!("attaching {PROGRAM} to {interface} (ifindex {ifindex})");
        let program: &mut SchedClassifier = classifier(self.ebpf.program_mut(PROGRAM))?;
        match PinnedLink::from_pin(&pin) {
            Ok(pinned) => {
                let link = SchedClassifierLink::try_from(FdLink::from(pinned)).map_err(|e| {
                    DatapathError::Link {
                        what: format!("{what}: the link pinned at {}", pin.display()),
                        source: Box::new(e),
                    }
                })?;
                let id = program
                    .attach_to_link(link)
                    .map_err(|e| DatapathError::program(&what, e))?;
                // The pin keeps the link; this process's handle may go.
                drop(
                    program
                        .take_link(id)
                        .map_err(|e| DatapathError::program(&what, e))?,
                );
                Ok((ifindex, Attached::ReplacedInPinnedLink))
            }
            Err(LinkError::SyscallError(SyscallError { io_error, .. }))
                if io_error.kind() == io::ErrorKind::NotFound =>
            {
                let id = program
                    .attach_with_options(
                        interface,
                        TcAttachType::Ingress,
                        TcAttachOptions::TcxOrder(LinkOrder::default()),
                    )
                    .map_err(|e| DatapathError::program(&what, e))?;
                let link: FdLink = program
                    .take_link(id)
                    .map_err(|e| DatapathError::program(&what, e))?
                    .try_into()
                    .map_err(|e| DatapathError::Link {
                        what: what.clone(),
                        source: Box::new(e),
                    })?;
                let links = self.pins.links();
                std::fs::create_dir_all(&links).map_err(|e| DatapathError::io(&links, e))?;
                link.pin(&pin).map_err(|e| DatapathError::Io {
                    path: pin.clone(),
                    source: io::Error::other(e),
                })?;
                Ok((ifindex, Attached::NewLink))
            }
            Err(e) => Err(DatapathError::Link {
                what: format!("{what}: opening {}", pin.display()),
                source: Box::new(e),
            }),
        }
    }

    /// Removes the pins of other map layout versions beside this build's
    /// ([`PinDir::remove_other_versions`]: call it once this build's
    /// program is on every pod interface). Returns the folders removed.
    pub fn remove_other_versions(&self) -> Result<Vec<std::path::PathBuf>, DatapathError> {
        self.pins.remove_other_versions()
    }

    /// Detaches the program from the interface with this ifindex by
    /// removing its pinned link; false if none was pinned. The kernel
    /// releases the link (and so detaches) from a work queue a moment after;
    /// deleting the interface detaches it too.
    pub fn detach(&self, ifindex: u32) -> Result<bool, DatapathError> {
        let pin = self.pins.link(ifindex);
        match std::fs::remove_file(&pin) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(DatapathError::io(pin, e)),
        }
    }

    /// Writes (or overwrites) the endpoint entry for `address`. An entry
    /// already there keeps what it counted.
    pub fn set_endpoint(
        &mut self,
        address: IpAddr,
        endpoint: EndpointInfo,
    ) -> Result<(), DatapathError> {
        let key = KeyPod(endpoint_key(address));
        let what = || format!("writing the endpoint {address}");
        let mut values: Vec<EntryPod> = match self.endpoints.get(&key, 0) {
            Ok(per_cpu) => per_cpu.iter().copied().collect(),
            Err(MapError::KeyNotFound) => {
                vec![EntryPod(EndpointEntry::new(endpoint)); self.cpus]
            }
            Err(e) => return Err(DatapathError::map(what(), e)),
        };
        for value in &mut values {
            value.0.info = endpoint;
        }
        // Packets counted between the read above and this write are lost:
        // a window of one syscall, only when an entry is rewritten.
        self.write_endpoint(key, values, what)
    }

    /// Writes every CPU's value of an endpoint entry.
    fn write_endpoint(
        &mut self,
        key: KeyPod,
        values: Vec<EntryPod>,
        what: impl Fn() -> String,
    ) -> Result<(), DatapathError> {
        // Fails only if the kernel's CPU count cannot be read again.
        let values =
            PerCpuValues::try_from(values).map_err(|e| DatapathError::io(POSSIBLE_CPUS, e))?;
        self.endpoints
            .insert(key, values, 0)
            .map_err(|e| DatapathError::map(what(), e))
    }

    /// Removes the endpoint entry for `address`. Returns what it had
    /// counted, summed over CPUs (so a caller can keep it in its totals), or
    /// `None` if there was no entry.
    pub fn remove_endpoint(
        &mut self,
        address: IpAddr,
    ) -> Result<Option<EndpointCounters>, DatapathError> {
        let key = KeyPod(endpoint_key(address));
        let what = || format!("removing the endpoint {address}");
        let traffic = match self.endpoints.get(&key, 0) {
            Ok(per_cpu) => traffic(per_cpu.iter()),
            Err(MapError::KeyNotFound) => return Ok(None),
            Err(e) => return Err(DatapathError::map(what(), e)),
        };
        match self.endpoints.remove(&key) {
            Ok(()) => Ok(Some(traffic)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(DatapathError::map(what(), e)),
        }
    }

    /// Every entry of the endpoint map (the endpoint, as every CPU holds
    /// it).
    pub fn endpoints(&self) -> Result<Vec<(EndpointKey, EndpointInfo)>, DatapathError> {
        Ok(self
            .entries()?
            .into_iter()
            .map(|(key, info, _)| (key, info))
            .collect())
    }

    /// Every entry of the endpoint map with its traffic summed over CPUs.
    fn entries(&self) -> Result<Vec<(EndpointKey, EndpointInfo, EndpointCounters)>, DatapathError> {
        self.endpoints
            .iter()
            .map(|entry| {
                let (key, per_cpu) =
                    entry.map_err(|e| DatapathError::map("reading the endpoint map", e))?;
                let info = per_cpu
                    .iter()
                    .next()
                    .map(|first| first.0.info)
                    .unwrap_or_default();
                Ok((key.0, info, traffic(per_cpu.iter())))
            })
            .collect()
    }

    /// Brings the map's host entries to `host_addresses` (Cilium's
    /// `SyncHostIPs`): adds the missing ones with the host flag, removes
    /// those the host no longer has, leaves pods' entries alone. Returns
    /// what it changed.
    pub fn sync_host_addresses(
        &mut self,
        host_addresses: &[IpAddr],
    ) -> Result<HostSync, DatapathError> {
        let plan = plan_host_sync(&self.endpoints()?, host_addresses);
        for key in &plan.add {
            let values = vec![EntryPod(EndpointEntry::new(EndpointInfo::host())); self.cpus];
            self.write_endpoint(KeyPod(*key), values, || "writing a host address".into())?;
        }
        for key in &plan.remove {
            match self.endpoints.remove(&KeyPod(*key)) {
                Ok(()) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(DatapathError::map("removing a host address", e)),
            }
        }
        Ok(plan)
    }

    /// The counters of the interface with this ifindex, summed over CPUs:
    /// its own (drops, frames other than IP) and the traffic of the
    /// endpoint entries on it. `None` when it has neither.
    pub fn counters(&self, ifindex: u32) -> Result<Option<EndpointCounters>, DatapathError> {
        let mut total = match self.counters.get(&ifindex, 0) {
            Ok(per_cpu) => Some(sum(per_cpu.iter().map(|c| c.0))),
            Err(MapError::KeyNotFound) => None,
            Err(e) => {
                return Err(DatapathError::map(
                    format!("reading the counters of ifindex {ifindex}"),
                    e,
                ))
            }
        };
        for (_, info, traffic) in self.entries()? {
            if !info.is_host() && info.ifindex == ifindex {
                total.get_or_insert(EndpointCounters::ZERO).add(&traffic);
            }
        }
        Ok(total)
    }

    /// Every interface's counters, summed as [`Datapath::counters`] sums
    /// them.
    pub fn all_counters(&self) -> Result<Vec<(u32, EndpointCounters)>, DatapathError> {
        let mut by_interface: BTreeMap<u32, EndpointCounters> = BTreeMap::new();
        for entry in self.counters.iter() {
            let (ifindex, per_cpu) =
                entry.map_err(|e| DatapathError::map("reading the counter map", e))?;
            by_interface
                .entry(ifindex)
                .or_insert(EndpointCounters::ZERO)
                .add(&sum(per_cpu.iter().map(|c| c.0)));
        }
        for (_, info, traffic) in self.entries()? {
            if !info.is_host() {
                by_interface
                    .entry(info.ifindex)
                    .or_insert(EndpointCounters::ZERO)
                    .add(&traffic);
            }
        }
        Ok(by_interface.into_iter().collect())
    }

    /// Drops the counter map entry of an interface that is gone. Returns
    /// what it had counted, summed over CPUs (so a caller can keep it in its
    /// totals), or `None` if there was no entry. The traffic of endpoint
    /// entries on the interface is not in it: [`Datapath::remove_endpoint`]
    /// hands that back.
    pub fn forget_counters(
        &mut self,
        ifindex: u32,
    ) -> Result<Option<EndpointCounters>, DatapathError> {
        let what = || format!("removing the counters of ifindex {ifindex}");
        let counted = match self.counters.get(&ifindex, 0) {
            Ok(per_cpu) => sum(per_cpu.iter().map(|c| c.0)),
            Err(MapError::KeyNotFound) => return Ok(None),
            Err(e) => return Err(DatapathError::map(what(), e)),
        };
        match self.counters.remove(&ifindex) {
            Ok(()) => Ok(Some(counted)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(DatapathError::map(what(), e)),
        }
    }

    /// Runs the program on `frame` with `BPF_PROG_TEST_RUN`, `repeat` times,
    /// as if it arrived on the interface with this ifindex (which must exist
    /// in the caller's network namespace). Maps and counters are the live
    /// ones.
    pub fn test_run(
        &self,
        frame: &[u8],
        ifindex: u32,
        repeat: u32,
    ) -> Result<TestRunOutcome, DatapathError> {
        let program: &SchedClassifier = classifier(self.ebpf.program(PROGRAM))?;
        let mut context = [0u8; SKB_IFINDEX_OFFSET + 4];
        context[SKB_IFINDEX_OFFSET..].copy_from_slice(&ifindex.to_ne_bytes());
        let result = program
            .test_run(TestRunOptions {
                data_in: Some(frame),
                ctx_in: Some(&context),
                repeat,
                ..TestRunOptions::default()
            })
            .map_err(|e| {
                DatapathError::program(
                    format!(
                        "BPF_PROG_TEST_RUN of {PROGRAM} on a {}-byte frame",
                        frame.len()
                    ),
                    e,
                )
            })?;
        Ok(TestRunOutcome {
            action: result.return_value as i32,
            per_run: result.duration,
        })
    }
}

/// Whether a map operation failed for want of the key: aya says so as
/// `KeyNotFound` on lookups but as the syscall's ENOENT on deletes.
fn is_not_found(error: &MapError) -> bool {
    match error {
        MapError::KeyNotFound => true,
        MapError::SyscallError(SyscallError { io_error, .. }) => {
            io_error.kind() == io::ErrorKind::NotFound
        }
        _ => false,
    }
}

/// The program `Ebpf::program` or `Ebpf::program_mut` found, as the tc
/// classifier it is.
fn classifier<P, C>(program: Option<P>) -> Result<C, DatapathError>
where
    C: TryFrom<P, Error = ProgramError>,
{
    program
        .ok_or(DatapathError::Missing {
            what: "program",
            name: PROGRAM,
        })?
        .try_into()
        .map_err(|e| DatapathError::program(PROGRAM, e))
}

/// An endpoint entry's traffic, summed over CPUs.
fn traffic<'a>(per_cpu: impl Iterator<Item = &'a EntryPod>) -> EndpointCounters {
    sum(per_cpu.map(|entry| entry.0.traffic()))
}

fn sum(per_cpu: impl Iterator<Item = EndpointCounters>) -> EndpointCounters {
    let mut total = EndpointCounters::ZERO;
    for counters in per_cpu {
        total.add(&counters);
    }
    total
}

/// The layout of the map pinned at `path`, or `None` if nothing is.
fn pinned_layout(path: &Path) -> Result<Option<MapLayout>, DatapathError> {
    if !path.exists() {
        return Ok(None);
    }
    let unreadable = |source| DatapathError::PinnedMapInfo {
        path: path.to_path_buf(),
        source,
    };
    let info = MapInfo::from_pin(path).map_err(unreadable)?;
    let map_type = info.map_type().map_err(unreadable)?;
    Ok(Some(MapLayout {
        map_type: map_type as u32,
        key_size: info.key_size(),
        value_size: info.value_size(),
        max_entries: info.max_entries(),
    }))
}

fn take_map<M>(ebpf: &mut Ebpf, name: &'static str) -> Result<M, DatapathError>
where
    M: TryFrom<aya::maps::Map, Error = MapError>,
{
    let map = ebpf
        .take_map(name)
        .ok_or(DatapathError::Missing { what: "map", name })?;
    M::try_from(map).map_err(|e| DatapathError::map(name, e))
}

/// The ifindex of `name` in the caller's network namespace.
pub fn interface_index(name: &str) -> Result<u32, DatapathError> {
    let interface_error = |e: rustix::io::Errno| DatapathError::Interface {
        name: name.to_string(),
        source: e.into(),
    };
    let socket = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        None,
    )
    .map_err(interface_error)?;
    rustix::net::netdevice::name_to_index(&socket, name).map_err(interface_error)
}
