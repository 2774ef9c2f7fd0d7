//! A node agent's side of the pool, as plain functions of its node: which
//! address a pod gets ([`allocator`]), the answers to the release handshake
//! ([`answers`]), what survives a restart ([`restore`]), where an address
//! lives ([`placement`]), and whether a node is satisfied or settled. The
//! node agent (`ipam-agent`) runs these for real pods; the simulation and
//! the engine's tests play agents with [`act`], built from the same pieces.

pub mod allocator;
pub mod answers;
pub mod placement;
pub mod restore;

use ipam_ciliumnode::{CiliumNode, ReleaseState};

use crate::node_view::NodeView;
use crate::pool::count;
use crate::watermarks;

use allocator::{used_status, Allocation, Allocations, Holder};

/// A simulated pod's holder: one per address, named after it.
fn simulated_holder(ip: &std::net::IpAddr) -> Holder {
    let name = format!("pod-{}", ip.to_string().replace(['.', ':'], "-"));
    Holder {
        container_id: name.clone(),
        ifname: "eth0".into(),
        owner: format!("sim/{name}"),
    }
}

/// One node's simulated agent, as a pure function of the node: it answers
/// the handshake, stops pods (highest addresses first) or starts them on
/// free addresses until `pods_wanted` run; the node after its changes (if
/// any) and the pods left pending.
pub fn act(node: &CiliumNode, pods_wanted: u32) -> (Option<CiliumNode>, u32) {
    let mut next = node.clone();
    // The simulated pods are status.ipam.used itself.
    let mut allocations: Allocations = node
        .status
        .ipam
        .used
        .iter()
        .filter_map(|(ip, entry)| {
            let ip = ip.parse().ok()?;
            let mut holder = simulated_holder(&ip);
            if let Some(owner) = &entry.owner {
                holder.owner = owner.clone();
            }
            Some((
                ip,
                Allocation {
                    holder,
                    resource: entry.resource.clone(),
                },
            ))
        })
        .collect();
    for (ip, answer) in answers::answers(node, |ip| {
        ip.parse().is_ok_and(|ip| allocations.contains_key(&ip))
    }) {
        match answer {
            Some(state) => next.status.ipam.release_ips.insert(ip, state),
            None => next.status.ipam.release_ips.remove(&ip),
        };
    }
    let wanted = pods_wanted as usize;
    while allocations.len() > wanted {
        allocations.pop_last();
    }
    // Free addresses are judged against the agent's own allocations only:
    // status.ipam.used is rewritten from them below.
    next.status.ipam.used.clear();
    let mut started = Allocations::new();
    let pool = allocator::PoolIndex::new(&next);
    while allocations.len() < wanted {
        let Some((ip, resource)) = pool.free(&allocations).next() else {
            break;
        };
        let allocation = Allocation {
            holder: simulated_holder(&ip),
            resource: resource.map(String::from),
        };
        allocations.insert(ip, allocation.clone());
        started.insert(ip, allocation);
    }
    // Pods that keep running keep their entries as written.
    next.status.ipam.used = node.status.ipam.used.clone();
    next.status
        .ipam
        .used
        .retain(|ip, _| ip.parse().is_ok_and(|ip| allocations.contains_key(&ip)));
    next.status.ipam.used.extend(used_status(&started));
    let pending = count(wanted.saturating_sub(allocations.len()));
    let changed = next.status.ipam != node.status.ipam;
    (changed.then_some(next), pending)
}

fn counts(node: &CiliumNode) -> (u32, u32) {
    (
        count(node.spec.ipam.pool.len()),
        count(node.status.ipam.used.len()),
    )
}

/// Every pod has an address and the node needs nothing more.
pub fn satisfied(node: &CiliumNode, pending: u32) -> bool {
    let (available, used) = counts(node);
    pending == 0 && watermarks::needed(node.watermarks(), available, used) == 0
}

