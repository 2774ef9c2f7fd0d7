//! A provider that misbehaves on purpose, for the host's tests.
//!
//! It serves a small believable cloud, with state kept in the guest (so it
//! declares `max-concurrency: 1`):
//! - VPC `vpc-good`, 10.0.0.0/16; security group `sg-1` in it;
//! - subnet `subnet-1`, 10.0.1.0/24 in zone `z`, 200 addresses free (less
//!   those it has handed out);
//! - instances `i-good` and `i-bad`, type `m5.large` (limits: 3 interfaces,
//!   10 IPv4 addresses per interface, no prefix delegation), each with its
//!   primary interface at index 0 in `subnet-1` (`eni-good-0`, 10.0.1.10;
//!   `eni-bad-0`, 10.0.1.20) and no secondary address;
//! - create-interface (in `subnet-1`, without prefixes) and assign-ips (of
//!   addresses) hand out addresses from a counter, 10.0.1.100 up, and a
//!   listing afterwards shows them. Its capabilities are create-interface
//!   alone: no release, no prefixes, no delete.
//!
//! Its settings, `{"mode": ...}`, choose how it misbehaves (default
//! `behave`). The first modes act on `get-vpcs` alone (every other operation
//! behaves, so a test can check that the host still serves good calls after
//! a bad one):
//! - `behave`: `get-vpcs` answers `vpc-good`;
//! - `trap`: `get-vpcs` panics (a trap);
//! - `loop`: `get-vpcs` spins forever;
//! - `grow-memory`: `get-vpcs` allocates until memory runs out;
//! - `fetch` (with `url`): `get-vpcs` GETs the URL; the VPC id is the
//!   response's status and body;
//! - `credentials` (with `key`): the VPC id is the host's credential named
//!   `key`;
//! - `leak` (with `kind`: `fields`, `requests`, `bodies`, `pollables`,
//!   `oversized-headers`, `methods` or `header-handles`, `count`, and
//!   optionally `size`, the bytes of each method or value): `get-vpcs`
//!   creates that many host resources of the kind through wasi:http or
//!   wasi:clocks (or grows one header set that many times), holding every one
//!   (never dropped), and fails with `other` naming what the host refused (or
//!   that all were made);
//! - `abandon` (with `url`, `count`, `linger-ms`): `get-vpcs` starts `count`
//!   GETs of the URL, waits `linger-ms`, and answers without reading or
//!   dropping any; the VPC id says how many were started;
//! - `fetch-each` (with `urls`): `get-vpcs` GETs every URL and answers one
//!   VPC per URL whose id is the URL and its status or the guest's error;
//! - `transfer` (with `url`, `upload`): `get-vpcs` POSTs `upload` bytes and
//!   reads the whole answer; the VPC id is its status and length;
//! - `send-refused-header` (with `url`, `header-bytes`): `get-vpcs` GETs the
//!   URL with a header of that size, sending even when the host refused to
//!   add it; the VPC id says what the append and the send were answered;
//! - `denied-flood` (with `count`, `host-bytes`, `path-bytes`): `get-vpcs`
//!   sends `count` GETs to an unlisted origin of that long a name, with that
//!   long a path; the VPC id counts the denials and the refused authorities;
//! - `log-flood` (with `lines`, `bytes`): `get-vpcs` logs that many lines of
//!   that size, then answers `vpc-good`.
//!
//! The other modes LIE in their answers about instance `i-bad` alone, for the
//! host's boundary checks (each must be refused with a typed error naming the
//! provider, the operation and the field, while `i-good` is still served).
//! Each lie is in the answers only: the guest's own state stays true.
//! - `address-outside-subnet`: get-instances lists `eni-bad-0` with a
//!   secondary address 192.168.7.7, outside `subnet-1`;
//! - `duplicate-address`: get-instances lists `i-bad` with two interfaces,
//!   index 0 and 1, both with secondary address 10.0.1.77;
//! - `duplicate-index`: get-instances lists `i-bad` with two interfaces both
//!   at index 1 (besides its primary at 0);
//! - `bad-network`: get-instances lists `eni-bad-0` with a prefix of address
//!   10.0.1.1 and length 28 (bits set past its length);
//! - `create-wrong-instance`: create-interface asked for `i-bad` answers the
//!   interface attached to `i-good`;
//! - `create-wrong-index`: create-interface asked for `i-bad` answers the
//!   asked index plus one;
//! - `assign-more`: assign-ips on an interface of `i-bad` answers one address
//!   more than asked (one the counter set aside, on no interface);
//! - `assign-other-kind`: assign-ips of addresses on an interface of `i-bad`
//!   answers a /28 prefix too;
//! - `zero-limits`: `i-bad` is of type `bad.large`, and get-instance-limits of
//!   `bad.large` answers `max-interfaces: 0`.

