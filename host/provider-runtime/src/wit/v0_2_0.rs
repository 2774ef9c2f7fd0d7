//! Bindings for `ipam:provider@0.2.0`: the linker's `host` imports, the calls
//! of its `provider` exports, and conversions between its types and the
//! plain `ipam-cloud` model. Addresses arrive as numbers and networks as
//! address and length: only a network with bits past its length can fail to
//! convert. Its `host` interface is 0.1.0's, served by the same code.

use ipam_cloud as cloud;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::Store;

use std::net::Ipv4Addr;

use ipam_cloud::answer::{network, BadField};
use ipam_cloud::rate::{ApiCall, DeclaredBucket, OperationCost, RateModel};

use super::{first_mismatched_export, Converted, GuestResult};
use crate::state::StoreState;

wasmtime::component::bindgen!({
    path: "../../wit/0.2.0",
    world: "ipam-provider",
    exports: { default: async },
    with: {
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        "wasi:random": wasmtime_wasi::p2::bindings::random,
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
    },
});

use ipam::provider::host as wit_host;
use ipam::provider::types as t;

pub fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    wit_host::add_to_linker::<_, HasSelf<StoreState>>(linker, |state| state)
}

/// A component linked against this version's world.
pub struct Pre(IpamProviderPre<StoreState>);

/// An instance of this version's world.
pub struct Instance(IpamProvider);

impl Pre {
    pub fn new(linker: &Linker<StoreState>, component: &Component) -> wasmtime::Result<Self> {
        let pre = IpamProviderPre::new(linker.instantiate_pre(component)?)?;
        match first_mismatched_export(pre.instance_pre()) {
            Some(mismatch) => Err(wasmtime::format_err!("{mismatch}")),
            None => Ok(Self(pre)),
        }
    }

    pub async fn instantiate(&self, store: &mut Store<StoreState>) -> wasmtime::Result<Instance> {
        Ok(Instance(self.0.instantiate_async(store).await?))
    }
}

/// The first export whose type differs from this version's WIT.
fn first_mismatched_export(pre: &wasmtime::component::InstancePre<StoreState>) -> Option<String> {
    first_mismatched_export!(pre, "ipam:provider/provider@0.2.0", {
        "info": () -> t::ProviderInfo;
        "configure": (&str) -> Result<(), t::Error>;
        "get-vpcs": () -> Result<Vec<t::Vpc>, t::Error>;
        "get-subnets": () -> Result<Vec<t::Subnet>, t::Error>;
        "get-security-groups": () -> Result<Vec<t::SecurityGroup>, t::Error>;
        "get-instances": (&[String]) -> Result<Vec<t::Instance>, t::Error>;
        "get-detached-interfaces": (&[t::Tag]) -> Result<Vec<t::NetworkInterface>, t::Error>;
        "get-instance-limits": (&str) -> Result<t::Limits, t::Error>;
        "create-interface": (&t::CreateInterfaceRequest) -> Result<t::NetworkInterface, t::Error>;
        "delete-interface": (&str) -> Result<(), t::Error>;
        "assign-ips": (&str, t::IpRequest) -> Result<t::Assigned, t::Error>;
        "unassign-ips": (&str, &[t::Ipv4], &[t::Ipv4Net]) -> Result<(), t::Error>;
    })
}

/// Each item of a listing converted (an item that does not is its error).
fn listing<A, B>(
    answer: Result<Vec<A>, t::Error>,
    convert: fn(A) -> Converted<B>,
) -> Result<Vec<Converted<B>>, cloud::ProviderError> {
    answer
        .map(|items| items.into_iter().map(convert).collect())
        .map_err(Into::into)
}

fn converted<A, B>(
    answer: Result<A, t::Error>,
    convert: impl FnOnce(A) -> B,
) -> Result<B, cloud::ProviderError> {
    answer.map(convert).map_err(Into::into)
}

impl Instance {
    pub async fn info(
        &self,
        store: &mut Store<StoreState>,
    ) -> wasmtime::Result<cloud::ProviderInfo> {
        let provider = self.0.ipam_provider_provider();
        Ok(provider.call_info(store).await?.into())
    }

    pub async fn configure(
        &self,
        store: &mut Store<StoreState>,
        settings: &str,
    ) -> GuestResult<()> {
        let provider = self.0.ipam_provider_provider();
        Ok(provider
            .call_configure(store, settings)
            .await?
            .map_err(Into::into))
    }

