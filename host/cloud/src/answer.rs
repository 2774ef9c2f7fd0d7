//! Checks of what a provider answers, before anything of it is believed. A
//! provider is third-party code: an address outside its subnet, one address
//! on two interfaces or an assign-ips answer other than asked would
//! otherwise flow into a CiliumNode's pool. Each check names the field and
//! what is wrong with it ([`BadField`]); the provider runtime refuses such
//! answers (a bad instance is left out of a listing, a bad mutation answer
//! is an error) and the conformance suite runs the same checks.
//!
//! What an answer is checked against (the networks of subnets and VPCs, the
//! subnet of each interface) is what the provider itself answered before:
//! [`KnownNetworks`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use crate::model::{
    Assigned, CreateInterfaceRequest, Instance, InstanceLimits, IpRequest, NetworkInterface,
    Subnet, Vpc,
};
use crate::Operation;

/// What kind of thing is wrong with an answer (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Problem {
    /// An address or network that does not parse, or has bits set past
    /// its length.
    Unparsable,
    /// An address or prefix outside its interface's subnet (or VPC).
    OutsideNetwork,
    /// One address on two interfaces, or twice on one.
    DuplicateAddress,
    /// Two interfaces of one instance at one device index.
    DuplicateIndex,
    /// An interface attached elsewhere than the instance it is listed
    /// under or was created for.
    OtherInstance,
    /// Created at another device index than asked.
    OtherIndex,
    /// More, fewer or other addresses than asked.
    NotAsked,
    /// Limits that allow nothing.
    ZeroLimit,
}

impl Problem {
    pub const fn label(self) -> &'static str {
        match self {
            Problem::Unparsable => "unparsable",
            Problem::OutsideNetwork => "outside-network",
            Problem::DuplicateAddress => "duplicate-address",
            Problem::DuplicateIndex => "duplicate-index",
            Problem::OtherInstance => "other-instance",
            Problem::OtherIndex => "other-index",
            Problem::NotAsked => "not-asked",
            Problem::ZeroLimit => "zero-limit",
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.label())
    }
}

/// One field of an answer that cannot be believed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {detail}")]
pub struct BadField {
    pub problem: Problem,
    /// Where in the answer, e.g. `instances[i-1].interfaces[eni-2].addresses[3]`.
    pub field: String,
    pub detail: String,
}

impl BadField {
    pub fn new(problem: Problem, field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            problem,
            field: field.into(),
            detail: detail.into(),
        }
    }
}

/// Told of every answer refused (a metrics registry counts them).
pub trait RefusalSink: Send + Sync {
    fn refused(&self, provider: &str, operation: Operation, bad: &BadField);
}

// The field of an answer is named only when it is wrong: a listing holds
// hundreds of addresses, and naming each would cost more than checking it.

/// `text` as an address, or why not.
pub fn parse_address(field: impl FnOnce() -> String, text: &str) -> Result<Ipv4Addr, BadField> {
    text.parse().map_err(|_| {
        BadField::new(
            Problem::Unparsable,
            field(),
            format!("{text:?} is not an IPv4 address"),
        )
    })
}

/// `text` as a network in CIDR notation with no bits set past its length,
/// or why not.
pub fn parse_network(field: impl FnOnce() -> String, text: &str) -> Result<Ipv4Net, BadField> {
    match text.parse::<Ipv4Net>() {
        Ok(network) => canonical(field, network),
        Err(_) => Err(BadField::new(
            Problem::Unparsable,
            field(),
            format!("{text:?} is not an IPv4 network (a.b.c.d/n)"),
        )),
    }
}

/// The network of `address` and `length`, refused if bits are set past the
/// length or the length is over 32.
pub fn network(
    field: impl FnOnce() -> String,
    address: Ipv4Addr,
    length: u8,
) -> Result<Ipv4Net, BadField> {
    match Ipv4Net::new(address, length) {
        Ok(network) => canonical(field, network),
        Err(_) => Err(BadField::new(
            Problem::Unparsable,
            field(),
            format!("{address}/{length}: a length over 32"),
        )),
    }
}

