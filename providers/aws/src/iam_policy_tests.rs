//! `deploy/aws/iam-policy.json` against the provider's action list
//! (`ec2_actions.rs`), and the trust policy templates beside it.
//!
//! The resource types each action is authorized on, and the condition keys
//! each takes, are those of the Service Authorization Reference, "Actions,
//! resources, and condition keys for Amazon EC2"
//! (<https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html>).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::ec2_actions::{AUTHORIZED_ONLY, SENT};

const POLICY: &str = include_str!("../../../deploy/aws/iam-policy.json");
const IRSA_TRUST: &str = include_str!("../../../deploy/aws/irsa-trust-policy.json");
const POD_IDENTITY_TRUST: &str = include_str!("../../../deploy/aws/pod-identity-trust-policy.json");
/// Where the operator names the tag that marks an interface as a cluster's
/// (it passes it to create-interface and reads it to delete leaked ones).
const HOST_TAGS: &str = include_str!("../../../host/pool/src/tags.rs");

/// The placeholders a reader replaces before creating the policy.
const PLACEHOLDERS: &[&str] = &["<ACCOUNT_ID>", "<CLUSTER_NAME>", "<REGION>", "<VPC_ID>"];

/// The resource types EC2 authorizes each action on, for the requests this
/// provider makes ("*": the action has no resource-level permissions).
/// CreateNetworkInterface is authorized on the interface it makes, its
/// subnet and its security groups; attach, detach and (for an attachment's
/// DeleteOnTermination) modify on the interface and the instance.
const RESOURCE_TYPES: &[(&str, &[&str])] = &[
    ("DescribeVpcs", &["*"]),
    ("DescribeSubnets", &["*"]),
    ("DescribeSecurityGroups", &["*"]),
    ("DescribeInstances", &["*"]),
    ("DescribeNetworkInterfaces", &["*"]),
    ("DescribeInstanceTypes", &["*"]),
    (
        "CreateNetworkInterface",
        &["network-interface", "security-group", "subnet"],
    ),
    ("CreateTags", &["network-interface"]),
    ("AttachNetworkInterface", &["instance", "network-interface"]),
    (
        "ModifyNetworkInterfaceAttribute",
        &["instance", "network-interface"],
    ),
    ("DetachNetworkInterface", &["instance", "network-interface"]),
    ("DeleteNetworkInterface", &["network-interface"]),
    ("AssignPrivateIpAddresses", &["network-interface"]),
    ("UnassignPrivateIpAddresses", &["network-interface"]),
];

/// One action on one resource type, with the conditions it is granted
/// under (condition key to value).
#[derive(Debug)]
struct Grant {
    action: String,
    resource_type: String,
    conditions: BTreeMap<String, String>,
}

fn cluster_tag_key() -> String {
    let line = HOST_TAGS
        .lines()
        .find(|l| l.starts_with("pub const CLUSTER_TAG: &str = "))
        .expect("host/pool/src/tags.rs declares CLUSTER_TAG");
    line.split('"')
        .nth(1)
        .expect("a string literal")
        .to_string()
}

fn strings(value: &Value, what: &str) -> Vec<String> {
    match value {
        Value::String(one) => vec![one.clone()],
        Value::Array(many) => many
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => panic!("{what}: {other} is not a string"),
            })
            .collect(),
        other => panic!("{what}: {other} is neither a string nor a list"),
    }
}

fn object<'a>(value: &'a Value, what: &str) -> &'a Map<String, Value> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("{what}: not an object"))
}