mod abuse;

use std::collections::BTreeMap;

use ipam_provider_sdk::rate::{bucket, cost};
use ipam_provider_sdk::{
    export_provider, get_credentials, http, log, Assigned, Capabilities, CreateInterfaceRequest,
    Error, Instance, IpRequest, Ipv4, Ipv4Net, Limits, LogLevel, NetworkInterface, Operation,
    Provider, ProviderInfo, RateModel, SecurityGroup, Subnet, Tag, Vpc,
};
use serde::Deserialize;

#[derive(Deserialize, Default, Debug, Clone, PartialEq)]
#[serde(tag = "mode", rename_all = "kebab-case")]
enum Mode {
    /// Behave: one VPC.
    #[default]
    Behave,
    /// Panic (a trap).
    Trap,
    /// Spin forever.
    Loop,
    /// Allocate until memory runs out.
    GrowMemory,
    /// GET the URL; the VPC id is the response's status and body.
    Fetch { url: String },
    /// The VPC id is the credential named `key`.
    Credentials { key: String },
    /// Create `count` host resources of `kind` and never drop them.
    Leak {
        kind: abuse::LeakKind,
        count: u32,
        size: Option<usize>,
    },
    /// Start `count` GETs of the URL and answer without waiting for them.
    #[serde(rename_all = "kebab-case")]
    Abandon {
        url: String,
        count: u32,
        linger_ms: u64,
    },
    /// GET every URL; one VPC per URL naming its outcome.
    FetchEach { urls: Vec<String> },
    /// POST `upload` bytes to the URL and read the whole answer.
    Transfer { url: String, upload: usize },
    /// GET the URL with a header of `header-bytes`, refused or not.
    #[serde(rename_all = "kebab-case")]
    SendRefusedHeader { url: String, header_bytes: usize },
    /// Send `count` requests to an unlisted origin with long names and paths.
    #[serde(rename_all = "kebab-case")]
    DeniedFlood {
        count: u32,
        host_bytes: usize,
        path_bytes: usize,
    },
    /// Log `lines` lines of `bytes` each.
    LogFlood { lines: u32, bytes: usize },
    /// i-bad's primary interface lists 192.168.7.7.
    AddressOutsideSubnet,
    /// i-bad has two interfaces both listing 10.0.1.77.
    DuplicateAddress,
    /// i-bad has two interfaces at index 1.
    DuplicateIndex,
    /// i-bad's primary interface lists the prefix 10.0.1.1 length 28.
    BadNetwork,
    /// create-interface for i-bad answers the interface on i-good.
    CreateWrongInstance,
    /// create-interface for i-bad answers the asked index plus one.
    CreateWrongIndex,
    /// assign-ips on i-bad answers one address more than asked.
    AssignMore,
    /// assign-ips of addresses on i-bad answers a prefix too.
    AssignOtherKind,
    /// i-bad is a `bad.large`, whose limits answer no interfaces.
    ZeroLimits,
}

const VPC: &str = "vpc-good";
const SUBNET: &str = "subnet-1";
const ZONE: &str = "z";
const SECURITY_GROUP: &str = "sg-1";
const GOOD: &str = "i-good";
const BAD: &str = "i-bad";
const TYPE: &str = "m5.large";
const BAD_TYPE: &str = "bad.large";
/// Addresses subnet-1 has free before any is handed out.
const FREE: u32 = 200;
const MAX_INTERFACES: u32 = 3;
const IPV4_PER_INTERFACE: u32 = 10;

/// `a.b.c.d` as the WIT carries it.
const fn ip(a: u8, b: u8, c: u8, d: u8) -> Ipv4 {
    u32::from_be_bytes([a, b, c, d])
}

/// The first address the counter hands out.
const FIRST_HANDED_OUT: Ipv4 = ip(10, 0, 1, 100);
/// The last address of subnet-1 the counter may hand out.
const LAST_HANDED_OUT: Ipv4 = ip(10, 0, 1, 254);