fn canonical(field: impl FnOnce() -> String, network: Ipv4Net) -> Result<Ipv4Net, BadField> {
    if network.trunc() == network {
        Ok(network)
    } else {
        Err(BadField::new(
            Problem::Unparsable,
            field(),
            format!(
                "{network} has bits set past its length (the network is {})",
                network.trunc()
            ),
        ))
    }
}

/// The networks a provider answered before: what its interfaces' addresses
/// are checked against. An interface of a subnet the provider never listed
/// is checked against its VPC's networks; of neither, not at all.
#[derive(Debug, Clone, Default)]
pub struct KnownNetworks {
    subnets: HashMap<String, Ipv4Net>,
    vpcs: HashMap<String, Vec<Ipv4Net>>,
    /// The subnet of each interface listed so far.
    interface_subnets: HashMap<String, String>,
}

impl KnownNetworks {
    /// What a full get-subnets listing says: the subnets now.
    pub fn learn_subnets(&mut self, subnets: &[Subnet]) {
        self.subnets = subnets.iter().map(|s| (s.id.clone(), s.cidr)).collect();
    }

    /// What a full get-vpcs listing says: the VPCs now.
    pub fn learn_vpcs(&mut self, vpcs: &[Vpc]) {
        self.vpcs = vpcs
            .iter()
            .map(|v| (v.id.clone(), v.cidrs.clone()))
            .collect();
    }

    /// Before learning a listing of every instance: interfaces it leaves
    /// out no longer exist (a long-running operator sees thousands come and
    /// go).
    pub fn forget_interfaces(&mut self) {
        self.interface_subnets.clear();
    }

    pub fn learn_interfaces<'a>(
        &mut self,
        interfaces: impl IntoIterator<Item = &'a NetworkInterface>,
    ) {
        for interface in interfaces {
            // Listings repeat what is known: only news costs an allocation.
            if self.interface_subnets.get(&interface.id) != Some(&interface.subnet_id) {
                self.interface_subnets
                    .insert(interface.id.clone(), interface.subnet_id.clone());
            }
        }
    }

    /// What an address of an interface in `subnet_id` of `vpc_id` must be
    /// inside: its subnet's network, else its VPC's networks.
    fn bounds<'a>(&'a self, subnet_id: &'a str, vpc_id: &'a str) -> Option<Bounds<'a>> {
        if let Some(network) = self.subnets.get(subnet_id) {
            return Some(Bounds {
                what: "subnet",
                id: subnet_id,
                networks: std::slice::from_ref(network),
            });
        }
        self.vpcs.get(vpc_id).map(|networks| Bounds {
            what: "VPC",
            id: vpc_id,
            networks,
        })
    }

    fn interface_bounds(&self, interface_id: &str) -> Option<Bounds<'_>> {
        let subnet = self.interface_subnets.get(interface_id)?;
        let network = self.subnets.get(subnet)?;
        Some(Bounds {
            what: "subnet",
            id: subnet,
            networks: std::slice::from_ref(network),
        })
    }
}

/// The networks an interface's addresses must be inside, named only when
/// one is not.
struct Bounds<'a> {
    what: &'static str,
    id: &'a str,
    networks: &'a [Ipv4Net],
}

impl fmt::Display for Bounds<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} (", self.what, self.id)?;
        for (n, network) in self.networks.iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{network}")?;
        }
        f.write_str(")")
    }
}

fn outside(
    field: impl FnOnce() -> String,
    what: impl fmt::Display,
    bounds: &Option<Bounds<'_>>,
    inside: impl Fn(&Ipv4Net) -> bool,
) -> Result<(), BadField> {
    match bounds {
        Some(bounds) if !bounds.networks.iter().any(inside) => Err(BadField::new(
            Problem::OutsideNetwork,
            field(),
            format!("{what} is outside its {bounds}"),
        )),
        _ => Ok(()),
    }
}

/// Where an address sits on an interface; made into a field name only when
/// something is wrong (a listing holds hundreds of addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Primary,
    Secondary(usize),
    Prefix(usize),
}

impl Slot {
    fn field(self, at: &str) -> String {
        match self {
            Slot::Primary => format!("{at}.primary-ip"),
            Slot::Secondary(n) => format!("{at}.addresses[{n}]"),
            Slot::Prefix(n) => format!("{at}.prefixes[{n}]"),
        }
    }
}