    pub async fn get_vpcs(
        &self,
        store: &mut Store<StoreState>,
    ) -> GuestResult<Vec<Converted<cloud::Vpc>>> {
        let provider = self.0.ipam_provider_provider();
        Ok(listing(provider.call_get_vpcs(store).await?, vpc))
    }

    pub async fn get_subnets(
        &self,
        store: &mut Store<StoreState>,
    ) -> GuestResult<Vec<Converted<cloud::Subnet>>> {
        let provider = self.0.ipam_provider_provider();
        Ok(listing(provider.call_get_subnets(store).await?, subnet))
    }

    pub async fn get_security_groups(
        &self,
        store: &mut Store<StoreState>,
    ) -> GuestResult<Vec<cloud::SecurityGroup>> {
        let provider = self.0.ipam_provider_provider();
        Ok(converted(
            provider.call_get_security_groups(store).await?,
            |groups| groups.into_iter().map(Into::into).collect(),
        ))
    }

    pub async fn get_instances(
        &self,
        store: &mut Store<StoreState>,
        ids: &[String],
    ) -> GuestResult<Vec<Converted<cloud::Instance>>> {
        let provider = self.0.ipam_provider_provider();
        Ok(listing(
            provider.call_get_instances(store, ids).await?,
            instance,
        ))
    }

    pub async fn get_detached_interfaces(
        &self,
        store: &mut Store<StoreState>,
        tags: &[cloud::Tag],
    ) -> GuestResult<Vec<Converted<cloud::NetworkInterface>>> {
        let tags: Vec<t::Tag> = tags.iter().map(Into::into).collect();
        let provider = self.0.ipam_provider_provider();
        Ok(listing(
            provider.call_get_detached_interfaces(store, &tags).await?,
            |i| interface(i, "interfaces"),
        ))
    }

    pub async fn get_instance_limits(
        &self,
        store: &mut Store<StoreState>,
        instance_type: &str,
    ) -> GuestResult<cloud::InstanceLimits> {
        let provider = self.0.ipam_provider_provider();
        Ok(converted(
            provider
                .call_get_instance_limits(store, instance_type)
                .await?,
            Into::into,
        ))
    }

    pub async fn create_interface(
        &self,
        store: &mut Store<StoreState>,
        request: &cloud::CreateInterfaceRequest,
    ) -> GuestResult<Converted<cloud::NetworkInterface>> {
        let request: t::CreateInterfaceRequest = request.into();
        let provider = self.0.ipam_provider_provider();
        Ok(converted(
            provider.call_create_interface(store, &request).await?,
            |i| interface(i, "interface"),
        ))
    }

    pub async fn delete_interface(
        &self,
        store: &mut Store<StoreState>,
        interface_id: &str,
    ) -> GuestResult<()> {
        let provider = self.0.ipam_provider_provider();
        Ok(provider
            .call_delete_interface(store, interface_id)
            .await?
            .map_err(Into::into))
    }

    pub async fn assign_ips(
        &self,
        store: &mut Store<StoreState>,
        interface_id: &str,
        request: cloud::IpRequest,
    ) -> GuestResult<Converted<cloud::Assigned>> {
        let provider = self.0.ipam_provider_provider();
        Ok(converted(
            provider
                .call_assign_ips(store, interface_id, request.into())
                .await?,
            assigned,
        ))
    }

    pub async fn unassign_ips(
        &self,
        store: &mut Store<StoreState>,
        interface_id: &str,
        addresses: &[Ipv4Addr],
        prefixes: &[cloud::Ipv4Net],
    ) -> GuestResult<()> {
        let addresses: Vec<t::Ipv4> = addresses.iter().map(|a| u32::from(*a)).collect();
        let prefixes: Vec<t::Ipv4Net> = prefixes
            .iter()
            .map(|p| t::Ipv4Net {
                address: u32::from(p.network()),
                length: p.prefix_len(),
            })
            .collect();
        let provider = self.0.ipam_provider_provider();
        Ok(provider
            .call_unassign_ips(store, interface_id, &addresses, &prefixes)
            .await?
            .map_err(Into::into))
    }
}