/// Parses the policy as IAM reads it, panicking on anything IAM would
/// refuse or this project does not use, and lists every grant.
fn grants(policy: &str) -> Vec<Grant> {
    let policy: Value = serde_json::from_str(policy).expect("the policy is JSON");
    let top = object(&policy, "the policy");
    let keys: BTreeSet<&str> = top.keys().map(String::as_str).collect();
    assert_eq!(keys, BTreeSet::from(["Statement", "Version"]));
    assert_eq!(top["Version"], "2012-10-17");
    let statements = top["Statement"].as_array().expect("Statement is a list");
    assert!(!statements.is_empty());
    let mut sids = BTreeSet::new();
    let mut grants = Vec::new();
    for statement in statements {
        let statement = object(statement, "a statement");
        for key in statement.keys() {
            assert!(
                ["Sid", "Effect", "Action", "Resource", "Condition"].contains(&key.as_str()),
                "unexpected statement element {key}"
            );
        }
        let sid = statement["Sid"]
            .as_str()
            .expect("every statement has a Sid");
        assert!(
            sid.chars().all(|c| c.is_ascii_alphanumeric()),
            "{sid}: IAM takes only letters and digits in a Sid"
        );
        assert!(sids.insert(sid.to_string()), "Sid {sid} twice");
        assert_eq!(statement["Effect"], "Allow", "{sid}");
        let mut conditions = BTreeMap::new();
        if let Some(condition) = statement.get("Condition") {
            for (operator, keys) in object(condition, sid) {
                assert!(
                    ["StringEquals", "ArnEquals"].contains(&operator.as_str()),
                    "{sid}: operator {operator}"
                );
                for (key, value) in object(keys, sid) {
                    let value = value.as_str().unwrap_or_else(|| panic!("{sid}: {key}"));
                    conditions.insert(key.clone(), value.to_string());
                }
            }
        }
        let resources = strings(&statement["Resource"], sid);
        for action in strings(&statement["Action"], sid) {
            let action = action
                .strip_prefix("ec2:")
                .unwrap_or_else(|| panic!("{sid}: {action} is not an EC2 action"));
            for resource in &resources {
                let resource_type = if resource == "*" {
                    "*".to_string()
                } else {
                    let rest = resource
                        .strip_prefix("arn:aws:ec2:*:*:")
                        .and_then(|r| r.strip_suffix("/*"))
                        .unwrap_or_else(|| panic!("{sid}: resource {resource}"));
                    rest.to_string()
                };
                grants.push(Grant {
                    action: action.to_string(),
                    resource_type,
                    conditions: conditions.clone(),
                });
            }
        }
    }
    grants
}

#[test]
fn the_policy_grants_exactly_the_actions_the_provider_calls() {
    let granted: BTreeSet<String> = grants(POLICY).into_iter().map(|g| g.action).collect();
    let called: BTreeSet<String> = SENT
        .iter()
        .chain(AUTHORIZED_ONLY)
        .map(|a| a.to_string())
        .collect();
    let missing: Vec<_> = called.difference(&granted).collect();
    let extra: Vec<_> = granted.difference(&called).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "deploy/aws/iam-policy.json lacks {missing:?} and grants {extra:?} beyond providers/aws/src/ec2_actions.rs"
    );
}

#[test]
fn each_action_is_granted_on_every_resource_type_ec2_authorizes_it_on() {
    let grants = grants(POLICY);
    let listed: BTreeSet<&str> = RESOURCE_TYPES.iter().map(|(a, _)| *a).collect();
    let called: BTreeSet<&str> = SENT.iter().chain(AUTHORIZED_ONLY).copied().collect();
    assert_eq!(listed, called, "RESOURCE_TYPES names every action");
    for (action, types) in RESOURCE_TYPES {
        let granted: BTreeSet<&str> = grants
            .iter()
            .filter(|g| g.action == *action)
            .map(|g| g.resource_type.as_str())
            .collect();
        let wanted: BTreeSet<&str> = types.iter().copied().collect();
        assert_eq!(granted, wanted, "{action}");
    }
}

#[test]
fn interfaces_are_changed_only_when_tagged_for_this_cluster() {
    let tag = cluster_tag_key();
    assert_eq!(tag, "ipam-operator/cluster");
    let on_interfaces = |action: &str| -> Vec<Grant> {
        grants(POLICY)
            .into_iter()
            .filter(|g| g.action == action && g.resource_type == "network-interface")
            .collect()
    };
    for action in [
        "AttachNetworkInterface",
        "ModifyNetworkInterfaceAttribute",
        "DetachNetworkInterface",
        "DeleteNetworkInterface",
    ] {
        for grant in on_interfaces(action) {
            assert_eq!(
                grant.conditions.get(&format!("ec2:ResourceTag/{tag}")),
                Some(&"<CLUSTER_NAME>".to_string()),
                "{action}"
            );
        }
    }
    for grant in on_interfaces("CreateNetworkInterface") {
        assert_eq!(
            grant.conditions.get(&format!("aws:RequestTag/{tag}")),
            Some(&"<CLUSTER_NAME>".to_string())
        );
    }
    for grant in on_interfaces("CreateTags") {
        assert_eq!(
            grant.conditions.get("ec2:CreateAction"),
            Some(&"CreateNetworkInterface".to_string()),
            "tags only as an interface is created"
        );
        assert_eq!(
            grant.conditions.get(&format!("aws:RequestTag/{tag}")),
            Some(&"<CLUSTER_NAME>".to_string())
        );
    }
    // The primary interface, which EC2 made with the instance and nobody
    // tagged, takes addresses too (spec.eni.first-interface-index 0, the
    // default): addresses are limited to the cluster's VPC instead.
    for action in ["AssignPrivateIpAddresses", "UnassignPrivateIpAddresses"] {
        for grant in on_interfaces(action) {
            assert_eq!(
                grant.conditions.get("ec2:Vpc").map(String::as_str),
                Some("arn:aws:ec2:<REGION>:<ACCOUNT_ID>:vpc/<VPC_ID>"),
                "{action}"
            );
        }
    }
}

