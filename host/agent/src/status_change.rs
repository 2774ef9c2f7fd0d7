//! What the agent publishes of its node's status: status.ipam.used (its
//! allocations, owner and interface) and its answers in the release
//! handshake (release-ips), as a typed change that is both sent, as a merge
//! patch naming only those two fields, and applied to the agent's own view
//! of the node once the API server took it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::IpAddr;

use ipam_ciliumnode::{AllocationIp, CiliumNode, ReleaseState};
use ipam_pool::agent::allocator::{publishes, used_entry, Allocations};
use ipam_pool::agent::answers::answers;
use serde_json::{json, Map, Value};

/// Entries of status.ipam.used and release-ips to set (`Some`) or remove
/// (`None`), by address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusChange {
    pub used: BTreeMap<String, Option<AllocationIp>>,
    pub release: BTreeMap<String, Option<ReleaseState>>,
}

impl StatusChange {
    pub fn is_empty(&self) -> bool {
        self.used.is_empty() && self.release.is_empty()
    }

    /// The JSON merge patch of the status subresource: a removal is a
    /// null, and a field without entries is left out.
    pub fn to_patch(&self) -> Value {
        let mut ipam = Map::new();
        if !self.used.is_empty() {
            let used = self
                .used
                .iter()
                .map(|(ip, entry)| (ip.clone(), entry.as_ref().map_or(Value::Null, |e| json!(e))))
                .collect();
            ipam.insert("used".into(), Value::Object(used));
        }
        if !self.release.is_empty() {
            let release = self
                .release
                .iter()
                .map(|(ip, state)| {
                    let value = state.as_ref().map_or(Value::Null, |state| {
                        Value::String(state.as_str().to_string())
                    });
                    (ip.clone(), value)
                })
                .collect();
            ipam.insert("release-ips".into(), Value::Object(release));
        }
        json!({ "status": { "ipam": ipam } })
    }

    /// Applies the change to a view of the node, as the API server applied
    /// the patch.
    pub fn apply(&self, node: &mut CiliumNode) {
        let status = &mut node.status.ipam;
        for (ip, entry) in &self.used {
            match entry {
                Some(entry) => status.used.insert(ip.clone(), entry.clone()),
                None => status.used.remove(ip),
            };
        }
        for (ip, state) in &self.release {
            match state {
                Some(state) => status.release_ips.insert(ip.clone(), state.clone()),
                None => status.release_ips.remove(ip),
            };
        }
    }
}

/// The change that brings `node`'s status in step with `allocations`; None
/// when nothing differs. It runs under the allocator's lock at every
/// publish, so it allocates only for what differs: each address is written
/// into one reused buffer and compared field by field.
pub fn status_change(node: &CiliumNode, allocations: &Allocations) -> Option<StatusChange> {
    let used = &node.status.ipam.used;
    let mut change = StatusChange::default();
    let mut text = String::new();
    for (ip, allocation) in allocations {
        text.clear();
        // Writing into a String cannot fail.
        let _ = write!(text, "{ip}");
        let in_step = used
            .get(text.as_str())
            .is_some_and(|entry| publishes(entry, allocation));
        if !in_step {
            change
                .used
                .insert(text.clone(), Some(used_entry(allocation)));
        }
    }
    for key in used.keys() {
        // Held means an allocation's address written as the agent writes
        // it; another spelling of the same address goes.
        let held = key.parse::<IpAddr>().is_ok_and(|ip| {
            allocations.contains_key(&ip) && {
                text.clear();
                let _ = write!(text, "{ip}");
                text == *key
            }
        });
        if !held {
            change.used.insert(key.clone(), None);
        }
    }
    let in_use = |ip: &str| {
        ip.parse::<IpAddr>()
            .is_ok_and(|ip| allocations.contains_key(&ip))
    };
    change.release = answers(node, in_use).into_iter().collect();
    (!change.is_empty()).then_some(change)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_pool::agent::allocator::{Allocation, Holder};

    fn allocations(ips: &[&str]) -> Allocations {
        ips.iter()
            .map(|ip| {
                let holder = Holder {
                    container_id: format!("c-{ip}"),
                    ifname: "eth0".into(),
                    owner: format!("default/{ip}"),
                };
                let allocation = Allocation {
                    holder,
                    resource: Some("eni-1".into()),
                };
                (ip.parse().unwrap(), allocation)
            })
            .collect()
    }

    #[test]
    fn a_change_applied_leaves_nothing_to_change() {
        let mut node = CiliumNode::default();
        for ip in ["10.0.1.5", "10.0.1.6", "10.0.1.7"] {
            node.spec
                .ipam
                .pool
                .insert(ip.into(), AllocationIp::default());
        }
        node.status
            .ipam
            .used
            .insert("10.0.1.9".into(), AllocationIp::default());
        // An allocation written under another spelling of its address.
        node.status.ipam.used.insert(
            "fd00:0::1".into(),
            AllocationIp {
                owner: Some("default/fd00::1".into()),
                resource: Some("eni-1".into()),
            },
        );
        for (ip, state) in [
            ("10.0.1.5", ReleaseState::MarkedForRelease),
            ("10.0.1.6", ReleaseState::MarkedForRelease),
            ("10.0.1.8", ReleaseState::Released),
        ] {
            node.status.ipam.release_ips.insert(ip.into(), state);
        }
        let allocations = allocations(&["10.0.1.5", "10.0.1.7", "fd00::1"]);
        let change = status_change(&node, &allocations).expect("a change");
        assert_eq!(
            change.to_patch(),
            json!({"status": {"ipam": {
                "used": {
                    "10.0.1.5": {"owner": "default/10.0.1.5", "resource": "eni-1"},
                    "10.0.1.7": {"owner": "default/10.0.1.7", "resource": "eni-1"},
                    "10.0.1.9": null,
                    "fd00::1": {"owner": "default/fd00::1", "resource": "eni-1"},
                    "fd00:0::1": null,
                },
                "release-ips": {
                    "10.0.1.5": "do-not-release",
                    "10.0.1.6": "ready-for-release",
                    "10.0.1.8": null,
                },
            }}})
        );
        change.apply(&mut node);
        assert_eq!(status_change(&node, &allocations), None);
        assert!(!node.status.ipam.release_ips.contains_key("10.0.1.8"));
    }
}
