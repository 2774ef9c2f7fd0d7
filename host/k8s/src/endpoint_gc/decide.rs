//! Which CiliumEndpoints are orphaned, and which of those are deleted this
//! round: pure, over what the caches held when the round began.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The owner kinds whose presence the GC checks.
pub const POD: &str = "Pod";
pub const CILIUM_NODE: &str = "CiliumNode";

/// Pod phases after which the pod's containers are gone for good, and so
/// is its endpoint's use.
const FINISHED: [&str; 2] = ["Succeeded", "Failed"];

/// An owner reference of an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub kind: String,
    pub name: String,
}

/// A CiliumEndpoint as the GC needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub owners: Vec<Owner>,
}

impl Endpoint {
    pub fn key(&self) -> Key {
        (self.namespace.clone(), self.name.clone())
    }
}

/// (namespace, name) of an endpoint or a pod.
pub type Key = (String, String);

/// What the caches know of the owners endpoints can have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owners {
    /// Pods by (namespace, name), with their phase if they report one.
    pub pods: BTreeMap<Key, Option<String>>,
    /// CiliumNodes by name.
    pub nodes: BTreeSet<String>,
}

/// Why an endpoint is orphaned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Orphaned {
    /// Nothing owns it: nothing will ever delete it.
    NoOwners,
    /// Every owner it names is gone or finished (the GC's own kinds only:
    /// an owner of another kind keeps it).
    OwnersGone(Vec<GoneOwner>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoneOwner {
    PodAbsent { name: String },
    PodFinished { name: String, phase: String },
    NodeAbsent { name: String },
}

impl fmt::Display for Orphaned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Orphaned::NoOwners => f.write_str("no owner references"),
            Orphaned::OwnersGone(owners) => {
                for (i, owner) in owners.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    match owner {
                        GoneOwner::PodAbsent { name } => write!(f, "pod {name} is gone")?,
                        GoneOwner::PodFinished { name, phase } => {
                            write!(f, "pod {name} is {phase}")?
                        }
                        GoneOwner::NodeAbsent { name } => write!(f, "CiliumNode {name} is gone")?,
                    }
                }
                Ok(())
            }
        }
    }
}

/// Whether `endpoint` is orphaned by what `owners` holds: kept while any
/// owner keeps it (a live pod in its namespace, a CiliumNode, an owner of
/// a kind the GC does not follow, which it cannot judge).
pub fn orphaned(endpoint: &Endpoint, owners: &Owners) -> Option<Orphaned> {
    if endpoint.owners.is_empty() {
        return Some(Orphaned::NoOwners);
    }
    let mut gone = Vec::new();
    for owner in &endpoint.owners {
        let why = match owner.kind.as_str() {
            POD => match owners
                .pods
                .get(&(endpoint.namespace.clone(), owner.name.clone()))
            {
                None => GoneOwner::PodAbsent {
                    name: owner.name.clone(),
                },
                Some(Some(phase)) if FINISHED.contains(&phase.as_str()) => GoneOwner::PodFinished {
                    name: owner.name.clone(),
                    phase: phase.clone(),
                },
                Some(_) => return None,
            },
            CILIUM_NODE if owners.nodes.contains(&owner.name) => return None,
            CILIUM_NODE => GoneOwner::NodeAbsent {
                name: owner.name.clone(),
            },
            _ => return None,
        };
        gone.push(why);
    }
    Some(Orphaned::OwnersGone(gone))
}

/// Endpoints the previous round found orphaned: (namespace, name) -> uid.
pub type Suspects = BTreeMap<Key, String>;

/// One round's decisions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Orphaned in this round and the previous one, same uid: delete.
    pub delete: Vec<(Endpoint, Orphaned)>,
    /// Orphaned in this round: the next round's suspects.
    pub suspects: Suspects,
    /// Endpoints kept by an owner.
    pub kept: usize,
}

