//! Which Services are shared with the mesh, and the [`ClusterService`] a
//! Service and its EndpointSlices make: pure functions over k8s-openapi
//! types, so that every rule is table-tested.
//!
//! What is taken from where (as cilium-operator does it, but for the
//! terminating endpoints noted below):
//! - exported: Services annotated global (`service.cilium.io/global`, or
//!   the older `io.cilium/global-service`, equal to `true` in any case)
//!   and shared (`service.cilium.io/shared`, or `io.cilium/shared-service`;
//!   `true` when absent). ExternalName Services never are: they have no
//!   addresses.
//! - frontends: the cluster IPs (`spec.clusterIPs`, else `spec.clusterIP`)
//!   with every service port (name -> protocol, port). A headless Service
//!   (`clusterIP: None` or the `service.kubernetes.io/headless` label) has
//!   none. Load-balancer ingress IPs and external IPs are not frontends:
//!   Cilium's ClusterService carries only the cluster IPs, and a peer
//!   merges backends into its own Service of the same name, whose
//!   frontends are its own.
//! - backends: each address of each ready endpoint (`ready` true or unset,
//!   which Kubernetes says means ready) of the IPv4 and IPv6 slices
//!   labelled `kubernetes.io/service-name`, with the slice's ports (name ->
//!   protocol, port; a port with no number means "all ports" and is not
//!   exported). Terminating endpoints are not exported even while still
//!   serving, so that a peer sends no new connections to them (recent
//!   Cilium operators also export serving ones; peers accept either).
//! - hostnames and zones: the endpoint's `hostname`, and its `zone` with
//!   the zones of its hints (`hints.forZones`).
//! - labels and selector from the Service; `includeExternal` and `shared`
//!   true (only such Services are exported); cluster and clusterID from
//!   [`ClusterInfo`].

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cluster::ClusterInfo;
use crate::service::{BackendZone, ClusterService, ForZone, L4Addr, PortConfiguration};

pub const GLOBAL: &str = "service.cilium.io/global";
pub const GLOBAL_ALIAS: &str = "io.cilium/global-service";
pub const SHARED: &str = "service.cilium.io/shared";
pub const SHARED_ALIAS: &str = "io.cilium/shared-service";
/// The label tying an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// The annotation `key`, or its older `alias` when `key` is absent.
fn annotation<'a>(meta: &'a ObjectMeta, key: &str, alias: &str) -> Option<&'a str> {
    let annotations = meta.annotations.as_ref()?;
    annotations
        .get(key)
        .or_else(|| annotations.get(alias))
        .map(String::as_str)
}

fn is_true(value: &str) -> bool {
    value.eq_ignore_ascii_case("true")
}

/// Whether other clusters' backends are merged into this Service.
pub fn is_global(meta: &ObjectMeta) -> bool {
    annotation(meta, GLOBAL, GLOBAL_ALIAS).is_some_and(is_true)
}

/// Whether this Service's backends are offered to other clusters: only a
/// global Service can be, and a global Service is unless it says not.
pub fn is_shared(meta: &ObjectMeta) -> bool {
    is_global(meta) && annotation(meta, SHARED, SHARED_ALIAS).is_none_or(is_true)
}

/// An address in the text form Go's `netip.Addr` prints (RFC 5952 for
/// IPv6, as Rust's), so the map keys are what peers would write.
fn canonical_ip(text: &str) -> Option<String> {
    text.parse::<IpAddr>().ok().map(|ip| ip.to_string())
}

fn port_number(port: i32) -> Option<u16> {
    u16::try_from(port).ok().filter(|p| *p != 0)
}

fn frontend_ports(service: &Service) -> PortConfiguration {
    let mut ports = PortConfiguration::new();
    let listed = service.spec.as_ref().and_then(|s| s.ports.as_deref());
    for port in listed.unwrap_or_default() {
        let Some(number) = port_number(port.port) else {
            continue;
        };
        // Names are unique within a Service; should two collide anyway,
        // the first is kept, as Cilium does.
        ports
            .entry(port.name.clone().unwrap_or_default())
            .or_insert_with(|| L4Addr {
                protocol: port.protocol.clone().unwrap_or_else(|| "TCP".into()),
                port: number,
            });
    }
    ports
}

fn is_headless(service: &Service) -> bool {
    let labelled = service
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(HEADLESS_LABEL));
    let none = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .is_some_and(|ip| ip.eq_ignore_ascii_case("none"));
    labelled || none
}