fn subnet_cidr() -> Ipv4Net {
    Ipv4Net {
        address: ip(10, 0, 1, 0),
        length: 24,
    }
}

fn vpc_cidr() -> Ipv4Net {
    Ipv4Net {
        address: ip(10, 0, 0, 0),
        length: 16,
    }
}

/// An interface of the guest's cloud.
#[derive(Debug, Clone)]
struct Eni {
    id: String,
    index: u32,
    instance: String,
    primary_ip: Ipv4,
    addresses: Vec<Ipv4>,
    security_groups: Vec<String>,
    tags: Vec<Tag>,
}

impl Eni {
    fn new(id: &str, instance: &str, index: u32, primary_ip: Ipv4) -> Self {
        Eni {
            id: id.to_string(),
            index,
            instance: instance.to_string(),
            primary_ip,
            addresses: Vec::new(),
            security_groups: vec![SECURITY_GROUP.to_string()],
            tags: Vec::new(),
        }
    }

    fn wit(&self) -> NetworkInterface {
        let [a, b, c, d] = self.primary_ip.to_be_bytes();
        NetworkInterface {
            id: self.id.clone(),
            mac: format!("02:00:{a:02x}:{b:02x}:{c:02x}:{d:02x}"),
            index: self.index,
            subnet_id: SUBNET.to_string(),
            vpc_id: VPC.to_string(),
            primary_ip: self.primary_ip,
            addresses: self.addresses.clone(),
            prefixes: Vec::new(),
            security_groups: self.security_groups.clone(),
            tags: self.tags.clone(),
            instance_id: Some(self.instance.clone()),
        }
    }
}

/// The guest's cloud: interfaces by id, and the address counter.
#[derive(Debug)]
struct Cloud {
    interfaces: BTreeMap<String, Eni>,
    next_address: Ipv4,
    created: u32,
}

impl Default for Cloud {
    fn default() -> Self {
        let interfaces = [
            Eni::new("eni-good-0", GOOD, 0, ip(10, 0, 1, 10)),
            Eni::new("eni-bad-0", BAD, 0, ip(10, 0, 1, 20)),
        ];
        Cloud {
            interfaces: interfaces.into_iter().map(|e| (e.id.clone(), e)).collect(),
            next_address: FIRST_HANDED_OUT,
            created: 0,
        }
    }
}

impl Cloud {
    fn handed_out(&self) -> u32 {
        self.next_address - FIRST_HANDED_OUT
    }

    /// `count` addresses from the counter, all or none.
    fn take(&mut self, count: u32) -> Result<Vec<Ipv4>, Error> {
        let left = LAST_HANDED_OUT + 1 - self.next_address;
        if count > left.min(FREE - self.handed_out()) {
            return Err(Error::SubnetFull(format!(
                "{SUBNET} has {left} addresses left to hand out, {count} asked"
            )));
        }
        let taken = (self.next_address..self.next_address + count).collect();
        self.next_address += count;
        Ok(taken)
    }

    fn attached_to(&self, instance: &str) -> impl Iterator<Item = &Eni> {
        let instance = instance.to_string();
        self.interfaces
            .values()
            .filter(move |e| e.instance == instance)
    }
}

#[derive(Default)]
struct Misbehave {
    mode: Mode,
    cloud: Cloud,
}

fn vpc(id: String) -> Vpc {
    Vpc {
        id,
        primary_cidr: vpc_cidr(),
        cidrs: vec![vpc_cidr()],
    }
}

fn limits(max_interfaces: u32) -> Limits {
    Limits {
        max_interfaces,
        ipv4_per_interface: IPV4_PER_INTERFACE,
        ipv6_per_interface: 0,
        prefix_delegation: false,
    }
}

/// One generous bucket: the host's tests should not wait on this guest.
fn rate_model() -> RateModel {
    let call = |operation, name| cost(operation, &[(name, "api")]);
    RateModel {
        buckets: vec![bucket("api", 1000, 1000.0)],
        costs: vec![
            call(Operation::GetVpcs, "ListVpcs"),
            call(Operation::GetSubnets, "ListSubnets"),
            call(Operation::GetSecurityGroups, "ListSecurityGroups"),
            call(Operation::GetInstances, "ListInstances"),
            call(Operation::GetDetachedInterfaces, "ListInterfaces"),
            call(Operation::GetInstanceLimits, "GetInstanceType"),
            call(Operation::CreateInterface, "CreateInterface"),
            call(Operation::AssignIps, "AssignAddresses"),
        ],
    }
}

