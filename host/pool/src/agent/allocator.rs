//! Which address a pod gets, as a pure function of the node and the agent's
//! allocations: only addresses in spec.ipam.pool that no pod uses (neither
//! in the agent's allocations nor in status.ipam.used), that the pool does
//! not mark as owned, and that carry no release state at all (an address in
//! the handshake is on its way out). A retried ADD for the same attachment
//! gets the address it already has.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipam_ciliumnode::{AllocationIp, CiliumNode};

/// What holds an address: a CNI attachment (container id and interface
/// name, the key CNI's DEL, CHECK and GC use) and its owner as written to
/// status.ipam.used (`namespace/pod`, or the container id for a container
/// that is not a pod).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Holder {
    pub container_id: String,
    pub ifname: String,
    pub owner: String,
}

impl Holder {
    pub fn attachment(&self) -> (&str, &str) {
        (&self.container_id, &self.ifname)
    }
}

/// One address given out: who holds it and the interface it is on (the
/// pool entry's resource, e.g. an ENI id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub holder: Holder,
    pub resource: Option<String>,
}

/// Everything the agent has given out, by address.
pub type Allocations = BTreeMap<IpAddr, Allocation>;

/// What an ADD gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// The attachment already holds this address (a retried ADD).
    Existing(IpAddr),
    /// A free address and its pool entry's resource.
    Fresh {
        ip: IpAddr,
        resource: Option<String>,
    },
    /// Nothing free: the operator has not grown the pool yet.
    Exhausted(Blocked),
}

/// Why no pool address is free: each of the pool's addresses counted once,
/// under the first thing that keeps it from an ADD.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Blocked {
    pub pool: usize,
    /// Allocated by this agent to an attachment.
    pub allocated: usize,
    /// In status.ipam.used though no attachment holds it here: freed, until
    /// the agent's status patch goes through (or another writer's entry).
    pub used_in_status: usize,
    /// In status.ipam.release-ips: on its way out of the pool.
    pub in_handshake: usize,
    /// Given an owner in spec.ipam.pool itself.
    pub owned: usize,
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "of the pool's {}, {} are allocated here, {} still in status.ipam.used (freed, waiting for the status write), {} in the release handshake, {} owned in the pool",
            self.pool, self.allocated, self.used_in_status, self.in_handshake, self.owned
        )
    }
}

/// The address of `holder`'s attachment, if it has one.
pub fn held_by(allocations: &Allocations, container_id: &str, ifname: &str) -> Option<IpAddr> {
    allocations
        .iter()
        .find(|(_, a)| a.holder.attachment() == (container_id, ifname))
        .map(|(ip, _)| *ip)
}

/// The node's pool as an ADD reads it, parsed once per change of the node
/// rather than once per ADD: the addresses that may be handed out (in
/// spec.ipam.pool, not owned) in pool order with their resource, and those
/// the node's status puts off limits (in status.ipam.used, or in the
/// release handshake).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolIndex {
    candidates: Vec<(IpAddr, Option<String>)>,
    used: BTreeSet<IpAddr>,
    in_handshake: BTreeSet<IpAddr>,
    pool_size: usize,
}

impl PoolIndex {
    /// Pool and status keys that are not addresses are skipped.
    pub fn new(node: &CiliumNode) -> Self {
        let status = &node.status.ipam;
        fn parsed<'a>(keys: impl Iterator<Item = &'a String>) -> BTreeSet<IpAddr> {
            keys.filter_map(|ip| ip.parse().ok()).collect()
        }
        Self {
            candidates: node
                .spec
                .ipam
                .pool
                .iter()
                .filter(|(_, entry)| entry.owner.as_deref().is_none_or(str::is_empty))
                .filter_map(|(ip, entry)| Some((ip.parse().ok()?, entry.resource.clone())))
                .collect(),
            used: parsed(status.used.keys()),
            in_handshake: parsed(status.release_ips.keys()),
            pool_size: node.spec.ipam.pool.len(),
        }
    }

    /// Follows a change the agent made itself to status.ipam.used (`key`
    /// set when `present`, else removed) without indexing the node again.
    pub fn note_used(&mut self, key: &str, present: bool) {
        Self::note(&mut self.used, key, present);
    }

    /// Follows a change the agent made itself to status.ipam.release-ips.
    pub fn note_release(&mut self, key: &str, present: bool) {
        Self::note(&mut self.in_handshake, key, present);
    }

    fn note(set: &mut BTreeSet<IpAddr>, key: &str, present: bool) {
        let Ok(ip) = key.parse() else { return };
        if present {
            set.insert(ip);
        } else {
            set.remove(&ip);
        }
    }

    /// The pool addresses free to hand out, in pool order, with their
    /// resource: not allocated by the agent, not used in the status, in no
    /// release state.
    pub fn free<'a>(
        &'a self,
        allocations: &'a Allocations,
    ) -> impl Iterator<Item = (IpAddr, Option<&'a str>)> + 'a {
        self.candidates
            .iter()
            .filter(move |(ip, _)| {
                !allocations.contains_key(ip)
                    && !self.used.contains(ip)
                    && !self.in_handshake.contains(ip)
            })
            .map(|(ip, resource)| (*ip, resource.as_deref()))
    }

    /// The address for an ADD of `holder`.
    pub fn choose(&self, allocations: &Allocations, holder: &Holder) -> Choice {
        if let Some(ip) = held_by(allocations, &holder.container_id, &holder.ifname) {
            return Choice::Existing(ip);
        }
        match self.free(allocations).next() {
            Some((ip, resource)) => Choice::Fresh {
                ip,
                resource: resource.map(String::from),
            },
            None => Choice::Exhausted(self.blocked(allocations)),
        }
    }

    /// What keeps each pool address from an ADD.
    pub fn blocked(&self, allocations: &Allocations) -> Blocked {
        let mut blocked = Blocked {
            pool: self.pool_size,
            owned: self.pool_size.saturating_sub(self.candidates.len()),
            ..Blocked::default()
        };
        for (ip, _) in &self.candidates {
            if allocations.contains_key(ip) {
                blocked.allocated += 1;
            } else if self.used.contains(ip) {
                blocked.used_in_status += 1;
            } else if self.in_handshake.contains(ip) {
                blocked.in_handshake += 1;
            }
        }
        blocked
    }
}

