//! The custom roles in `deploy/azure/` against the provider's permission
//! lists (`permissions.rs`): `role.json`, assigned on resource groups, holds
//! every permission of a resource-group request and every join ARM checks;
//! `sku-reader-role.json`, assigned on the subscription, holds those of
//! subscription-level requests (the Resource SKU list).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::permissions::{Scope, CALLS, LINKED};

const ROLE: &str = include_str!("../../../deploy/azure/role.json");
const SKU_ROLE: &str = include_str!("../../../deploy/azure/sku-reader-role.json");

/// A role definition as `az role definition create --role-definition`
/// takes it; its Actions.
fn actions(role: &str, file: &str) -> (BTreeSet<String>, Vec<String>) {
    let role: Value = serde_json::from_str(role).unwrap_or_else(|e| panic!("{file}: {e}"));
    let object = role
        .as_object()
        .unwrap_or_else(|| panic!("{file}: not an object"));
    let keys: BTreeSet<&str> = object.keys().map(String::as_str).collect();
    let wanted = BTreeSet::from([
        "Name",
        "IsCustom",
        "Description",
        "Actions",
        "NotActions",
        "DataActions",
        "NotDataActions",
        "AssignableScopes",
    ]);
    assert_eq!(keys, wanted, "{file}");
    assert_eq!(role["IsCustom"], true, "{file}");
    assert!(
        role["Name"].as_str().is_some_and(|n| !n.is_empty()),
        "{file}"
    );
    for none in ["NotActions", "DataActions", "NotDataActions"] {
        assert_eq!(role[none], Value::Array(vec![]), "{file}: {none}");
    }
    let strings = |key: &str| -> Vec<String> {
        role[key]
            .as_array()
            .unwrap_or_else(|| panic!("{file}: {key} is not a list"))
            .iter()
            .map(|v| {
                v.as_str()
                    .unwrap_or_else(|| panic!("{file}: {key}"))
                    .to_string()
            })
            .collect()
    };
    let list = strings("Actions");
    let set: BTreeSet<String> = list.iter().cloned().collect();
    assert_eq!(set.len(), list.len(), "{file}: an action listed twice");
    for action in &set {
        assert!(!action.contains('*'), "{file}: {action} is a wildcard");
    }
    (set, strings("AssignableScopes"))
}

#[test]
fn the_resource_group_role_grants_exactly_the_group_level_permissions() {
    let (granted, scopes) = actions(ROLE, "deploy/azure/role.json");
    let needed: BTreeSet<String> = CALLS
        .iter()
        .filter(|c| c.scope != Scope::Subscription)
        .map(|c| c.permission.to_string())
        .chain(LINKED.iter().map(|(p, _, _)| p.to_string()))
        .collect();
    let missing: Vec<_> = needed.difference(&granted).collect();
    let extra: Vec<_> = granted.difference(&needed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "deploy/azure/role.json lacks {missing:?} and grants {extra:?} beyond providers/azure/src/permissions.rs"
    );
    assert_eq!(
        scopes,
        [
            "/subscriptions/<SUBSCRIPTION_ID>/resourceGroups/<NODE_RESOURCE_GROUP>",
            "/subscriptions/<SUBSCRIPTION_ID>/resourceGroups/<VNET_RESOURCE_GROUP>",
        ]
    );
}

#[test]
fn the_subscription_role_grants_exactly_the_subscription_level_permissions() {
    let (granted, scopes) = actions(SKU_ROLE, "deploy/azure/sku-reader-role.json");
    let needed: BTreeSet<String> = CALLS
        .iter()
        .filter(|c| c.scope == Scope::Subscription)
        .map(|c| c.permission.to_string())
        .collect();
    assert_eq!(granted, needed);
    assert_eq!(scopes, ["/subscriptions/<SUBSCRIPTION_ID>"]);
}