impl Misbehave {
    fn instance_type(&self, instance: &str) -> &'static str {
        if instance == BAD && self.mode == Mode::ZeroLimits {
            BAD_TYPE
        } else {
            TYPE
        }
    }

    fn instance(&self, id: &str) -> Instance {
        let mut interfaces: Vec<NetworkInterface> =
            self.cloud.attached_to(id).map(Eni::wit).collect();
        interfaces.sort_by_key(|i| i.index);
        if id == BAD {
            self.lie_about(&mut interfaces);
        }
        Instance {
            id: id.to_string(),
            instance_type: self.instance_type(id).to_string(),
            availability_zone: ZONE.to_string(),
            vpc_id: VPC.to_string(),
            interfaces,
        }
    }

    /// The listing lies of the mode, told of i-bad's interfaces (its primary
    /// first).
    fn lie_about(&self, interfaces: &mut Vec<NetworkInterface>) {
        let extra =
            |id: &str, index: u32, primary_ip: Ipv4| Eni::new(id, BAD, index, primary_ip).wit();
        match self.mode {
            Mode::AddressOutsideSubnet => interfaces[0].addresses.push(ip(192, 168, 7, 7)),
            Mode::DuplicateAddress => {
                let mut second = extra("eni-bad-dup", 1, ip(10, 0, 1, 21));
                interfaces[0].addresses.push(ip(10, 0, 1, 77));
                second.addresses.push(ip(10, 0, 1, 77));
                interfaces.push(second);
            }
            Mode::DuplicateIndex => {
                interfaces.push(extra("eni-bad-1a", 1, ip(10, 0, 1, 21)));
                interfaces.push(extra("eni-bad-1b", 1, ip(10, 0, 1, 22)));
            }
            Mode::BadNetwork => interfaces[0].prefixes.push(Ipv4Net {
                address: ip(10, 0, 1, 1),
                length: 28,
            }),
            _ => {}
        }
    }
}

