//! Which cluster this operator speaks for, and where its keys live.

/// This cluster in the mesh: its name and ID, as the agents have them
/// (`--cluster-name`, `--cluster-id`). Every value the stores write carries
/// both, and peers drop a value whose cluster does not match its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    name: String,
    id: u32,
}

/// The largest cluster ID Cilium accepts (with `max-connected-clusters`
/// at 511; the default of 255 is a subset).
pub const MAX_CLUSTER_ID: u32 = 511;

/// The longest cluster name Cilium accepts.
pub const MAX_CLUSTER_NAME: usize = 32;

/// A cluster name or ID that cannot be a key segment or that peers refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error("cluster name {name:?}: {problem}")]
    Name { name: String, problem: &'static str },
    #[error("cluster ID {id} is above {MAX_CLUSTER_ID}")]
    Id { id: u32 },
}

impl ClusterInfo {
    /// The name must be what Cilium accepts (lower-case letters, digits and
    /// `-`, starting and ending with a letter or digit, at most 32
    /// characters): it is a path segment of every key, so a `/` in it would
    /// put keys under another cluster's prefix. An ID of 0 is allowed (a
    /// cluster outside a mesh), but mesh peers refuse values carrying it.
    pub fn new(name: &str, id: u32) -> Result<Self, ClusterError> {
        let problem = if name.is_empty() {
            Some("empty")
        } else if name.len() > MAX_CLUSTER_NAME {
            Some("longer than 32 characters")
        } else if !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            Some("only lower-case letters, digits and '-' are allowed")
        } else if name.starts_with('-') || name.ends_with('-') {
            Some("must start and end with a letter or digit")
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(ClusterError::Name {
                name: name.to_string(),
                problem,
            });
        }
        if id > MAX_CLUSTER_ID {
            return Err(ClusterError::Id { id });
        }
        Ok(Self {
            name: name.to_string(),
            id,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn id(&self) -> u32 {
        self.id
    }
}

/// The key layout, as Cilium's agents and clustermesh peers read it.
pub mod keys {
    /// Where every cluster's global services live.
    pub const SERVICES_PREFIX: &str = "cilium/state/services/v1";

    /// Where every cluster's nodes live.
    pub const NODES_PREFIX: &str = "cilium/state/nodes/v1";

    /// This cluster's services: `cilium/state/services/v1/<cluster>/`.
    pub fn services_of(cluster: &str) -> String {
        format!("{SERVICES_PREFIX}/{cluster}/")
    }

    /// One service: `cilium/state/services/v1/<cluster>/<namespace>/<name>`.
    pub fn service(cluster: &str, namespace: &str, name: &str) -> String {
        format!("{SERVICES_PREFIX}/{cluster}/{namespace}/{name}")
    }

    /// The marker peers wait for before trusting the services prefix as
    /// complete: `cilium/synced/<cluster>/cilium/state/services/v1`.
    pub fn services_synced(cluster: &str) -> String {
        ipam_kvstore::layout::synced_key(cluster, SERVICES_PREFIX)
    }

    /// This cluster's nodes: `cilium/state/nodes/v1/<cluster>/`.
    pub fn nodes_of(cluster: &str) -> String {
        format!("{NODES_PREFIX}/{cluster}/")
    }

    /// One node: `cilium/state/nodes/v1/<cluster>/<name>`.
    pub fn node(cluster: &str, name: &str) -> String {
        format!("{NODES_PREFIX}/{cluster}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_peers_accept_and_names_they_do_not() {
        for good in ["default", "c1", "eu-west-1", &"a".repeat(32)] {
            assert!(ClusterInfo::new(good, 1).is_ok(), "{good}");
        }
        for bad in [
            "",
            "a/b",
            "Upper",
            "-lead",
            "trail-",
            "sp ace",
            &"a".repeat(33),
        ] {
            assert!(
                matches!(ClusterInfo::new(bad, 1), Err(ClusterError::Name { .. })),
                "{bad}"
            );
        }
        assert_eq!(ClusterInfo::new("c", 511).unwrap().id(), 511);
        assert_eq!(
            ClusterInfo::new("c", 512),
            Err(ClusterError::Id { id: 512 })
        );
    }

    #[test]
    fn keys_are_cilium_s() {
        assert_eq!(
            keys::service("c1", "default", "web"),
            "cilium/state/services/v1/c1/default/web"
        );
        assert_eq!(keys::services_of("c1"), "cilium/state/services/v1/c1/");
        assert_eq!(
            keys::services_synced("c1"),
            "cilium/synced/c1/cilium/state/services/v1"
        );
        assert_eq!(keys::node("c1", "n1"), "cilium/state/nodes/v1/c1/n1");
        assert_eq!(keys::nodes_of("c1"), "cilium/state/nodes/v1/c1/");
    }
}
