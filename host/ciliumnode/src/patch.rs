//! A [`NodeUpdate`] as JSON merge patches (RFC 7386) of a CiliumNode: one
//! for the object (spec.ipam.pool) and one for the status subresource. A
//! merge patch names only the fields it changes, so the agent's concurrent
//! writes (status.ipam.used, its answers in release-ips) and every field this
//! operator does not model survive, and there is no resourceVersion to
//! conflict on (Cilium #35404). Maps are merged, so a removed entry is an
//! explicit `null`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::node::CiliumNode;
use crate::update::NodeUpdate;

/// The entries of `new` that differ from `old`, and `null` for those gone.
fn map_patch<T: Serialize + PartialEq>(
    old: &BTreeMap<String, T>,
    new: &BTreeMap<String, T>,
) -> Map<String, Value> {
    let mut patch = Map::new();
    for (key, value) in new {
        if old.get(key) != Some(value) {
            patch.insert(
                key.clone(),
                serde_json::to_value(value).unwrap_or(Value::Null),
            );
        }
    }
    for key in old.keys().filter(|k| !new.contains_key(*k)) {
        patch.insert(key.clone(), Value::Null);
    }
    patch
}

/// The patches for the object and for its status; `None` when nothing
/// changes there. `current` is the node as last seen.
pub fn merge_patches(current: &CiliumNode, update: &NodeUpdate) -> (Option<Value>, Option<Value>) {
    let spec = update
        .pool
        .as_ref()
        .map(|pool| map_patch(&current.spec.ipam.pool, pool))
        .filter(|patch| !patch.is_empty())
        .map(|pool| json!({"spec": {"ipam": {"pool": pool}}}));

    let mut ipam = Map::new();
    if !update.release_ips.is_empty() {
        let states: Map<String, Value> = update
            .release_ips
            .iter()
            .map(|(ip, state)| {
                (
                    ip.clone(),
                    state
                        .as_ref()
                        .map_or(Value::Null, |s| Value::String(s.to_string())),
                )
            })
            .collect();
        ipam.insert("release-ips".into(), Value::Object(states));
    }
    if let Some(error) = &update.operator_error {
        ipam.insert("operator-status".into(), json!({ "error": error }));
    }
    let mut status = Map::new();
    if !ipam.is_empty() {
        status.insert("ipam".into(), Value::Object(ipam));
    }
    if let Some(enis) = &update.enis {
        let patch = map_patch(&current.status.eni.enis, enis);
        if !patch.is_empty() {
            status.insert("eni".into(), json!({ "enis": patch }));
        }
    }
    if let Some(interfaces) = &update.azure_interfaces {
        if *interfaces != current.status.azure.interfaces {
            // A list: a merge patch replaces it whole.
            status.insert("azure".into(), json!({ "interfaces": interfaces }));
        }
    }
    let status = (!status.is_empty()).then(|| json!({ "status": status }));
    (spec, status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::AllocationIp;
    use crate::release_state::ReleaseState;

    fn entry(eni: &str) -> AllocationIp {
        AllocationIp {
            owner: None,
            resource: Some(eni.into()),
        }
    }

    #[test]
    fn the_pool_patch_adds_changes_and_removes_entries_only() {
        let mut current = CiliumNode::default();
        current
            .spec
            .ipam
            .pool
            .insert("10.0.0.1".into(), entry("eni-1"));
        current
            .spec
            .ipam
            .pool
            .insert("10.0.0.2".into(), entry("eni-1"));
        let mut pool = current.spec.ipam.pool.clone();
        pool.remove("10.0.0.1");
        pool.insert("10.0.0.3".into(), entry("eni-2"));
        let update = NodeUpdate {
            pool: Some(pool),
            ..Default::default()
        };
        let (spec, status) = merge_patches(&current, &update);
        assert_eq!(
            spec,
            Some(json!({"spec": {"ipam": {"pool": {
                "10.0.0.1": null,
                "10.0.0.3": {"resource": "eni-2"}
            }}}}))
        );
        assert_eq!(status, None);
    }

    #[test]
    fn the_status_patch_names_single_release_entries() {
        let update = NodeUpdate {
            release_ips: [
                ("10.0.0.1".to_string(), Some(ReleaseState::MarkedForRelease)),
                ("10.0.0.2".to_string(), None),
            ]
            .into(),
            operator_error: Some(String::new()),
            ..Default::default()
        };
        let (spec, status) = merge_patches(&CiliumNode::default(), &update);
        assert_eq!(spec, None);
        assert_eq!(
            status,
            Some(json!({"status": {"ipam": {
                "release-ips": {"10.0.0.1": "marked-for-release", "10.0.0.2": null},
                "operator-status": {"error": ""}
            }}}))
        );
    }

    #[test]
    fn an_unchanged_pool_is_no_patch() {
        let mut current = CiliumNode::default();
        current
            .spec
            .ipam
            .pool
            .insert("10.0.0.1".into(), entry("eni-1"));
        let update = NodeUpdate {
            pool: Some(current.spec.ipam.pool.clone()),
            enis: Some(BTreeMap::new()),
            ..Default::default()
        };
        assert_eq!(merge_patches(&current, &update), (None, None));
    }
}