#[test]
fn every_condition_key_is_one_ec2_evaluates_for_its_action() {
    let tag = cluster_tag_key();
    // Condition keys per (action, resource type), from the reference.
    let allowed = |grant: &Grant, key: &str| -> bool {
        let interface_actions = [
            "AttachNetworkInterface",
            "ModifyNetworkInterfaceAttribute",
            "DetachNetworkInterface",
            "DeleteNetworkInterface",
            "AssignPrivateIpAddresses",
            "UnassignPrivateIpAddresses",
        ];
        match (grant.action.as_str(), grant.resource_type.as_str()) {
            ("CreateNetworkInterface", "network-interface") => {
                key == format!("aws:RequestTag/{tag}")
            }
            ("CreateNetworkInterface", "subnet" | "security-group") => key == "ec2:Vpc",
            ("CreateTags", "network-interface") => {
                key == "ec2:CreateAction" || key == format!("aws:RequestTag/{tag}")
            }
            (action, "network-interface") if interface_actions.contains(&action) => {
                key == format!("ec2:ResourceTag/{tag}") || key == "ec2:Vpc"
            }
            _ => false,
        }
    };
    for grant in grants(POLICY) {
        for key in grant.conditions.keys() {
            assert!(
                allowed(&grant, key),
                "{} on {} with {key}",
                grant.action,
                grant.resource_type
            );
        }
    }
}

#[test]
fn the_policy_has_exactly_the_documented_placeholders() {
    let mut found = BTreeSet::new();
    let mut rest = POLICY;
    while let Some(start) = rest.find('<') {
        let end = rest[start..].find('>').expect("a closed placeholder") + start;
        found.insert(&rest[start..=end]);
        rest = &rest[end + 1..];
    }
    let documented: BTreeSet<&str> = PLACEHOLDERS.iter().copied().collect();
    assert_eq!(found, documented);
    let filled = PLACEHOLDERS
        .iter()
        .zip(["111122223333", "my-cluster", "us-east-1", "vpc-0abc"])
        .fold(POLICY.to_string(), |text, (placeholder, value)| {
            text.replace(placeholder, value)
        });
    assert_eq!(grants(&filled).len(), grants(POLICY).len());
}

#[test]
fn the_irsa_trust_policy_lets_only_the_operators_service_account_in() {
    let policy: Value = serde_json::from_str(IRSA_TRUST).unwrap();
    assert_eq!(policy["Version"], "2012-10-17");
    let statements = policy["Statement"].as_array().unwrap();
    assert_eq!(statements.len(), 1);
    let statement = &statements[0];
    assert_eq!(statement["Effect"], "Allow");
    assert_eq!(statement["Action"], "sts:AssumeRoleWithWebIdentity");
    assert_eq!(
        statement["Principal"]["Federated"],
        "arn:aws:iam::<ACCOUNT_ID>:oidc-provider/<OIDC_PROVIDER>"
    );
    let equals = object(&statement["Condition"]["StringEquals"], "StringEquals");
    assert_eq!(equals.len(), 2);
    assert_eq!(
        equals["<OIDC_PROVIDER>:sub"],
        "system:serviceaccount:<NAMESPACE>:<SERVICE_ACCOUNT>"
    );
    // The audience EKS's pod identity webhook projects tokens for.
    assert_eq!(equals["<OIDC_PROVIDER>:aud"], "sts.amazonaws.com");
}

#[test]
fn the_pod_identity_trust_policy_trusts_eks_pod_identity() {
    let policy: Value = serde_json::from_str(POD_IDENTITY_TRUST).unwrap();
    assert_eq!(policy["Version"], "2012-10-17");
    let statement = &policy["Statement"][0];
    assert_eq!(statement["Effect"], "Allow");
    assert_eq!(statement["Principal"]["Service"], "pods.eks.amazonaws.com");
    // Pod Identity assumes the role with session tags (the cluster,
    // namespace and service account of the pod).
    let actions = strings(&statement["Action"], "Action");
    assert_eq!(actions, ["sts:AssumeRole", "sts:TagSession"]);
}