/// Satisfied, with nothing excess and no release in progress either.
pub fn settled(node: &CiliumNode, pending: u32) -> bool {
    let (available, used) = counts(node);
    satisfied(node, pending)
        && watermarks::excess(node.watermarks(), available, used) == 0
        && node
            .status
            .ipam
            .release_ips
            .values()
            .all(|state| *state == ReleaseState::Released)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_ciliumnode::AllocationIp;

    const MARKED_FOR_RELEASE: &str = "marked-for-release";
    const READY_FOR_RELEASE: &str = "ready-for-release";
    const RELEASED: &str = "released";

    /// A node as an agent would find it (release-ips in the CRD's spellings).
    fn node(pool: &[&str], used: &[&str], release: &[(&str, &str)]) -> CiliumNode {
        let mut node = CiliumNode {
            name: "n".into(),
            ..Default::default()
        };
        for ip in pool {
            node.spec
                .ipam
                .pool
                .insert(ip.to_string(), AllocationIp::default());
        }
        for ip in used {
            node.status
                .ipam
                .used
                .insert(ip.to_string(), AllocationIp::default());
        }
        for (ip, state) in release {
            node.status
                .ipam
                .release_ips
                .insert(ip.to_string(), ReleaseState::from(state.to_string()));
        }
        node
    }

    #[test]
    fn pods_take_free_addresses_and_wait_when_there_are_none() {
        let (next, pending) = act(&node(&["10.0.0.1", "10.0.0.2"], &[], &[]), 3);
        let next = next.unwrap();
        assert_eq!(next.status.ipam.used.len(), 2);
        assert_eq!(pending, 1);
        let (same, pending) = act(&next, 2);
        assert!(same.is_none(), "nothing to change");
        assert_eq!(pending, 0);
    }

    #[test]
    fn the_handshake_is_answered_as_the_agent_does() {
        let n = node(
            &["10.0.0.1", "10.0.0.2"],
            &["10.0.0.1"],
            &[
                ("10.0.0.1", MARKED_FOR_RELEASE),
                ("10.0.0.2", MARKED_FOR_RELEASE),
                ("10.0.0.9", RELEASED),
            ],
        );
        let next = act(&n, 1).0.unwrap();
        let states = &next.status.ipam.release_ips;
        assert_eq!(states["10.0.0.1"], ReleaseState::DoNotRelease);
        assert_eq!(states["10.0.0.2"], ReleaseState::ReadyForRelease);
        assert!(
            !states.contains_key("10.0.0.9"),
            "released and gone from the pool"
        );
    }

    #[test]
    fn a_released_entry_stays_while_its_address_is_still_in_the_pool() {
        let n = node(&["10.0.0.1", "10.0.0.2"], &[], &[("10.0.0.1", RELEASED)]);
        let next = act(&n, 0).0;
        assert!(next.is_none(), "still in the pool: the entry stays");
    }

    #[test]
    fn pods_stop_down_to_the_wanted_count_highest_address_first() {
        let n = node(
            &["10.0.0.1", "10.0.0.2", "10.0.0.3"],
            &["10.0.0.1", "10.0.0.2", "10.0.0.3"],
            &[],
        );
        let (next, pending) = act(&n, 1);
        assert_eq!(
            next.unwrap().status.ipam.used.keys().collect::<Vec<_>>(),
            ["10.0.0.1"]
        );
        assert_eq!(pending, 0);
        let (same, _) = act(&n, 3);
        assert!(same.is_none(), "as many as wanted: nothing stops");
    }

    #[test]
    fn satisfied_and_settled() {
        // pre-allocate 2 (set below); (pool, used, release-ips, pending).
        let mut full = node(&["10.0.0.1", "10.0.0.2", "10.0.0.3"], &["10.0.0.1"], &[]);
        full.spec.ipam.pre_allocate = Some(2);
        assert!(satisfied(&full, 0) && settled(&full, 0));
        assert!(!satisfied(&full, 1), "a pod pending");
        let mut short = node(&["10.0.0.1", "10.0.0.2"], &["10.0.0.1"], &[]);
        short.spec.ipam.pre_allocate = Some(2);
        assert!(!satisfied(&short, 0), "one more needed");
        let mut excess = node(
            &["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"],
            &["10.0.0.1"],
            &[],
        );
        excess.spec.ipam.pre_allocate = Some(2);
        assert!(satisfied(&excess, 0) && !settled(&excess, 0), "two excess");
        let mut releasing = full.clone();
        releasing
            .status
            .ipam
            .release_ips
            .insert("10.0.0.3".into(), ReleaseState::MarkedForRelease);
        assert!(!settled(&releasing, 0), "a release in progress");
        releasing
            .status
            .ipam
            .release_ips
            .insert("10.0.0.3".into(), ReleaseState::Released);
        assert!(settled(&releasing, 0), "released is done");
    }

    #[test]
    fn addresses_in_the_handshake_are_not_given_to_pods() {
        let n = node(
            &["10.0.0.1", "10.0.0.2"],
            &[],
            &[("10.0.0.1", READY_FOR_RELEASE)],
        );
        let (next, pending) = act(&n, 2);
        let next = next.unwrap();
        assert_eq!(
            next.status.ipam.used.keys().collect::<Vec<_>>(),
            ["10.0.0.2"]
        );
        assert_eq!(pending, 1);
    }
}
