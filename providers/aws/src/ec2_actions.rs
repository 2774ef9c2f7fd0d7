//! The EC2 actions this provider may call: the one list the IAM policy
//! (`deploy/aws/iam-policy.json`) is checked against. The client refuses,
//! before anything is sent, a request for an action missing here
//! (`client::ListedActionsOnly`), so a new call cannot be added without
//! naming it here, and then the policy test fails until the policy grants
//! it too.

/// The actions the client sends, by EC2's API name.
pub const SENT: &[&str] = &[
    "DescribeVpcs",
    "DescribeSubnets",
    "DescribeSecurityGroups",
    "DescribeInstances",
    "DescribeNetworkInterfaces",
    "DescribeInstanceTypes",
    "CreateNetworkInterface",
    "AttachNetworkInterface",
    "ModifyNetworkInterfaceAttribute",
    "DetachNetworkInterface",
    "DeleteNetworkInterface",
    "AssignPrivateIpAddresses",
    "UnassignPrivateIpAddresses",
];

/// Actions IAM authorizes without the client sending them: EC2 checks
/// `ec2:CreateTags` for the tags CreateNetworkInterface puts on the
/// interface it makes (its TagSpecification). Only the policy test reads it.
#[cfg(test)]
pub const AUTHORIZED_ONLY: &[&str] = &["CreateTags"];

/// Why a request for an action missing from [`SENT`] is refused.
#[derive(Debug, PartialEq)]
pub struct UnlistedAction(pub String);

impl std::fmt::Display for UnlistedAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "EC2 action {} is not in the provider's action list (providers/aws/src/ec2_actions.rs), \
             so deploy/aws/iam-policy.json does not grant it",
            self.0
        )
    }
}

impl std::error::Error for UnlistedAction {}

/// Ok for an action the client may send.
pub fn check(action: &str) -> Result<(), UnlistedAction> {
    if SENT.contains(&action) {
        Ok(())
    } else {
        Err(UnlistedAction(action.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::ec2_rates::BUCKETS;

    #[test]
    fn only_listed_actions_pass() {
        assert_eq!(check("DescribeVpcs"), Ok(()));
        assert_eq!(
            check("DescribeTags"),
            Err(UnlistedAction("DescribeTags".into()))
        );
        assert!(check("CreateTags").is_err(), "authorized, never sent");
    }

    #[test]
    fn every_sent_action_has_its_rate_bucket_and_no_bucket_is_for_another() {
        let sent: BTreeSet<&str> = SENT.iter().copied().collect();
        let buckets: BTreeSet<&str> = BUCKETS.iter().map(|(name, _)| *name).collect();
        assert_eq!(sent, buckets);
        assert_eq!(sent.len(), SENT.len(), "no action listed twice");
    }

    /// The SDK calls written in this crate's sources (`.client` then
    /// `.snake_case_operation()`), as EC2 action names.
    fn calls_in_sources() -> BTreeSet<String> {
        let sources = [include_str!("read.rs"), include_str!("interfaces.rs")];
        let mut calls = BTreeSet::new();
        for source in sources {
            for (at, _) in source.match_indices(".client") {
                let rest = source[at + ".client".len()..].trim_start();
                let Some(rest) = rest.strip_prefix('.') else {
                    continue;
                };
                let method: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                calls.insert(camel_case(&method));
            }
        }
        calls
    }

    fn camel_case(snake: &str) -> String {
        snake
            .split('_')
            .map(|word| {
                let mut chars = word.chars();
                chars.next().map_or(String::new(), |first| {
                    first.to_ascii_uppercase().to_string() + chars.as_str()
                })
            })
            .collect()
    }

    #[test]
    fn the_list_is_exactly_the_calls_the_sources_make() {
        let calls = calls_in_sources();
        let listed: BTreeSet<String> = SENT.iter().map(|a| a.to_string()).collect();
        assert_eq!(calls, listed, "calls in read.rs and interfaces.rs");
        assert_eq!(
            camel_case("assign_private_ip_addresses"),
            "AssignPrivateIpAddresses"
        );
    }
}
