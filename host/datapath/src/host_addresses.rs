//! Keeping the host's own addresses in the endpoint map, as Cilium's
//! `SyncHostIPs` keeps them in its endpoint map: each as an entry with the
//! host flag, stale ones removed, pods' entries left alone. A pod that sends
//! from a host address is then dropped as `host_source`, not `unknown_source`.

use std::collections::BTreeSet;
use std::net::IpAddr;

use agent_ebpf_common::{EndpointInfo, EndpointKey};

use crate::address::endpoint_key;

/// The writes that bring the map's host entries to the wanted set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostSync {
    /// Host entries to write: missing, or held by a pod entry (the host
    /// address wins, as in Cilium).
    pub add: Vec<EndpointKey>,
    /// Host entries for addresses the host no longer has.
    pub remove: Vec<EndpointKey>,
}

/// Plans the sync from the map's current entries and the host's addresses.
pub fn plan_host_sync(current: &[(EndpointKey, EndpointInfo)], wanted: &[IpAddr]) -> HostSync {
    let wanted: BTreeSet<EndpointKey> = wanted.iter().copied().map(endpoint_key).collect();
    let present_hosts: BTreeSet<EndpointKey> = current
        .iter()
        .filter(|(_, info)| info.is_host())
        .map(|(key, _)| *key)
        .collect();
    HostSync {
        add: wanted.difference(&present_hosts).copied().collect(),
        remove: present_hosts.difference(&wanted).copied().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(address: &str) -> EndpointKey {
        endpoint_key(address.parse().unwrap())
    }

    /// A case: name, the map's entries, the host's addresses, the plan.
    type Case = (
        &'static str,
        Vec<(EndpointKey, EndpointInfo)>,
        &'static [&'static str],
        HostSync,
    );

    #[test]
    fn plans() {
        let pod = EndpointInfo::pod(7, 1);
        let host = EndpointInfo::host();
        let cases: &[Case] = &[
            ("empty", vec![], &[], HostSync::default()),
            (
                "first sync",
                vec![(key("10.0.0.7"), pod)],
                &["10.0.0.1", "fd00::1"],
                HostSync {
                    add: vec![key("10.0.0.1"), key("fd00::1")],
                    remove: vec![],
                },
            ),
            (
                "in step",
                vec![(key("10.0.0.1"), host), (key("10.0.0.7"), pod)],
                &["10.0.0.1"],
                HostSync::default(),
            ),
            (
                "an address went away, pods untouched",
                vec![
                    (key("10.0.0.1"), host),
                    (key("10.0.0.2"), host),
                    (key("10.0.0.7"), pod),
                ],
                &["10.0.0.1"],
                HostSync {
                    add: vec![],
                    remove: vec![key("10.0.0.2")],
                },
            ),
            (
                "a pod entry holding a host address is overwritten",
                vec![(key("10.0.0.7"), pod)],
                &["10.0.0.7"],
                HostSync {
                    add: vec![key("10.0.0.7")],
                    remove: vec![],
                },
            ),
        ];
        for (name, current, wanted, want) in cases {
            let wanted: Vec<IpAddr> = wanted.iter().map(|a| a.parse().unwrap()).collect();
            assert_eq!(plan_host_sync(current, &wanted), *want, "{name}");
        }
    }
}
