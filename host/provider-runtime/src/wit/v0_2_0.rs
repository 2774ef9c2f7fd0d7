//! Bindings for `ipam:provider@0.2.0`: what every version has in common
//! (`version.rs`), and the conversions of what 0.2.0 has of its own:
//! addresses as numbers and networks as address and length (only a network
//! with bits past its length can fail to convert), and the rate model the
//! provider declares.

use std::net::Ipv4Addr;

use ipam_cloud::answer::{network, BadField};
use ipam_cloud::rate::{ApiCall, DeclaredBucket, OperationCost, RateModel};

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

super::version::version_bindings!("0.2.0");

type UnassignAddress = t::Ipv4;
type UnassignPrefix = t::Ipv4Net;

fn unassign_arguments(
    addresses: &[Ipv4Addr],
    prefixes: &[cloud::Ipv4Net],
) -> (Vec<UnassignAddress>, Vec<UnassignPrefix>) {
    let prefixes = prefixes
        .iter()
        .map(|p| t::Ipv4Net {
            address: u32::from(p.network()),
            length: p.prefix_len(),
        })
        .collect();
    (addresses.iter().map(|a| u32::from(*a)).collect(), prefixes)
}

fn ip(address: t::Ipv4) -> Ipv4Addr {
    Ipv4Addr::from(address)
}

fn net(at: impl FnOnce() -> String, n: t::Ipv4Net) -> Converted<cloud::Ipv4Net> {
    network(at, ip(n.address), n.length)
}

fn nets(at: &dyn Fn() -> String, items: Vec<t::Ipv4Net>) -> Converted<Vec<cloud::Ipv4Net>> {
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
        cidrs: nets(&|| format!("{}.cidrs", at()), v.cidrs)?,
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

/// An interface, named in errors as `{base}[{id}]`.
fn interface(
    i: t::NetworkInterface,
    base: &dyn Fn() -> String,
) -> Converted<cloud::NetworkInterface> {
    Ok(cloud::NetworkInterface {
        prefixes: nets(&|| format!("{}[{}].prefixes", base(), i.id), i.prefixes)?,
        primary_ip: ip(i.primary_ip),
        addresses: i.addresses.into_iter().map(ip).collect(),
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
    let t::Instance {
        id,
        instance_type,
        availability_zone,
        vpc_id,
        interfaces,
    } = i;
    let base = || format!("instances[{id}].interfaces");
    let interfaces = interfaces
        .into_iter()
        .map(|eni| interface(eni, &base))
        .collect::<Result<_, BadField>>()?;
    Ok(cloud::Instance {
        interfaces,
        id,
        instance_type,
        availability_zone,
        vpc_id,
    })
}

fn assigned(a: t::Assigned) -> Converted<cloud::Assigned> {
    Ok(cloud::Assigned {
        addresses: a.addresses.into_iter().map(ip).collect(),
        prefixes: nets(&|| "assigned.prefixes".to_string(), a.prefixes)?,
    })
}

fn provider_info(i: t::ProviderInfo) -> cloud::ProviderInfo {
    cloud::ProviderInfo {
        name: i.name,
        version: i.version,
        capabilities: capabilities(i.capabilities),
        max_concurrency: i.max_concurrency,
        rate_model: Some(rate_model(i.rate_model)),
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
