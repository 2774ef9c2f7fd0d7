//! What an agent keeps of its saved allocations after a restart, judged
//! against the node's pool and the pods that still exist: an allocation of a
//! pod that is gone is freed; one whose address has left the pool stays
//! while its pod lives (the pod still uses it) but is reported, and is
//! never handed out again since only pool addresses are.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipam_ciliumnode::CiliumNode;

use crate::agent::allocator::{Allocation, Allocations};

/// The outcome of a restore.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    /// Allocations that stay.
    pub kept: Allocations,
    /// Allocations freed because their pod is gone.
    pub freed: Vec<(IpAddr, Allocation)>,
    /// Kept addresses that are no longer in spec.ipam.pool.
    pub outside_pool: Vec<IpAddr>,
}

/// Whether an owner names a pod (`namespace/name`) rather than a bare
/// container id.
fn pod_of(owner: &str) -> Option<&str> {
    owner.contains('/').then_some(owner)
}

/// Judge `saved` against `node` and `live_pods` (`namespace/name` of the
/// pods on this node; `None` when they could not be listed, and then no
/// allocation is freed for want of a pod).
pub fn restore(
    saved: Allocations,
    node: &CiliumNode,
    live_pods: Option<&BTreeSet<String>>,
) -> Restored {
    let in_pool: BTreeSet<IpAddr> = node
        .spec
        .ipam
        .pool
        .keys()
        .filter_map(|ip| ip.parse().ok())
        .collect();
    let mut restored = Restored::default();
    for (ip, allocation) in saved {
        let gone = match (pod_of(&allocation.holder.owner), live_pods) {
            (Some(pod), Some(live)) => !live.contains(pod),
            _ => false,
        };
        if gone {
            restored.freed.push((ip, allocation));
            continue;
        }
        if !in_pool.contains(&ip) {
            restored.outside_pool.push(ip);
        }
        restored.kept.insert(ip, allocation);
    }
    restored
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::allocator::Holder;
    use ipam_ciliumnode::AllocationIp;

    fn saved(entries: &[(&str, &str)]) -> Allocations {
        entries
            .iter()
            .map(|(ip, owner)| {
                (
                    ip.parse().unwrap(),
                    Allocation {
                        holder: Holder {
                            container_id: format!("c-{ip}"),
                            ifname: "eth0".into(),
                            owner: owner.to_string(),
                        },
                        resource: None,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn gone_pods_free_and_addresses_outside_the_pool_are_reported() {
        let mut node = CiliumNode::default();
        for ip in ["10.0.0.1", "10.0.0.2", "10.0.0.3"] {
            node.spec
                .ipam
                .pool
                .insert(ip.into(), AllocationIp::default());
        }
        let live = BTreeSet::from(["default/a".to_string(), "default/d".to_string()]);
        let restored = restore(
            saved(&[
                ("10.0.0.1", "default/a"),   // alive, in the pool
                ("10.0.0.2", "default/b"),   // gone
                ("10.0.0.3", "container-x"), // not a pod: kept
                ("10.0.0.9", "default/d"),   // alive, left the pool
            ]),
            &node,
            Some(&live),
        );
        let kept: Vec<String> = restored.kept.keys().map(ToString::to_string).collect();
        assert_eq!(kept, ["10.0.0.1", "10.0.0.3", "10.0.0.9"]);
        assert_eq!(restored.freed.len(), 1);
        assert_eq!(restored.freed[0].0.to_string(), "10.0.0.2");
        assert_eq!(
            restored.outside_pool,
            ["10.0.0.9".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn nothing_is_freed_when_the_pods_are_unknown() {
        let restored = restore(
            saved(&[("10.0.0.2", "default/b")]),
            &CiliumNode::default(),
            None,
        );
        assert_eq!(restored.kept.len(), 1);
        assert!(restored.freed.is_empty());
    }
}