impl Provider for Misbehave {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "misbehave".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            capabilities: Capabilities {
                create_interface: true,
                release: false,
                prefixes: false,
                delete_interface: false,
            },
            // Its cloud lives in the instance's memory.
            max_concurrency: 1,
            rate_model: rate_model(),
        }
    }

    fn configure(&mut self, settings: &str) -> Result<(), Error> {
        // As the mock: configuring starts the cloud from its settings again.
        self.mode = ipam_provider_sdk::settings::parse(settings)?;
        self.cloud = Cloud::default();
        Ok(())
    }

    fn get_vpcs(&mut self) -> Result<Vec<Vpc>, Error> {
        log(LogLevel::Info, "get-vpcs called");
        match &self.mode {
            Mode::Trap => panic!("deliberate trap"),
            Mode::Loop => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            Mode::GrowMemory => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(std::hint::black_box(vec![1u8; 1 << 20]));
                }
            }
            Mode::Fetch { url } => {
                let response = http::send("GET", url, &[], &[])?;
                Ok(vec![vpc(format!(
                    "{} {}",
                    response.status,
                    String::from_utf8_lossy(&response.body)
                ))])
            }
            Mode::Leak { kind, count, size } => {
                Err(Error::Other(abuse::leak(*kind, *count, *size)))
            }
            Mode::SendRefusedHeader { url, header_bytes } => {
                Ok(vec![vpc(abuse::send_refused_header(url, *header_bytes)
                    .map_err(Error::InvalidArgument)?)])
            }
            Mode::DeniedFlood {
                count,
                host_bytes,
                path_bytes,
            } => Ok(vec![vpc(abuse::denied_flood(
                *count,
                *host_bytes,
                *path_bytes,
            ))]),
            Mode::LogFlood { lines, bytes } => {
                abuse::log_flood(*lines, *bytes);
                Ok(vec![vpc(VPC.into())])
            }
            Mode::Abandon {
                url,
                count,
                linger_ms,
            } => Ok(vec![vpc(
                abuse::abandon(url, *count, *linger_ms).map_err(Error::InvalidArgument)?
            )]),
            Mode::FetchEach { urls } => Ok(abuse::fetch_each(urls).into_iter().map(vpc).collect()),
            Mode::Transfer { url, upload } => Ok(vec![vpc(abuse::transfer(url, *upload)?)]),
            Mode::Credentials { key } => {
                let credentials = get_credentials().map_err(Error::Unauthorized)?;
                let value = credentials
                    .values
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone());
                Ok(vec![
                    vpc(value.ok_or_else(|| Error::NotFound(key.clone()))?),
                ])
            }
            _ => Ok(vec![vpc(VPC.into())]),
        }
    }

    fn get_subnets(&mut self) -> Result<Vec<Subnet>, Error> {
        Ok(vec![Subnet {
            id: SUBNET.to_string(),
            cidr: subnet_cidr(),
            availability_zone: ZONE.to_string(),
            vpc_id: VPC.to_string(),
            available_addresses: FREE - self.cloud.handed_out(),
            tags: Vec::new(),
        }])
    }

    fn get_security_groups(&mut self) -> Result<Vec<SecurityGroup>, Error> {
        Ok(vec![SecurityGroup {
            id: SECURITY_GROUP.to_string(),
            vpc_id: VPC.to_string(),
            tags: Vec::new(),
        }])
    }

    fn get_instances(&mut self, ids: &[String]) -> Result<Vec<Instance>, Error> {
        Ok([GOOD, BAD]
            .into_iter()
            .filter(|id| ids.is_empty() || ids.iter().any(|i| i == id))
            .map(|id| self.instance(id))
            .collect())
    }

    fn get_instance_limits(&mut self, instance_type: &str) -> Result<Limits, Error> {
        match instance_type {
            TYPE => Ok(limits(MAX_INTERFACES)),
            BAD_TYPE if self.mode == Mode::ZeroLimits => Ok(limits(0)),
            other => Err(Error::NotFound(format!("instance type {other}"))),
        }
    }

    fn create_interface(
        &mut self,
        request: CreateInterfaceRequest,
    ) -> Result<NetworkInterface, Error> {
        let instance = request.instance_id.clone();
        if instance != GOOD && instance != BAD {
            return Err(Error::NotFound(format!("instance {instance}")));
        }
        if request.subnet_id != SUBNET {
            return Err(Error::NotFound(format!("subnet {}", request.subnet_id)));
        }
        if let Some(group) = request
            .security_groups
            .iter()
            .find(|g| *g != SECURITY_GROUP)
        {
            return Err(Error::NotFound(format!("security group {group}")));
        }
        if request.use_prefixes {
            return Err(Error::InvalidArgument(
                "prefixes are not supported by this provider".into(),
            ));
        }
        let attached: Vec<&Eni> = self.cloud.attached_to(&instance).collect();
        if attached.len() as u32 >= MAX_INTERFACES {
            return Err(Error::InterfaceLimit(format!(
                "{instance} has {MAX_INTERFACES} interfaces"
            )));
        }
        if request.index >= MAX_INTERFACES {
            return Err(Error::InvalidArgument(format!(
                "device index {} is beyond the type's {MAX_INTERFACES} interfaces",
                request.index
            )));
        }
        if attached.iter().any(|e| e.index == request.index) {
            return Err(Error::Conflict(format!(
                "device index {} of {instance} is taken",
                request.index
            )));
        }
        if 1 + request.ipv4_count > IPV4_PER_INTERFACE {
            return Err(Error::AddressLimit(format!(
                "an interface has {IPV4_PER_INTERFACE} address slots, 1 + {} asked",
                request.ipv4_count
            )));
        }
        let taken = self.cloud.take(1 + request.ipv4_count)?;
        let (&primary_ip, addresses) = taken
            .split_first()
            .ok_or_else(|| Error::Other("the counter handed out nothing".into()))?;
        self.cloud.created += 1;
        let mut eni = Eni::new(
            &format!("eni-{}", self.cloud.created),
            &instance,
            request.index,
            primary_ip,
        );
        eni.addresses = addresses.to_vec();
        eni.security_groups = request.security_groups;
        eni.tags = request.tags;
        let mut answer = eni.wit();
        self.cloud.interfaces.insert(eni.id.clone(), eni);
        if instance == BAD {
            match self.mode {
                Mode::CreateWrongInstance => answer.instance_id = Some(GOOD.to_string()),
                Mode::CreateWrongIndex => answer.index += 1,
                _ => {}
            }
        }
        Ok(answer)
    }

    fn assign_ips(&mut self, interface_id: &str, request: IpRequest) -> Result<Assigned, Error> {
        let eni = self
            .cloud
            .interfaces
            .get(interface_id)
            .ok_or_else(|| Error::NotFound(format!("interface {interface_id}")))?;
        let count = match request {
            IpRequest::Addresses(count) => count,
            IpRequest::Prefixes(_) => {
                return Err(Error::InvalidArgument(
                    "prefixes are not supported by this provider".into(),
                ))
            }
        };
        if count == 0 {
            return Err(Error::InvalidArgument(
                "assign-ips needs a count of at least 1".into(),
            ));
        }
        let used = 1 + eni.addresses.len() as u32;
        if used + count > IPV4_PER_INTERFACE {
            return Err(Error::AddressLimit(format!(
                "{interface_id} has {used} of {IPV4_PER_INTERFACE} address slots in use, \
                 {count} more asked"
            )));
        }
        let on_bad = eni.instance == BAD;
        let taken = self.cloud.take(count)?;
        if let Some(eni) = self.cloud.interfaces.get_mut(interface_id) {
            eni.addresses.extend(&taken);
        }
        let mut answer = Assigned {
            addresses: taken,
            prefixes: Vec::new(),
        };
        if on_bad {
            match self.mode {
                // An address set aside from the counter, on no interface.
                Mode::AssignMore => answer.addresses.extend(self.cloud.take(1)?),
                Mode::AssignOtherKind => answer.prefixes.push(Ipv4Net {
                    address: ip(10, 0, 1, 240),
                    length: 28,
                }),
                _ => {}
            }
        }
        Ok(answer)
    }
}