/// The `host` interface of this version, served from the store's state.
impl wit_host::Host for StoreState {
    fn log(&mut self, level: wit_host::LogLevel, message: String) {
        let level = match level {
            wit_host::LogLevel::Trace => tracing::Level::TRACE,
            wit_host::LogLevel::Debug => tracing::Level::DEBUG,
            wit_host::LogLevel::Info => tracing::Level::INFO,
            wit_host::LogLevel::Warn => tracing::Level::WARN,
            wit_host::LogLevel::Error => tracing::Level::ERROR,
        };
        self.guest_log(level, &message);
    }

    fn get_credentials(&mut self) -> Result<wit_host::Credentials, String> {
        let credentials = self.credentials()?;
        Ok(wit_host::Credentials {
            values: credentials.values.into_iter().collect(),
            expires_at: credentials.expires_at,
        })
    }
}

impl From<t::Tag> for cloud::Tag {
    fn from(tag: t::Tag) -> Self {
        Self {
            key: tag.key,
            value: tag.value,
        }
    }
}

impl From<&cloud::Tag> for t::Tag {
    fn from(tag: &cloud::Tag) -> Self {
        Self {
            key: tag.key.clone(),
            value: tag.value.clone(),
        }
    }
}

fn tags(tags: Vec<t::Tag>) -> Vec<cloud::Tag> {
    tags.into_iter().map(Into::into).collect()
}

fn ip(address: t::Ipv4) -> Ipv4Addr {
    Ipv4Addr::from(address)
}

fn net(at: impl FnOnce() -> String, n: t::Ipv4Net) -> Converted<cloud::Ipv4Net> {
    match cloud::Ipv4Net::new(ip(n.address), n.length) {
        Ok(net) if net.trunc() == net => Ok(net),
        // Rare: the field is named only now.
        _ => network(&at(), ip(n.address), n.length),
    }
}

fn nets(at: impl Fn() -> String, items: Vec<t::Ipv4Net>) -> Converted<Vec<cloud::Ipv4Net>> {
    items
        .into_iter()
        .enumerate()
        .map(|(n, item)| net(|| format!("{}[{n}]", at()), item))
        .collect()
}

fn vpc(v: t::Vpc) -> Converted<cloud::Vpc> {
    let at = || format!("vpcs[{}]", v.id);
    Ok(cloud::Vpc {
        primary_cidr: net(|| format!("{}.primary-cidr", at()), v.primary_cidr)?,
        cidrs: nets(|| format!("{}.cidrs", at()), v.cidrs)?,
        id: v.id,
    })
}

fn subnet(s: t::Subnet) -> Converted<cloud::Subnet> {
    Ok(cloud::Subnet {
        cidr: net(|| format!("subnets[{}].cidr", s.id), s.cidr)?,
        id: s.id,
        availability_zone: s.availability_zone,
        vpc_id: s.vpc_id,
        available_addresses: s.available_addresses,
        tags: tags(s.tags),
    })
}

impl From<t::SecurityGroup> for cloud::SecurityGroup {
    fn from(g: t::SecurityGroup) -> Self {
        Self {
            id: g.id,
            vpc_id: g.vpc_id,
            tags: tags(g.tags),
        }
    }
}

/// An interface, named in errors as `{base}[{id}]`.
fn interface(i: t::NetworkInterface, base: &str) -> Converted<cloud::NetworkInterface> {
    let prefixes = if i.prefixes.is_empty() {
        Vec::new()
    } else {
        nets(|| format!("{base}[{}].prefixes", i.id), i.prefixes)?
    };
    Ok(cloud::NetworkInterface {
        primary_ip: ip(i.primary_ip),
        addresses: i.addresses.into_iter().map(ip).collect(),
        prefixes,
        id: i.id,
        mac: i.mac,
        index: i.index,
        subnet_id: i.subnet_id,
        vpc_id: i.vpc_id,
        security_groups: i.security_groups,
        tags: tags(i.tags),
        instance_id: i.instance_id,
    })
}

fn instance(i: t::Instance) -> Converted<cloud::Instance> {
    let interfaces = if i.interfaces.iter().all(|eni| eni.prefixes.is_empty()) {
        // Nothing can fail: no field names to build.
        i.interfaces
            .into_iter()
            .map(|eni| interface(eni, ""))
            .collect::<Result<_, BadField>>()?
    } else {
        let base = format!("instances[{}].interfaces", i.id);
        i.interfaces
            .into_iter()
            .map(|eni| interface(eni, &base))
            .collect::<Result<_, BadField>>()?
    };
    Ok(cloud::Instance {
        interfaces,
        id: i.id,
        instance_type: i.instance_type,
        availability_zone: i.availability_zone,
        vpc_id: i.vpc_id,
    })
}

