//! The pause as people are told of it: which other writers are seen (a
//! manager on a node, Cilium's operator), the reason `/readyz` gives, the
//! `manager` labels the metric holds at 1, and the episodes that decide
//! when a node's Event is due (once per node and manager while it keeps
//! writing, not on every pass).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::cilium_operator::IGNORE_ANNOTATION;
use super::managed_fields::{ContestedField, RecentWriter};

/// The metric's `manager` label for Cilium's operator seen through its
/// Lease (its managedFields name is its binary's, `cilium-operator-aws`).
pub const CILIUM_OPERATOR_LABEL: &str = "cilium-operator";

/// Another writer seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OtherWriter {
    /// A field manager that changed a node's contested fields lately.
    Manager {
        manager: String,
        node: String,
        fields: Vec<ContestedField>,
        time: Timestamp,
    },
    /// Cilium's operator, its leader holding its Lease, allocating for
    /// some nodes (those not annotated for it to leave alone).
    CiliumOperator {
        /// namespace/name of its Lease.
        lease: String,
        holder: String,
        mode: String,
        /// How many nodes it allocates for, and one of them.
        nodes: usize,
        node: String,
    },
}

impl OtherWriter {
    pub fn manager_label(&self) -> &str {
        match self {
            OtherWriter::Manager { manager, .. } => manager,
            OtherWriter::CiliumOperator { .. } => CILIUM_OPERATOR_LABEL,
        }
    }

    fn describe(&self) -> String {
        match self {
            OtherWriter::Manager {
                manager,
                node,
                fields,
                time,
            } => {
                let fields: Vec<&str> = fields.iter().map(|f| f.path()).collect();
                format!(
                    "{manager} changed {} of CiliumNode {node} at {time}",
                    fields.join(" and ")
                )
            }
            OtherWriter::CiliumOperator {
                lease,
                holder,
                mode,
                nodes,
                node,
            } => format!(
                "Cilium's operator allocates in IPAM mode {mode} (Lease {lease} held by \
                 {holder}) for {nodes} CiliumNode(s) not annotated {IGNORE_ANNOTATION}: \
                 \"true\" ({node} among them)"
            ),
        }
    }
}

/// The writers named in full in a reason; the rest are counted.
const NAMED: usize = 3;

/// Why the engine does not write: the other writers seen (never empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    writers: Vec<OtherWriter>,
    window: Duration,
}

impl Pause {
    /// A pause over `writers`, none if there are none.
    pub fn of(writers: Vec<OtherWriter>, window: Duration) -> Option<Self> {
        (!writers.is_empty()).then_some(Self { writers, window })
    }

    pub fn writers(&self) -> &[OtherWriter] {
        &self.writers
    }

    /// The `manager` labels of the writers seen.
    pub fn managers(&self) -> BTreeSet<String> {
        self.writers
            .iter()
            .map(|w| w.manager_label().to_string())
            .collect()
    }

    /// For `/readyz` and the log: who writes, and when writing resumes.
    pub fn reason(&self) -> String {
        let mut named: Vec<String> = self
            .writers
            .iter()
            .take(NAMED)
            .map(|w| w.describe())
            .collect();
        if self.writers.len() > NAMED {
            named.push(format!("and {} more", self.writers.len() - NAMED));
        }
        format!(
            "paused: another writer of the CiliumNode fields this operator owns: {}; \
             writing resumes {} s after a manager's last change, and once Cilium's \
             operator's Lease expires or its IPAM is off",
            named.join("; "),
            self.window.as_secs()
        )
    }
}

/// The managers each node has been announced for in its current episode:
/// an episode lasts while some other manager is seen on the node.
#[derive(Debug, Default)]
pub struct Episodes {
    announced: BTreeMap<String, BTreeSet<String>>,
}