export_provider!(Misbehave);

#[cfg(test)]
mod tests {
    use ipam_provider_sdk::net::parse_ipv4;
    use ipam_provider_sdk::rate::check;

    use super::*;

    fn misbehave(mode: &str) -> Misbehave {
        let mut guest = Misbehave::default();
        guest
            .configure(&format!(r#"{{"mode": "{mode}"}}"#))
            .unwrap_or_else(|e| panic!("{mode}: {e:?}"));
        guest
    }

    fn addr(text: &str) -> Ipv4 {
        parse_ipv4(text).unwrap()
    }

    fn request(instance: &str, index: u32, count: u32) -> CreateInterfaceRequest {
        CreateInterfaceRequest {
            instance_id: instance.into(),
            index,
            subnet_id: SUBNET.into(),
            security_groups: vec![SECURITY_GROUP.into()],
            description: String::new(),
            tags: Vec::new(),
            delete_on_termination: true,
            ipv4_count: count,
            use_prefixes: false,
        }
    }

    fn instance(guest: &mut Misbehave, id: &str) -> Instance {
        guest.get_instances(&[id.to_string()]).unwrap().remove(0)
    }

    /// (index, primary, secondaries, prefixes) of each interface, as text.
    fn shape(instance: &Instance) -> Vec<(u32, String, Vec<String>, Vec<String>)> {
        instance
            .interfaces
            .iter()
            .map(|i| {
                (
                    i.index,
                    std::net::Ipv4Addr::from(i.primary_ip).to_string(),
                    i.addresses
                        .iter()
                        .map(|a| std::net::Ipv4Addr::from(*a).to_string())
                        .collect(),
                    i.prefixes.iter().map(ToString::to_string).collect(),
                )
            })
            .collect()
    }

    fn one(
        index: u32,
        primary: &str,
        addresses: &[&str],
        prefixes: &[&str],
    ) -> (u32, String, Vec<String>, Vec<String>) {
        let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
        (index, primary.into(), strings(addresses), strings(prefixes))
    }

    #[test]
    fn its_info_declares_a_rate_model_that_costs_what_it_enables() {
        let info = Misbehave::info();
        assert_eq!(info.max_concurrency, 1);
        assert_eq!(check(&info), Ok(()));
    }

    #[test]
    fn behaving_it_serves_a_small_cloud_and_remembers_what_it_hands_out() {
        let mut guest = misbehave("behave");
        assert_eq!(guest.get_vpcs().unwrap()[0].id, "vpc-good");
        let subnet = &guest.get_subnets().unwrap()[0];
        assert_eq!(
            (
                subnet.cidr.to_string(),
                subnet.availability_zone.as_str(),
                subnet.available_addresses
            ),
            ("10.0.1.0/24".to_string(), "z", 200)
        );
        let all = guest.get_instances(&[]).unwrap();
        assert_eq!(
            all.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            [GOOD, BAD]
        );
        assert_eq!(shape(&all[0]), [one(0, "10.0.1.10", &[], &[])]);
        assert_eq!(shape(&all[1]), [one(0, "10.0.1.20", &[], &[])]);
        assert_eq!(all[1].instance_type, "m5.large");
        let limits = guest.get_instance_limits("m5.large").unwrap();
        assert_eq!((limits.max_interfaces, limits.ipv4_per_interface), (3, 10));
        assert!(guest.get_instance_limits("bad.large").is_err());

        let created = guest.create_interface(request(BAD, 1, 2)).unwrap();
        assert_eq!(created.instance_id.as_deref(), Some(BAD));
        assert_eq!(created.index, 1);
        assert_eq!(created.primary_ip, addr("10.0.1.100"));
        assert_eq!(created.addresses, [addr("10.0.1.101"), addr("10.0.1.102")]);
        let assigned = guest
            .assign_ips("eni-bad-0", IpRequest::Addresses(1))
            .unwrap();
        assert_eq!(assigned.addresses, [addr("10.0.1.103")]);
        assert!(assigned.prefixes.is_empty());
        assert_eq!(
            shape(&instance(&mut guest, BAD)),
            [
                one(0, "10.0.1.20", &["10.0.1.103"], &[]),
                one(1, "10.0.1.100", &["10.0.1.101", "10.0.1.102"], &[])
            ]
        );
        assert_eq!(guest.get_subnets().unwrap()[0].available_addresses, 196);
        assert!(matches!(
            guest.create_interface(request(BAD, 1, 0)),
            Err(Error::Conflict(_))
        ));
        assert!(matches!(
            guest.assign_ips("eni-bad-0", IpRequest::Addresses(9)),
            Err(Error::AddressLimit(_))
        ));
        assert!(matches!(
            guest.assign_ips("eni-bad-0", IpRequest::Prefixes(1)),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn listing_lies_are_told_of_i_bad_alone() {
        let cases = [
            (
                "address-outside-subnet",
                vec![one(0, "10.0.1.20", &["192.168.7.7"], &[])],
            ),
            (
                "duplicate-address",
                vec![
                    one(0, "10.0.1.20", &["10.0.1.77"], &[]),
                    one(1, "10.0.1.21", &["10.0.1.77"], &[]),
                ],
            ),
            (
                "duplicate-index",
                vec![
                    one(0, "10.0.1.20", &[], &[]),
                    one(1, "10.0.1.21", &[], &[]),
                    one(1, "10.0.1.22", &[], &[]),
                ],
            ),
            (
                "bad-network",
                vec![one(0, "10.0.1.20", &[], &["10.0.1.1/28"])],
            ),
        ];
        for (mode, bad) in cases {
            let mut guest = misbehave(mode);
            assert_eq!(shape(&instance(&mut guest, BAD)), bad, "{mode}");
            assert_eq!(
                shape(&instance(&mut guest, GOOD)),
                [one(0, "10.0.1.10", &[], &[])],
                "{mode}"
            );
        }
        let bad_network = &instance(&mut misbehave("bad-network"), BAD).interfaces[0].prefixes[0];
        assert!(bad_network.check().is_err());
    }

    #[test]
    fn create_lies_are_told_of_i_bad_alone() {
        let mut guest = misbehave("create-wrong-instance");
        let lie = guest.create_interface(request(BAD, 1, 0)).unwrap();
        assert_eq!((lie.instance_id.as_deref(), lie.index), (Some(GOOD), 1));
        let truth = guest.create_interface(request(GOOD, 1, 0)).unwrap();
        assert_eq!((truth.instance_id.as_deref(), truth.index), (Some(GOOD), 1));
        assert_eq!(
            instance(&mut guest, BAD).interfaces.len(),
            2,
            "the state is true"
        );

        let mut guest = misbehave("create-wrong-index");
        let lie = guest.create_interface(request(BAD, 1, 0)).unwrap();
        assert_eq!((lie.instance_id.as_deref(), lie.index), (Some(BAD), 2));
        let truth = guest.create_interface(request(GOOD, 2, 0)).unwrap();
        assert_eq!(truth.index, 2);
        assert_eq!(instance(&mut guest, BAD).interfaces[1].index, 1);
    }

    #[test]
    fn assign_lies_are_told_of_i_bad_alone() {
        let mut guest = misbehave("assign-more");
        let lie = guest
            .assign_ips("eni-bad-0", IpRequest::Addresses(2))
            .unwrap();
        assert_eq!(lie.addresses.len(), 3);
        assert_eq!(instance(&mut guest, BAD).interfaces[0].addresses.len(), 2);
        let truth = guest
            .assign_ips("eni-good-0", IpRequest::Addresses(2))
            .unwrap();
        assert_eq!(truth.addresses.len(), 2);
        assert!(truth.addresses.iter().all(|a| !lie.addresses.contains(a)));

        let mut guest = misbehave("assign-other-kind");
        let lie = guest
            .assign_ips("eni-bad-0", IpRequest::Addresses(1))
            .unwrap();
        assert_eq!(lie.addresses.len(), 1);
        assert_eq!(lie.prefixes, ["10.0.1.240/28".parse::<Ipv4Net>().unwrap()]);
        let truth = guest
            .assign_ips("eni-good-0", IpRequest::Addresses(1))
            .unwrap();
        assert!(truth.prefixes.is_empty());
    }

    #[test]
    fn zero_limits_makes_i_bad_a_type_without_interfaces() {
        let mut guest = misbehave("zero-limits");
        assert_eq!(instance(&mut guest, BAD).instance_type, "bad.large");
        assert_eq!(instance(&mut guest, GOOD).instance_type, "m5.large");
        assert_eq!(
            guest
                .get_instance_limits("bad.large")
                .unwrap()
                .max_interfaces,
            0
        );
        assert_eq!(
            guest
                .get_instance_limits("m5.large")
                .unwrap()
                .max_interfaces,
            3
        );
    }

    #[test]
    fn every_mode_lists_the_same_vpc_and_unknown_modes_are_refused_by_name() {
        for mode in ["behave", "duplicate-address", "zero-limits"] {
            assert_eq!(misbehave(mode).get_vpcs().unwrap()[0].id, "vpc-good");
        }
        let mut guest = Misbehave::default();
        match guest.configure(r#"{"mode": "dance"}"#) {
            Err(Error::InvalidArgument(text)) => assert!(text.contains("dance"), "{text}"),
            other => panic!("expected invalid-argument, got {other:?}"),
        }
        assert!(
            guest.configure(r#"{"mode": "fetch"}"#).is_err(),
            "fetch needs a url"
        );
        assert!(guest
            .configure(r#"{"mode": "fetch", "url": "http://127.0.0.1:9/"}"#)
            .is_ok());
    }

    #[test]
    fn the_abusive_modes_take_their_settings_and_refuse_unknown_kinds() {
        let mut guest = Misbehave::default();
        for settings in [
            r#"{"mode": "leak", "kind": "fields", "count": 3}"#,
            r#"{"mode": "leak", "kind": "pollables", "count": 3}"#,
            r#"{"mode": "abandon", "url": "http://127.0.0.1:9/", "count": 2, "linger-ms": 10}"#,
            r#"{"mode": "fetch-each", "urls": ["http://127.0.0.1:9/"]}"#,
            r#"{"mode": "leak", "kind": "methods", "count": 3, "size": 10}"#,
            r#"{"mode": "leak", "kind": "header-handles", "count": 3}"#,
            r#"{"mode": "send-refused-header", "url": "http://127.0.0.1:9/", "header-bytes": 10}"#,
            r#"{"mode": "denied-flood", "count": 2, "host-bytes": 10, "path-bytes": 10}"#,
            r#"{"mode": "log-flood", "lines": 2, "bytes": 10}"#,
            r#"{"mode": "transfer", "url": "http://127.0.0.1:9/", "upload": 10}"#,
        ] {
            guest
                .configure(settings)
                .unwrap_or_else(|e| panic!("{settings}: {e:?}"));
        }
        assert_eq!(
            guest.mode,
            Mode::Transfer {
                url: "http://127.0.0.1:9/".into(),
                upload: 10
            }
        );
        assert!(guest
            .configure(r#"{"mode": "leak", "kind": "sockets", "count": 3}"#)
            .is_err());
        assert!(guest
            .configure(r#"{"mode": "abandon", "url": "http://127.0.0.1:9/", "count": 2}"#)
            .is_err());
    }
}
