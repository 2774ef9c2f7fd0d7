//! Bindings for `ipam:provider@0.1.0`: what every version has in common
//! (`version.rs`), and the conversions of what 0.1.0 has of its own:
//! addresses and networks as text, parsed here (one that does not parse is
//! the field's error), and no rate model.

use std::net::Ipv4Addr;

use ipam_cloud::answer::{parse_address, parse_network, BadField};

wasmtime::component::bindgen!({
    path: "../../wit/0.1.0",
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

super::version::version_bindings!("0.1.0");

/// unassign-ips takes addresses and prefixes as text.
type UnassignAddress = String;
type UnassignPrefix = String;

fn unassign_arguments(
    addresses: &[Ipv4Addr],
    prefixes: &[cloud::Ipv4Net],
) -> (Vec<UnassignAddress>, Vec<UnassignPrefix>) {
    (
        addresses.iter().map(ToString::to_string).collect(),
        prefixes.iter().map(ToString::to_string).collect(),
    )
}

fn networks(at: &dyn Fn() -> String, texts: &[String]) -> Converted<Vec<cloud::Ipv4Net>> {
    texts
        .iter()
        .enumerate()
        .map(|(n, text)| parse_network(|| format!("{}[{n}]", at()), text))
        .collect()
}

fn addresses(at: &dyn Fn() -> String, texts: &[String]) -> Converted<Vec<Ipv4Addr>> {
    texts
        .iter()
        .enumerate()
        .map(|(n, text)| parse_address(|| format!("{}[{n}]", at()), text))
        .collect()
}

fn vpc(v: t::Vpc) -> Converted<cloud::Vpc> {
    let at = || format!("vpcs[{}]", v.id);
    Ok(cloud::Vpc {
        primary_cidr: parse_network(|| format!("{}.primary-cidr", at()), &v.primary_cidr)?,
        cidrs: networks(&|| format!("{}.cidrs", at()), &v.cidrs)?,
        id: v.id,
    })
}

fn subnet(s: t::Subnet) -> Converted<cloud::Subnet> {
    Ok(cloud::Subnet {
        cidr: parse_network(|| format!("subnets[{}].cidr", s.id), &s.cidr)?,
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
    let at = || format!("{}[{}]", base(), i.id);
    Ok(cloud::NetworkInterface {
        primary_ip: parse_address(|| format!("{}.primary-ip", at()), &i.primary_ip)?,
        addresses: addresses(&|| format!("{}.addresses", at()), &i.addresses)?,
        prefixes: networks(&|| format!("{}.prefixes", at()), &i.prefixes)?,
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
        addresses: addresses(&|| "assigned.addresses".to_string(), &a.addresses)?,
        prefixes: networks(&|| "assigned.prefixes".to_string(), &a.prefixes)?,
    })
}

fn provider_info(i: t::ProviderInfo) -> cloud::ProviderInfo {
    cloud::ProviderInfo {
        name: i.name,
        version: i.version,
        capabilities: capabilities(i.capabilities),
        max_concurrency: i.max_concurrency,
        // 0.1.0 has no way to declare one.
        rate_model: None,
    }
}
