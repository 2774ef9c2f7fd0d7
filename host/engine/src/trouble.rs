//! The cloud errors a cluster operator must see, sorted by what they say
//! about the operator's set-up: refused credentials, refused calls, answers
//! the host would not believe, a provider that failed, throttling. Each is
//! a Kubernetes Event reason on the CiliumNode being worked on and a line
//! of `/readyz` (docs/operator.md). The other errors (a full subnet, an
//! interface limit, a conflict, a transient failure) are the pool's
//! ordinary weather: they are retried, logged, and shown as the node's
//! blocking reason when they block it.

use std::collections::BTreeMap;
use std::sync::Mutex;

use ipam_cloud::{CloudError, ProviderError};

use crate::node_store::Announcement;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Trouble {
    /// The cloud refused the provider's credentials or permissions.
    Unauthorized,
    /// The cloud refused a call as invalid.
    Refused,
    /// The provider answered something the host would not believe.
    AnswerRefused,
    /// The provider trapped, overran its deadline or memory, was denied
    /// egress, or the host failed it.
    ProviderFailed,
    /// The cloud throttled a call until the retries ran out.
    Throttled,
}

impl Trouble {
    pub const ALL: [Trouble; 5] = [
        Trouble::Unauthorized,
        Trouble::Refused,
        Trouble::AnswerRefused,
        Trouble::ProviderFailed,
        Trouble::Throttled,
    ];

    /// What `error` says about the set-up, if it is trouble at all.
    pub fn of(error: &CloudError) -> Option<Trouble> {
        match error {
            CloudError::Provider { error, .. } => match error {
                ProviderError::Unauthorized(_) => Some(Trouble::Unauthorized),
                ProviderError::InvalidArgument(_) => Some(Trouble::Refused),
                ProviderError::Throttled(_) => Some(Trouble::Throttled),
                ProviderError::NotFound(_)
                | ProviderError::InterfaceLimit(_)
                | ProviderError::AddressLimit(_)
                | ProviderError::SubnetFull(_)
                | ProviderError::InsufficientPrefixes(_)
                | ProviderError::Conflict(_)
                | ProviderError::Transient(_)
                | ProviderError::Other(_) => None,
            },
            CloudError::BadAnswer { .. } => Some(Trouble::AnswerRefused),
            CloudError::Trap { .. }
            | CloudError::Timeout { .. }
            | CloudError::MemoryLimit { .. }
            | CloudError::EgressDenied { .. }
            | CloudError::Host { .. } => Some(Trouble::ProviderFailed),
        }
    }

    /// The Event reason (PascalCase), also the `/readyz` line's first word.
    pub const fn reason(self) -> &'static str {
        match self {
            Trouble::Unauthorized => "CloudUnauthorized",
            Trouble::Refused => "CloudRefused",
            Trouble::AnswerRefused => "ProviderAnswerRefused",
            Trouble::ProviderFailed => "ProviderFailed",
            Trouble::Throttled => "Throttled",
        }
    }
}

/// What each node was last told about trouble, so that a node is told
/// once per distinct trouble (its reason and the error's response code),
/// not on every pass that meets it again; a pass that succeeds clears it.
#[derive(Default)]
pub struct TroubleMemory(Mutex<BTreeMap<String, (Trouble, &'static str)>>);

impl TroubleMemory {
    /// A pass over `node` failed with `error`: the Event to announce, if
    /// the error is trouble the node was not told of last.
    pub fn tell(&self, node: &str, error: &CloudError) -> Option<Announcement> {
        let trouble = Trouble::of(error)?;
        let key = (trouble, error.response_code());
        let mut told = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if told.get(node) == Some(&key) {
            return None;
        }
        told.insert(node.to_string(), key);
        Some(Announcement {
            warning: true,
            reason: trouble.reason(),
            note: error.to_string(),
        })
    }

    /// A pass over `node` succeeded, or the node is gone.
    pub fn clear(&self, node: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_cloud::answer::{BadField, Problem};
    use std::time::Duration;

    fn provider(error: ProviderError) -> CloudError {
        CloudError::Provider {
            provider: "p".into(),
            error,
        }
    }

    #[test]
    fn errors_are_sorted_by_what_they_say_about_the_set_up() {
        let cases = [
            (
                provider(ProviderError::Unauthorized("denied".into())),
                Some("CloudUnauthorized"),
            ),
            (
                provider(ProviderError::InvalidArgument("bad subnet".into())),
                Some("CloudRefused"),
            ),
            (
                provider(ProviderError::Throttled(Duration::from_secs(1))),
                Some("Throttled"),
            ),
            (
                CloudError::BadAnswer {
                    provider: "p".into(),
                    operation: "assign-ips",
                    bad: BadField {
                        field: "addresses".into(),
                        problem: Problem::NotAsked,
                        detail: "three asked, four given".into(),
                    },
                },
                Some("ProviderAnswerRefused"),
            ),
            (
                CloudError::Trap {
                    provider: "p".into(),
                    operation: "get-vpcs",
                    message: "unreachable".into(),
                },
                Some("ProviderFailed"),
            ),
            (
                CloudError::Timeout {
                    provider: "p".into(),
                    operation: "get-vpcs",
                    limit: Duration::from_secs(30),
                },
                Some("ProviderFailed"),
            ),
            (provider(ProviderError::SubnetFull("s".into())), None),
            (provider(ProviderError::Transient("later".into())), None),
        ];
        for (error, reason) in cases {
            assert_eq!(Trouble::of(&error).map(Trouble::reason), reason, "{error}");
        }
    }

    #[test]
    fn a_node_is_told_once_per_distinct_trouble_until_a_pass_succeeds() {
        let memory = TroubleMemory::default();
        let denied = provider(ProviderError::Unauthorized("denied".into()));
        let refused = provider(ProviderError::InvalidArgument("bad".into()));
        let told = memory.tell("n1", &denied).expect("told");
        assert_eq!(
            told,
            Announcement {
                warning: true,
                reason: "CloudUnauthorized",
                note: "provider p: unauthorized: denied".into(),
            }
        );
        assert_eq!(memory.tell("n1", &denied), None, "not every pass");
        assert!(memory.tell("n2", &denied).is_some(), "each node");
        assert!(memory.tell("n1", &refused).is_some(), "another trouble");
        assert!(memory.tell("n1", &denied).is_some(), "back to the first");
        assert_eq!(
            memory.tell("n1", &provider(ProviderError::SubnetFull("s".into()))),
            None,
            "no trouble"
        );
        memory.clear("n1");
        assert!(
            memory.tell("n1", &denied).is_some(),
            "again after a success"
        );
    }
}