fn assigned(a: t::Assigned) -> Converted<cloud::Assigned> {
    Ok(cloud::Assigned {
        addresses: a.addresses.into_iter().map(ip).collect(),
        prefixes: nets(|| "assigned.prefixes".to_string(), a.prefixes)?,
    })
}

impl From<t::Limits> for cloud::InstanceLimits {
    fn from(l: t::Limits) -> Self {
        Self {
            max_interfaces: l.max_interfaces,
            ipv4_per_interface: l.ipv4_per_interface,
            ipv6_per_interface: l.ipv6_per_interface,
            prefix_delegation: l.prefix_delegation,
        }
    }
}

impl From<t::ProviderInfo> for cloud::ProviderInfo {
    fn from(i: t::ProviderInfo) -> Self {
        let c = i.capabilities;
        Self {
            name: i.name,
            version: i.version,
            capabilities: cloud::Capabilities {
                create_interface: c.create_interface,
                release: c.release,
                prefixes: c.prefixes,
                delete_interface: c.delete_interface,
            },
            max_concurrency: i.max_concurrency,
            rate_model: Some(rate_model(i.rate_model)),
        }
    }
}

fn rate_model(m: t::RateModel) -> RateModel {
    RateModel {
        buckets: m
            .buckets
            .into_iter()
            .map(|b| DeclaredBucket {
                name: b.name,
                burst: b.burst,
                per_second: b.per_second,
            })
            .collect(),
        costs: m
            .costs
            .into_iter()
            .map(|c| OperationCost {
                operation: operation(c.operation),
                calls: c
                    .calls
                    .into_iter()
                    .map(|call| ApiCall {
                        name: call.name,
                        bucket: call.bucket,
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn operation(o: t::Operation) -> cloud::Operation {
    use cloud::Operation as O;
    match o {
        t::Operation::GetVpcs => O::GetVpcs,
        t::Operation::GetSubnets => O::GetSubnets,
        t::Operation::GetSecurityGroups => O::GetSecurityGroups,
        t::Operation::GetInstances => O::GetInstances,
        t::Operation::GetDetachedInterfaces => O::GetDetachedInterfaces,
        t::Operation::GetInstanceLimits => O::GetInstanceLimits,
        t::Operation::CreateInterface => O::CreateInterface,
        t::Operation::DeleteInterface => O::DeleteInterface,
        t::Operation::AssignIps => O::AssignIps,
        t::Operation::UnassignIps => O::UnassignIps,
    }
}

impl From<&cloud::CreateInterfaceRequest> for t::CreateInterfaceRequest {
    fn from(r: &cloud::CreateInterfaceRequest) -> Self {
        Self {
            instance_id: r.instance_id.clone(),
            index: r.index,
            subnet_id: r.subnet_id.clone(),
            security_groups: r.security_groups.clone(),
            description: r.description.clone(),
            tags: r.tags.iter().map(Into::into).collect(),
            delete_on_termination: r.delete_on_termination,
            ipv4_count: r.ipv4_count,
            use_prefixes: r.use_prefixes,
        }
    }
}

impl From<cloud::IpRequest> for t::IpRequest {
    fn from(r: cloud::IpRequest) -> Self {
        match r {
            cloud::IpRequest::Addresses(n) => Self::Addresses(n),
            cloud::IpRequest::Prefixes(n) => Self::Prefixes(n),
        }
    }
}

impl From<t::Error> for cloud::ProviderError {
    fn from(e: t::Error) -> Self {
        use cloud::ProviderError as P;
        match e {
            t::Error::Throttled(ms) => P::Throttled(std::time::Duration::from_millis(ms)),
            t::Error::NotFound(m) => P::NotFound(m),
            t::Error::InterfaceLimit(m) => P::InterfaceLimit(m),
            t::Error::AddressLimit(m) => P::AddressLimit(m),
            t::Error::SubnetFull(m) => P::SubnetFull(m),
            t::Error::InsufficientPrefixes(m) => P::InsufficientPrefixes(m),
            t::Error::Conflict(m) => P::Conflict(m),
            t::Error::InvalidArgument(m) => P::InvalidArgument(m),
            t::Error::Unauthorized(m) => P::Unauthorized(m),
            t::Error::Transient(m) => P::Transient(m),
            t::Error::Other(m) => P::Other(m),
        }
    }
}