/// The addresses a CNI GC frees: those whose attachment is not in `valid`.
pub fn collect_garbage(
    allocations: &Allocations,
    valid: &BTreeSet<(String, String)>,
) -> Vec<IpAddr> {
    allocations
        .iter()
        .filter(|(_, a)| !valid.contains(&(a.holder.container_id.clone(), a.holder.ifname.clone())))
        .map(|(ip, _)| *ip)
        .collect()
}

/// status.ipam.used as the agent publishes it: every allocation with its
/// owner and its interface ([`used_entry`]), keyed by the address.
pub fn used_status(allocations: &Allocations) -> BTreeMap<String, AllocationIp> {
    allocations
        .iter()
        .map(|(ip, a)| (ip.to_string(), used_entry(a)))
        .collect()
}

/// The status.ipam.used entry of one allocation: its owner and interface.
pub fn used_entry(allocation: &Allocation) -> AllocationIp {
    AllocationIp {
        owner: Some(allocation.holder.owner.clone()),
        resource: allocation.resource.clone(),
    }
}

/// Whether `entry` is what [`used_entry`] publishes for `allocation`,
/// compared without building it.
pub fn publishes(entry: &AllocationIp, allocation: &Allocation) -> bool {
    entry.owner.as_deref() == Some(allocation.holder.owner.as_str())
        && entry.resource == allocation.resource
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_ciliumnode::ReleaseState;

    fn holder(id: &str) -> Holder {
        Holder {
            container_id: id.into(),
            ifname: "eth0".into(),
            owner: format!("default/{id}"),
        }
    }

    fn node(pool: &[(&str, Option<&str>)]) -> CiliumNode {
        let mut node = CiliumNode::default();
        for (ip, owner) in pool {
            node.spec.ipam.pool.insert(
                ip.to_string(),
                AllocationIp {
                    owner: owner.map(String::from),
                    resource: Some("eni-1".into()),
                },
            );
        }
        node
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    /// One choice over a freshly indexed pool.
    fn choose(node: &CiliumNode, allocations: &Allocations, holder: &Holder) -> Choice {
        PoolIndex::new(node).choose(allocations, holder)
    }

    fn allocated(ips: &[(&str, &str)]) -> Allocations {
        ips.iter()
            .map(|(ip_text, id)| {
                (
                    ip(ip_text),
                    Allocation {
                        holder: holder(id),
                        resource: Some("eni-1".into()),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn only_free_unowned_addresses_outside_the_handshake_are_chosen() {
        // (what makes 10.0.0.1 unavailable, expected choice for pod b)
        let mut base = node(&[("10.0.0.1", None), ("10.0.0.2", None)]);
        let fresh_2 = Choice::Fresh {
            ip: ip("10.0.0.2"),
            resource: Some("eni-1".into()),
        };
        let cases: Vec<(&str, CiliumNode, Allocations)> = vec![
            (
                "allocated by the agent",
                base.clone(),
                allocated(&[("10.0.0.1", "a")]),
            ),
            (
                "owned in the pool",
                node(&[("10.0.0.1", Some("x")), ("10.0.0.2", None)]),
                Allocations::new(),
            ),
            {
                let mut n = base.clone();
                n.status
                    .ipam
                    .used
                    .insert("10.0.0.1".into(), AllocationIp::default());
                ("used in the status", n, Allocations::new())
            },
            {
                let mut n = base.clone();
                n.status
                    .ipam
                    .release_ips
                    .insert("10.0.0.1".into(), ReleaseState::ReadyForRelease);
                ("in the handshake", n, Allocations::new())
            },
        ];
        for (why, n, allocations) in cases {
            assert_eq!(choose(&n, &allocations, &holder("b")), fresh_2, "{why}");
        }
        base.status
            .ipam
            .release_ips
            .insert("10.0.0.2".into(), ReleaseState::Released);
        assert_eq!(
            choose(&base, &allocated(&[("10.0.0.1", "a")]), &holder("b")),
            Choice::Exhausted(Blocked {
                pool: 2,
                allocated: 1,
                in_handshake: 1,
                ..Blocked::default()
            }),
            "released but still in the pool: not handed out"
        );
    }

    #[test]
    fn an_exhausted_pool_says_what_holds_each_address() {
        let mut n = node(&[
            ("10.0.0.1", None),
            ("10.0.0.2", None),
            ("10.0.0.3", None),
            ("10.0.0.4", Some("x")),
        ]);
        // Freed by the agent, its status write not through yet.
        n.status
            .ipam
            .used
            .insert("10.0.0.2".into(), AllocationIp::default());
        n.status
            .ipam
            .release_ips
            .insert("10.0.0.3".into(), ReleaseState::MarkedForRelease);
        let Choice::Exhausted(blocked) = choose(&n, &allocated(&[("10.0.0.1", "a")]), &holder("b"))
        else {
            panic!("nothing is free");
        };
        assert_eq!(
            blocked,
            Blocked {
                pool: 4,
                allocated: 1,
                used_in_status: 1,
                in_handshake: 1,
                owned: 1
            }
        );
        let text = blocked.to_string();
        assert!(
            text.contains("of the pool's 4, 1 are allocated here, 1 still in status.ipam.used"),
            "{text}"
        );
    }

    #[test]
    fn noted_status_changes_match_a_fresh_index() {
        let mut node = node(&[("10.0.0.1", None), ("10.0.0.2", None), ("10.0.0.3", None)]);
        node.status
            .ipam
            .used
            .insert("10.0.0.1".into(), AllocationIp::default());
        let mut index = PoolIndex::new(&node);
        node.status.ipam.used.remove("10.0.0.1");
        index.note_used("10.0.0.1", false);
        node.status
            .ipam
            .used
            .insert("10.0.0.2".into(), AllocationIp::default());
        index.note_used("10.0.0.2", true);
        node.status
            .ipam
            .release_ips
            .insert("10.0.0.3".into(), ReleaseState::DoNotRelease);
        index.note_release("10.0.0.3", true);
        index.note_used("not-an-ip", true);
        assert_eq!(index, PoolIndex::new(&node));
        let free: Vec<_> = index.free(&Allocations::new()).map(|(ip, _)| ip).collect();
        assert_eq!(free, [ip("10.0.0.1")]);
    }

    #[test]
    fn a_retried_add_gets_the_same_address_and_bad_pool_keys_are_skipped() {
        let n = node(&[("not-an-ip", None), ("10.0.0.1", None), ("10.0.0.2", None)]);
        let allocations = allocated(&[("10.0.0.2", "a")]);
        assert_eq!(
            choose(&n, &allocations, &holder("a")),
            Choice::Existing(ip("10.0.0.2"))
        );
        assert_eq!(
            choose(&n, &allocations, &holder("b")),
            Choice::Fresh {
                ip: ip("10.0.0.1"),
                resource: Some("eni-1".into())
            }
        );
    }

    #[test]
    fn gc_frees_attachments_not_in_the_valid_list() {
        let allocations = allocated(&[("10.0.0.1", "a"), ("10.0.0.2", "b")]);
        let valid = BTreeSet::from([("a".to_string(), "eth0".to_string())]);
        assert_eq!(collect_garbage(&allocations, &valid), [ip("10.0.0.2")]);
        assert_eq!(collect_garbage(&allocations, &BTreeSet::new()).len(), 2);
    }

    #[test]
    fn an_allocation_publishes_its_own_entry_only() {
        let allocation = &allocated(&[("10.0.0.1", "a")])[&ip("10.0.0.1")];
        let entry = used_entry(allocation);
        assert!(publishes(&entry, allocation));
        for other in [
            AllocationIp::default(),
            AllocationIp {
                owner: Some("default/b".into()),
                ..entry.clone()
            },
            AllocationIp {
                resource: None,
                ..entry.clone()
            },
        ] {
            assert!(!publishes(&other, allocation), "{other:?}");
        }
    }

    #[test]
    fn used_status_names_owner_and_interface() {
        let used = used_status(&allocated(&[("10.0.0.1", "a")]));
        assert_eq!(used["10.0.0.1"].owner.as_deref(), Some("default/a"));
        assert_eq!(used["10.0.0.1"].resource.as_deref(), Some("eni-1"));
    }
}