/// One address or prefix an interface (or an assign-ips answer) holds.
#[derive(Debug, Clone, Copy)]
enum Held {
    Address(Ipv4Addr),
    Prefix(Ipv4Net),
}

impl Held {
    /// As one sortable key: a prefix never equals an address, two equal
    /// keys are the same address (or the same prefix).
    fn key(self) -> u64 {
        let (address, length) = match self {
            Held::Address(address) => (address, 63),
            Held::Prefix(prefix) => (prefix.network(), prefix.prefix_len()),
        };
        (u64::from(u32::from(address)) << 6) | u64::from(length)
    }

    fn within(self, network: &Ipv4Net) -> bool {
        match self {
            Held::Address(address) => network.contains(&address),
            Held::Prefix(prefix) => network.contains(&prefix),
        }
    }
}

impl fmt::Display for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Held::Address(address) => address.fmt(f),
            Held::Prefix(prefix) => prefix.fmt(f),
        }
    }
}

/// Every address and prefix held, where it sits.
fn holdings<'a>(
    primary: Option<Ipv4Addr>,
    addresses: &'a [Ipv4Addr],
    prefixes: &'a [Ipv4Net],
) -> impl Iterator<Item = (Slot, Held)> + 'a {
    let primary = primary.map(|address| (Slot::Primary, Held::Address(address)));
    let addresses = addresses.iter().enumerate();
    let prefixes = prefixes.iter().enumerate();
    primary
        .into_iter()
        .chain(addresses.map(|(n, a)| (Slot::Secondary(n), Held::Address(*a))))
        .chain(prefixes.map(|(n, p)| (Slot::Prefix(n), Held::Prefix(*p))))
}

/// Every address and prefix an interface holds.
fn held(interface: &NetworkInterface) -> impl Iterator<Item = (Slot, Held)> + '_ {
    holdings(
        Some(interface.primary_ip),
        &interface.addresses,
        &interface.prefixes,
    )
}

/// Each of `holdings` inside `bounds` (when known); `at` names their
/// owner, called only when one is not.
fn all_inside(
    holdings: impl Iterator<Item = (Slot, Held)>,
    bounds: &Option<Bounds<'_>>,
    at: &dyn Fn() -> String,
) -> Result<(), BadField> {
    if bounds.is_none() {
        return Ok(());
    }
    for (slot, held) in holdings {
        outside(|| slot.field(&at()), held, bounds, |net| held.within(net))?;
    }
    Ok(())
}

/// None of `holdings` twice; `at` names their owner.
fn none_twice<I: Iterator<Item = (Slot, Held)>>(
    holdings: impl Fn() -> I,
    at: &dyn Fn() -> String,
) -> Result<(), BadField> {
    let mut keys: Vec<u64> = holdings().map(|(_, held)| held.key()).collect();
    match repeated(&mut keys) {
        Some(twice) => Err(duplicate(
            twice,
            holdings().map(|(slot, held)| (held.key(), slot.field(&at()))),
        )),
        None => Ok(()),
    }
}

/// One interface: its addresses and prefixes inside its network, none twice.
pub fn check_interface(
    interface: &NetworkInterface,
    at: &str,
    known: &KnownNetworks,
) -> Result<(), BadField> {
    let at = || at.to_string();
    let bounds = known.bounds(&interface.subnet_id, &interface.vpc_id);
    all_inside(held(interface), &bounds, &at)?;
    none_twice(|| held(interface), &at)
}

/// Addresses this close together (the usual case: one subnet) are checked
/// for repeats with a bitmap of their span instead of by sorting.
const BITMAP_SPAN: u64 = 1 << 16;

/// A key that occurs twice, if any (may reorder `keys`).
fn repeated(keys: &mut [u64]) -> Option<u64> {
    let address = |key: u64| key >> 6;
    let (low, high, plain) = keys
        .iter()
        .fold((u64::MAX, 0, true), |(low, high, plain), &k| {
            (
                low.min(address(k)),
                high.max(address(k)),
                plain && k & 63 == 63,
            )
        });
    if keys.is_empty() {
        return None;
    }
    if plain && high - low < BITMAP_SPAN {
        // At most 2^16 bits: 1,024 words.
        let mut seen = vec![0u64; ((high - low) / 64 + 1) as usize];
        for &key in keys.iter() {
            let offset = address(key) - low;
            let (word, bit) = ((offset / 64) as usize, offset % 64);
            if seen[word] & (1 << bit) != 0 {
                return Some(key);
            }
            seen[word] |= 1 << bit;
        }
        return None;
    }
    keys.sort_unstable();
    keys.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}