/// The round's plan: an endpoint is deleted only when two consecutive
/// rounds found it orphaned with the same uid. One round is not enough
/// evidence: the pod cache can lag the endpoint cache (an agent creates a
/// pod's endpoint moments after the pod), and a uid that changed is a new
/// endpoint whose count starts afresh.
pub fn plan(endpoints: &[Endpoint], owners: &Owners, previous: &Suspects) -> Plan {
    let mut plan = Plan::default();
    for endpoint in endpoints {
        let Some(why) = orphaned(endpoint, owners) else {
            plan.kept += 1;
            continue;
        };
        let key = endpoint.key();
        if previous.get(&key) == Some(&endpoint.uid) {
            plan.delete.push((endpoint.clone(), why));
        }
        plan.suspects.insert(key, endpoint.uid.clone());
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(owners: &[(&str, &str)]) -> Endpoint {
        Endpoint {
            namespace: "default".into(),
            name: "web-1".into(),
            uid: "uid-1".into(),
            owners: owners
                .iter()
                .map(|(kind, name)| Owner {
                    kind: kind.to_string(),
                    name: name.to_string(),
                })
                .collect(),
        }
    }

    fn cluster(pods: &[(&str, &str, Option<&str>)], nodes: &[&str]) -> Owners {
        Owners {
            pods: pods
                .iter()
                .map(|(ns, name, phase)| {
                    ((ns.to_string(), name.to_string()), phase.map(String::from))
                })
                .collect(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
        }
    }

    fn pod_absent(name: &str) -> GoneOwner {
        GoneOwner::PodAbsent { name: name.into() }
    }

    #[test]
    fn the_decision_table() {
        let finished = |phase: &str| {
            Some(Orphaned::OwnersGone(vec![GoneOwner::PodFinished {
                name: "web-1".into(),
                phase: phase.into(),
            }]))
        };
        let node_absent = Some(Orphaned::OwnersGone(vec![GoneOwner::NodeAbsent {
            name: "n1".into(),
        }]));
        let pod = [(POD, "web-1")];
        let node = [(CILIUM_NODE, "n1")];
        #[rustfmt::skip]
        let table: Vec<(&str, Endpoint, Owners, Option<Orphaned>)> = vec![
            ("pod running", endpoint(&pod), cluster(&[("default", "web-1", Some("Running"))], &[]), None),
            ("pod pending", endpoint(&pod), cluster(&[("default", "web-1", Some("Pending"))], &[]), None),
            ("pod with no phase yet", endpoint(&pod), cluster(&[("default", "web-1", None)], &[]), None),
            ("pod in an unknown phase", endpoint(&pod), cluster(&[("default", "web-1", Some("Unknown"))], &[]), None),
            ("pod succeeded", endpoint(&pod), cluster(&[("default", "web-1", Some("Succeeded"))], &[]), finished("Succeeded")),
            ("pod failed", endpoint(&pod), cluster(&[("default", "web-1", Some("Failed"))], &[]), finished("Failed")),
            ("pod absent", endpoint(&pod), cluster(&[], &["web-1"]), Some(Orphaned::OwnersGone(vec![pod_absent("web-1")]))),
            ("pod of that name in another namespace", endpoint(&pod), cluster(&[("other", "web-1", Some("Running"))], &[]),
                Some(Orphaned::OwnersGone(vec![pod_absent("web-1")]))),
            ("CiliumNode present", endpoint(&node), cluster(&[], &["n1"]), None),
            ("CiliumNode absent", endpoint(&node), cluster(&[], &["n2"]), node_absent),
            ("another kind of owner", endpoint(&[("StatefulSet", "db")]), cluster(&[], &[]), None),
            ("no owners", endpoint(&[]), cluster(&[("default", "web-1", Some("Running"))], &["n1"]), Some(Orphaned::NoOwners)),
            ("several owners, one live pod", endpoint(&[(POD, "gone"), (POD, "web-1")]),
                cluster(&[("default", "web-1", Some("Running"))], &[]), None),
            ("several owners, one of another kind", endpoint(&[(POD, "gone"), ("Job", "j")]), cluster(&[], &[]), None),
            ("several owners, all gone", endpoint(&[(POD, "gone"), (CILIUM_NODE, "n1")]), cluster(&[], &[]),
                Some(Orphaned::OwnersGone(vec![pod_absent("gone"), GoneOwner::NodeAbsent { name: "n1".into() }]))),
        ];
        for (case, endpoint, owners, expected) in table {
            assert_eq!(orphaned(&endpoint, &owners), expected, "{case}");
        }
    }

    #[test]
    fn why_reads_as_a_sentence() {
        let why = Orphaned::OwnersGone(vec![
            pod_absent("web-1"),
            GoneOwner::PodFinished {
                name: "job-1".into(),
                phase: "Succeeded".into(),
            },
            GoneOwner::NodeAbsent { name: "n1".into() },
        ]);
        assert_eq!(
            why.to_string(),
            "pod web-1 is gone, pod job-1 is Succeeded, CiliumNode n1 is gone"
        );
        assert_eq!(Orphaned::NoOwners.to_string(), "no owner references");
    }

    fn suspects(entries: &[(&str, &str)]) -> Suspects {
        entries
            .iter()
            .map(|(name, uid)| (("default".to_string(), name.to_string()), uid.to_string()))
            .collect()
    }

    fn named(name: &str, uid: &str, owners: &[(&str, &str)]) -> Endpoint {
        Endpoint {
            name: name.into(),
            uid: uid.into(),
            ..endpoint(owners)
        }
    }

    fn deleted(plan: &Plan) -> Vec<(&str, &str)> {
        plan.delete
            .iter()
            .map(|(e, _)| (e.name.as_str(), e.uid.as_str()))
            .collect()
    }

    #[test]
    fn an_orphan_is_deleted_on_the_second_round_that_finds_it() {
        let endpoints = [named("orphan", "u1", &[(POD, "orphan")])];
        let owners = Owners::default();
        let first = plan(&endpoints, &owners, &Suspects::new());
        assert!(first.delete.is_empty(), "not on the first round");
        assert_eq!(first.suspects, suspects(&[("orphan", "u1")]));
        let second = plan(&endpoints, &owners, &first.suspects);
        assert_eq!(deleted(&second), [("orphan", "u1")]);
        assert_eq!(
            second.delete[0].1,
            Orphaned::OwnersGone(vec![pod_absent("orphan")])
        );
    }

    #[test]
    fn an_owner_seen_between_the_rounds_clears_the_suspicion() {
        let endpoints = [named("late", "u1", &[(POD, "late")])];
        let first = plan(&endpoints, &Owners::default(), &Suspects::new());
        let owners = cluster(&[("default", "late", Some("Pending"))], &[]);
        let second = plan(&endpoints, &owners, &first.suspects);
        assert!(second.delete.is_empty());
        assert!(second.suspects.is_empty());
        assert_eq!(second.kept, 1);
        // Gone again: the count starts afresh.
        let third = plan(&endpoints, &Owners::default(), &second.suspects);
        assert!(third.delete.is_empty());
        assert_eq!(third.suspects, suspects(&[("late", "u1")]));
    }

    #[test]
    fn a_new_uid_restarts_the_count() {
        let first = plan(
            &[named("e", "old", &[])],
            &Owners::default(),
            &Suspects::new(),
        );
        let second = plan(
            &[named("e", "new", &[])],
            &Owners::default(),
            &first.suspects,
        );
        assert!(second.delete.is_empty(), "the new endpoint was seen once");
        assert_eq!(second.suspects, suspects(&[("e", "new")]));
        let third = plan(
            &[named("e", "new", &[])],
            &Owners::default(),
            &second.suspects,
        );
        assert_eq!(deleted(&third), [("e", "new")]);
    }

    #[test]
    fn only_endpoints_seen_by_both_rounds_are_deleted_and_the_rest_counted() {
        let previous = suspects(&[("a", "u-a"), ("b", "u-b"), ("gone", "u-gone")]);
        let endpoints = [
            named("a", "u-a", &[]),
            named("b", "u-b", &[(CILIUM_NODE, "n1")]),
            named("c", "u-c", &[]),
        ];
        let next = plan(&endpoints, &cluster(&[], &["n1"]), &previous);
        assert_eq!(deleted(&next), [("a", "u-a")]);
        assert_eq!(next.suspects, suspects(&[("a", "u-a"), ("c", "u-c")]));
        assert_eq!(next.kept, 1);
    }
}