impl Episodes {
    /// A node's writers now: those to announce (only while `leading`: the
    /// replica that would write says why it does not), each once per
    /// episode. No writers ends the node's episode.
    pub fn observe<'a>(
        &mut self,
        node: &str,
        writers: &'a [RecentWriter],
        leading: bool,
    ) -> Vec<&'a RecentWriter> {
        if writers.is_empty() {
            self.announced.remove(node);
            return Vec::new();
        }
        if !leading {
            return Vec::new();
        }
        let announced = self.announced.entry(node.to_string()).or_default();
        writers
            .iter()
            .filter(|w| announced.insert(w.manager.clone()))
            .collect()
    }

    /// The node is gone: its episode ends.
    pub fn forget(&mut self, node: &str) {
        self.announced.remove(node);
    }

    /// Nodes in an episode this replica announced.
    pub fn nodes(&self) -> Vec<String> {
        self.announced.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(manager: &str) -> RecentWriter {
        RecentWriter {
            manager: manager.into(),
            fields: vec![ContestedField::Pool],
            time: "2025-03-01T10:00:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn a_node_is_announced_once_per_manager_and_episode_and_only_by_the_leader() {
        let mut episodes = Episodes::default();
        let aws = [writer("cilium-operator-aws")];
        let names = |due: Vec<&RecentWriter>| -> Vec<String> {
            due.into_iter().map(|w| w.manager.clone()).collect()
        };
        assert!(
            episodes.observe("n1", &aws, false).is_empty(),
            "a standby announces nothing"
        );
        assert_eq!(
            names(episodes.observe("n1", &aws, true)),
            ["cilium-operator-aws"]
        );
        assert!(
            episodes.observe("n1", &aws, true).is_empty(),
            "not again in the same episode"
        );
        let both = [writer("cilium-operator-aws"), writer("kubectl")];
        assert_eq!(names(episodes.observe("n1", &both, true)), ["kubectl"]);
        assert_eq!(episodes.nodes(), ["n1"]);
        assert!(episodes.observe("n1", &[], true).is_empty());
        assert!(episodes.nodes().is_empty(), "the episode ended");
        assert_eq!(
            names(episodes.observe("n1", &aws, true)),
            ["cilium-operator-aws"],
            "a new episode is announced again"
        );
        episodes.forget("n1");
        assert!(episodes.nodes().is_empty());
    }

    #[test]
    fn the_reason_names_the_writers_and_when_writing_resumes() {
        let time: Timestamp = "2025-03-01T10:08:31Z".parse().unwrap();
        let writers = vec![
            OtherWriter::Manager {
                manager: "cilium-operator-aws".into(),
                node: "n1".into(),
                fields: vec![ContestedField::Pool, ContestedField::Eni],
                time,
            },
            OtherWriter::CiliumOperator {
                lease: "kube-system/cilium-operator-resource-lock".into(),
                holder: "ip-10-0-1-17-tqg5xlmnbc".into(),
                mode: "eni".into(),
                nodes: 2,
                node: "n1".into(),
            },
        ];
        assert_eq!(Pause::of(Vec::new(), Duration::from_secs(120)), None);
        let pause = Pause::of(writers.clone(), Duration::from_secs(120)).unwrap();
        assert_eq!(
            pause.reason(),
            "paused: another writer of the CiliumNode fields this operator owns: \
             cilium-operator-aws changed spec.ipam.pool and status.eni of CiliumNode n1 at \
             2025-03-01T10:08:31Z; Cilium's operator allocates in IPAM mode eni (Lease \
             kube-system/cilium-operator-resource-lock held by ip-10-0-1-17-tqg5xlmnbc) \
             for 2 CiliumNode(s) not annotated ipam.cilium.io/ignore: \"true\" (n1 among \
             them); \
             writing resumes 120 s after a manager's last change, and once Cilium's \
             operator's Lease expires or its IPAM is off"
        );
        assert_eq!(
            pause.managers().into_iter().collect::<Vec<_>>(),
            ["cilium-operator", "cilium-operator-aws"]
        );
        let many: Vec<OtherWriter> = (0..5)
            .map(|i| OtherWriter::Manager {
                manager: "m".into(),
                node: format!("n{i}"),
                fields: vec![ContestedField::Pool],
                time,
            })
            .collect();
        let reason = Pause::of(many, Duration::from_secs(120)).unwrap().reason();
        assert!(
            reason.contains("CiliumNode n2 at") && !reason.contains("n3"),
            "{reason}"
        );
        assert!(reason.contains("; and 2 more;"), "{reason}");
    }
}