/// The error for a key held twice, naming its second holder and its first.
fn duplicate(twice: u64, holders: impl Iterator<Item = (u64, String)>) -> BadField {
    let mut fields = holders.filter(|(k, _)| *k == twice).map(|(_, field)| field);
    let first = fields.next().unwrap_or_default();
    let second = fields.next().unwrap_or_default();
    let address = Ipv4Addr::from((twice >> 6) as u32);
    let shown = match twice & 63 {
        63 => address.to_string(),
        length => format!("{address}/{length}"),
    };
    BadField::new(
        Problem::DuplicateAddress,
        second,
        format!("{shown} is also at {first}"),
    )
}

/// Every address and prefix of an instance, keyed, with the field it is at.
fn instance_holders(instance: &Instance) -> impl Iterator<Item = (u64, String)> + '_ {
    instance.interfaces.iter().flat_map(move |interface| {
        held(interface).map(move |(slot, held)| {
            let at = format!("instances[{}].interfaces[{}]", instance.id, interface.id);
            (held.key(), slot.field(&at))
        })
    })
}

/// One instance: each interface checked, attached to this instance, one per
/// device index, no address on two of them.
pub fn check_instance(instance: &Instance, known: &KnownNetworks) -> Result<(), BadField> {
    let at = |interface: &NetworkInterface| {
        format!("instances[{}].interfaces[{}]", instance.id, interface.id)
    };
    let mut indexes: Vec<(u32, usize)> = Vec::with_capacity(instance.interfaces.len());
    for (n, interface) in instance.interfaces.iter().enumerate() {
        if let Some(other) = interface
            .instance_id
            .as_deref()
            .filter(|i| *i != instance.id)
        {
            return Err(BadField::new(
                Problem::OtherInstance,
                format!("{}.instance-id", at(interface)),
                format!("listed under {} but attached to {other}", instance.id),
            ));
        }
        if let Some(&(_, first)) = indexes.iter().find(|(index, _)| *index == interface.index) {
            return Err(BadField::new(
                Problem::DuplicateIndex,
                format!("{}.index", at(interface)),
                format!(
                    "device index {} is also {}'s",
                    interface.index, instance.interfaces[first].id
                ),
            ));
        }
        indexes.push((interface.index, n));
        let bounds = known.bounds(&interface.subnet_id, &interface.vpc_id);
        all_inside(held(interface), &bounds, &|| at(interface))?;
    }
    let held_count = instance
        .interfaces
        .iter()
        .map(|i| 1 + i.addresses.len() + i.prefixes.len())
        .sum();
    let mut keys: Vec<u64> = Vec::with_capacity(held_count);
    keys.extend(
        instance
            .interfaces
            .iter()
            .flat_map(|i| held(i).map(|(_, held)| held.key())),
    );
    match repeated(&mut keys) {
        Some(twice) => Err(duplicate(twice, instance_holders(instance))),
        None => Ok(()),
    }
}

/// A listing of instances: which ones cannot be believed, and why. An
/// address held by two instances condemns both (which one lies is unknown).
pub fn check_instances(instances: &[Instance], known: &KnownNetworks) -> Vec<(usize, BadField)> {
    let mut bad: BTreeMap<usize, BadField> = instances
        .iter()
        .enumerate()
        .filter_map(|(n, instance)| Some((n, check_instance(instance, known).err()?)))
        .collect();
    if instances.len() < 2 {
        return bad.into_iter().collect();
    }
    let mut keys: Vec<(u64, usize)> = instances
        .iter()
        .enumerate()
        .flat_map(|(n, instance)| {
            instance
                .interfaces
                .iter()
                .flat_map(move |i| held(i).map(move |(_, held)| (held.key(), n)))
        })
        .collect();
    keys.sort_unstable();
    for pair in keys.windows(2) {
        let ((key, first), (same, second)) = (pair[0], pair[1]);
        if key != same || first == second {
            continue;
        }
        let holders =
            || instance_holders(&instances[first]).chain(instance_holders(&instances[second]));
        bad.entry(second)
            .or_insert_with(|| duplicate(key, holders()));
        let mut reversed: Vec<(u64, String)> = holders().collect();
        reversed.reverse();
        bad.entry(first)
            .or_insert_with(|| duplicate(key, reversed.into_iter()));
    }
    bad.into_iter().collect()
}