fn frontends(service: &Service) -> BTreeMap<String, PortConfiguration> {
    let Some(spec) = service.spec.as_ref() else {
        return BTreeMap::new();
    };
    if is_headless(service) {
        return BTreeMap::new();
    }
    let ports = frontend_ports(service);
    let ips: Vec<&String> = match spec.cluster_ips.as_deref() {
        Some(ips) if !ips.is_empty() => ips.iter().collect(),
        _ => spec.cluster_ip.iter().collect(),
    };
    ips.into_iter()
        .filter_map(|ip| canonical_ip(ip))
        .map(|ip| (ip, ports.clone()))
        .collect()
}

/// A slice's ports as Cilium reads them: no protocol is TCP, a protocol
/// Cilium does not balance or a port with no number is left out.
fn slice_ports(slice: &EndpointSlice) -> PortConfiguration {
    let mut ports = PortConfiguration::new();
    for port in slice.ports.as_deref().unwrap_or_default() {
        let protocol = port.protocol.as_deref().unwrap_or("TCP");
        if !matches!(protocol, "TCP" | "UDP" | "SCTP") {
            continue;
        }
        let Some(number) = port.port.and_then(port_number) else {
            continue;
        };
        ports.insert(
            port.name.clone().unwrap_or_default(),
            L4Addr {
                protocol: protocol.into(),
                port: number,
            },
        );
    }
    ports
}

struct Backends {
    ports: BTreeMap<String, PortConfiguration>,
    hostnames: BTreeMap<String, String>,
    zones: BTreeMap<String, BackendZone>,
}

fn backends<'a>(slices: impl IntoIterator<Item = &'a EndpointSlice>) -> Backends {
    let mut out = Backends {
        ports: BTreeMap::new(),
        hostnames: BTreeMap::new(),
        zones: BTreeMap::new(),
    };
    for slice in slices {
        // FQDN slices name hosts, not addresses a datapath can balance to.
        if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
            continue;
        }
        let ports = slice_ports(slice);
        for endpoint in &slice.endpoints {
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            if !ready {
                continue;
            }
            for address in endpoint.addresses.iter().filter_map(|a| canonical_ip(a)) {
                // An address in two slices (a slice being split or merged)
                // serves the ports of both.
                let entry = out.ports.entry(address.clone()).or_default();
                for (name, port) in &ports {
                    entry.entry(name.clone()).or_insert_with(|| port.clone());
                }
                if let Some(hostname) = endpoint.hostname.as_ref().filter(|h| !h.is_empty()) {
                    out.hostnames
                        .entry(address.clone())
                        .or_insert_with(|| hostname.clone());
                }
                if let Some(zone) = endpoint.zone.as_ref().filter(|z| !z.is_empty()) {
                    let for_zones = endpoint
                        .hints
                        .as_ref()
                        .and_then(|h| h.for_zones.as_deref())
                        .unwrap_or_default()
                        .iter()
                        .map(|z| ForZone {
                            name: z.name.clone(),
                        })
                        .collect();
                    out.zones.entry(address).or_insert_with(|| BackendZone {
                        zone: zone.clone(),
                        for_zones,
                    });
                }
            }
        }
    }
    out
}

/// The value a Service and its EndpointSlices make, or `None` when the
/// Service is not exported (not global, not shared, ExternalName, or with
/// no namespace or name). `slices` are the Service's slices, in a fixed
/// order (by name) so that the first of two conflicting hostnames wins
/// every time.
pub fn cluster_service<'a>(
    cluster: &ClusterInfo,
    service: &Service,
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
) -> Option<ClusterService> {
    let meta = &service.metadata;
    if !is_shared(meta) {
        return None;
    }
    let spec_type = service.spec.as_ref().and_then(|s| s.type_.as_deref());
    if spec_type == Some("ExternalName") {
        return None;
    }
    let namespace = meta.namespace.clone().filter(|n| !n.is_empty())?;
    let name = meta.name.clone().filter(|n| !n.is_empty())?;
    let backends = backends(slices);
    Some(ClusterService {
        cluster: cluster.name().to_string(),
        namespace,
        name,
        frontends: frontends(service),
        backends: backends.ports,
        hostnames: backends.hostnames,
        zones: backends.zones,
        labels: meta.labels.clone().unwrap_or_default(),
        selector: service
            .spec
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default(),
        include_external: true,
        shared: true,
        cluster_id: cluster.id(),
    })
}

#[cfg(test)]
mod tests;
