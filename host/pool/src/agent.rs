//! A cilium-agent's side of the pool, as plain functions of its node: the
//! answers to the release handshake (ready-for-release for an unused
//! address, do-not-release for a used one, a released entry dropped once the
//! address left the pool), pods placed on free pool addresses (never one in
//! the handshake), and whether the node is satisfied or settled. The
//! simulation and the engine's tests play agents with these.

use std::collections::BTreeMap;

use ipam_ciliumnode::{AllocationIp, CiliumNode, ReleaseState};

use crate::node_view::NodeView;
use crate::pool::count;
use crate::watermarks;

/// One node's agent decisions, as a pure function of the node: the node
/// after the agent's changes (if any) and the pods left pending.
pub fn act(node: &CiliumNode, pods_wanted: u32) -> (Option<CiliumNode>, u32) {
    let mut next = node.clone();
    let ipam = &mut next.status.ipam;
    // The handshake.
    let mut answers = BTreeMap::new();
    for (ip, state) in &ipam.release_ips {
        match state {
            ReleaseState::MarkedForRelease if ipam.used.contains_key(ip) => {
                answers.insert(ip.clone(), Some(ReleaseState::DoNotRelease));
            }
            ReleaseState::MarkedForRelease => {
                answers.insert(ip.clone(), Some(ReleaseState::ReadyForRelease));
            }
            ReleaseState::Released if !next.spec.ipam.pool.contains_key(ip) => {
                answers.insert(ip.clone(), None);
            }
            _ => {}
        }
    }
    for (ip, answer) in answers {
        match answer {
            Some(state) => ipam.release_ips.insert(ip, state),
            None => ipam.release_ips.remove(&ip),
        };
    }
    // Pods stop (the highest addresses first) or start on free addresses
    // that are not in the handshake.
    let wanted = pods_wanted as usize;
    while ipam.used.len() > wanted {
        ipam.used.pop_last();
    }
    let free: Vec<String> = next
        .spec
        .ipam
        .pool
        .keys()
        .filter(|ip| !ipam.used.contains_key(*ip) && !ipam.release_ips.contains_key(*ip))
        .take(wanted.saturating_sub(ipam.used.len()))
        .cloned()
        .collect();
    for ip in free {
        let owner = format!("sim/pod-{}", ip.replace('.', "-"));
        ipam.used.insert(
            ip,
            AllocationIp {
                owner: Some(owner),
                resource: None,
            },
        );
    }
    let pending = count(wanted.saturating_sub(ipam.used.len()));
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