/// A create-interface answer: the interface asked for, where it was asked.
pub fn check_created(
    request: &CreateInterfaceRequest,
    created: &NetworkInterface,
    known: &KnownNetworks,
) -> Result<(), BadField> {
    let at = format!("interface[{}]", created.id);
    check_interface(created, &at, known)?;
    if created.instance_id.as_deref() != Some(request.instance_id.as_str()) {
        return Err(BadField::new(
            Problem::OtherInstance,
            format!("{at}.instance-id"),
            format!(
                "asked for {}, answered {}",
                request.instance_id,
                created.instance_id.as_deref().unwrap_or("none (detached)")
            ),
        ));
    }
    if created.index != request.index {
        return Err(BadField::new(
            Problem::OtherIndex,
            format!("{at}.index"),
            format!("asked for {}, answered {}", request.index, created.index),
        ));
    }
    if created.subnet_id != request.subnet_id {
        return Err(BadField::new(
            Problem::NotAsked,
            format!("{at}.subnet-id"),
            format!(
                "asked for {}, answered {}",
                request.subnet_id, created.subnet_id
            ),
        ));
    }
    let (kind, count, other) = if request.use_prefixes {
        ("prefixes", created.prefixes.len(), created.addresses.len())
    } else {
        ("addresses", created.addresses.len(), created.prefixes.len())
    };
    counted(&at, kind, request.ipv4_count, count, other)
}

fn counted(
    at: &str,
    kind: &str,
    asked: u32,
    answered: usize,
    other: usize,
) -> Result<(), BadField> {
    let other_kind = if kind == "addresses" {
        "prefixes"
    } else {
        "addresses"
    };
    if usize::try_from(asked).ok() != Some(answered) {
        return Err(BadField::new(
            Problem::NotAsked,
            format!("{at}.{kind}"),
            format!("asked for {asked}, answered {answered}"),
        ));
    }
    if other > 0 {
        return Err(BadField::new(
            Problem::NotAsked,
            format!("{at}.{other_kind}"),
            format!("asked for {kind} only, answered {other} {other_kind}"),
        ));
    }
    Ok(())
}

/// An assign-ips answer: exactly what was asked, inside the interface's
/// subnet when it is known, none twice.
pub fn check_assigned(
    interface_id: &str,
    request: IpRequest,
    assigned: &Assigned,
    known: &KnownNetworks,
) -> Result<(), BadField> {
    let at = "assigned";
    match request {
        IpRequest::Addresses(n) => counted(
            at,
            "addresses",
            n,
            assigned.addresses.len(),
            assigned.prefixes.len(),
        )?,
        IpRequest::Prefixes(n) => counted(
            at,
            "prefixes",
            n,
            assigned.prefixes.len(),
            assigned.addresses.len(),
        )?,
    }
    let holdings = || holdings(None, &assigned.addresses, &assigned.prefixes);
    let bounds = known.interface_bounds(interface_id);
    all_inside(holdings(), &bounds, &|| at.to_string())?;
    none_twice(holdings, &|| at.to_string())
}

/// Limits of an instance type: room for at least one interface with one
/// address.
pub fn check_limits(limits: &InstanceLimits) -> Result<(), BadField> {
    if limits.max_interfaces == 0 {
        return Err(BadField::new(
            Problem::ZeroLimit,
            "limits.max-interfaces",
            "0: an instance has at least its primary interface",
        ));
    }
    if limits.ipv4_per_interface == 0 {
        return Err(BadField::new(
            Problem::ZeroLimit,
            "limits.ipv4-per-interface",
            "0: an interface has at least its primary address",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
