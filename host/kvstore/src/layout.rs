//! Where Cilium's agents and clustermesh peers look: the heartbeat, the
//! cluster config, synced markers, identities and their locks, and the
//! rules for reading those keys. Cilium's agents read and write these same
//! keys, so the spelling here is the contract: a key built or matched
//! differently is a key the agents never see (or one we wrongly treat as
//! theirs).
//!
//! - master key `cilium/state/identities/v1/id/<decimal id>`, value the
//!   labels key (`k8s:app=foo;k8s:io.kubernetes.pod.namespace=default;`),
//!   no lease;
//! - value key `cilium/state/identities/v1/value/<labels key>/<node ip>`,
//!   value the id, on the agent's lease (one per node using the identity);
//! - lock of a kvstore path `P`: the etcd concurrency mutex at `P.lock`, one
//!   key `P.lock/<lease id in lower-case hex>` per contender, the holder
//!   being the one with the smallest create revision. The allocator locks a
//!   master key `.../v1/id/<id>` at `.../v1/locks/id/<id>.lock`.

/// Prefix of the master keys (one per identity).
pub const IDENTITY_ID_PREFIX: &str = "cilium/state/identities/v1/id/";

/// Prefix of the value keys (one per identity and node using it).
pub const IDENTITY_VALUE_PREFIX: &str = "cilium/state/identities/v1/value/";

/// Prefix of every identity lock's keys. Listed with its final `/`, so no
/// key of a sibling such as `.../v1/locksmith` is taken for a lock.
pub const IDENTITY_LOCKS_PREFIX: &str = "cilium/state/identities/v1/locks/";

/// The lock path of the master key whose id is spelled `id_text` (as it is
/// in the key: Cilium derives the lock from the key's text, not the
/// number).
pub fn identity_lock_path(id_text: &str) -> String {
    format!("{IDENTITY_LOCKS_PREFIX}id/{id_text}.lock")
}

/// The lock path a mutex key belongs to: the key minus its last
/// `/<lease hex>` segment. `None` for a key with no `/`, which no mutex
/// writes.
pub fn lock_path_of(lock_key: &str) -> Option<&str> {
    lock_key.rsplit_once('/').map(|(path, _lease)| path)
}

/// The prefix to list for the users (value keys) of a labels key, with its
/// final `/`.
pub fn value_prefix(labels: &str) -> String {
    format!("{IDENTITY_VALUE_PREFIX}{labels}/")
}

/// Whether `key` (listed under `prefix`, from [`value_prefix`]) is a value
/// key of that very labels key. Labels may contain `/`, so the listing of
/// `value/k8s:a=b;/` also holds the value keys of `k8s:a=b;/c=d;`: a key is
/// ours only when nothing but the node's address follows the prefix (its
/// last `/` ends the prefix).
pub fn is_value_key_of(prefix: &str, key: &str) -> bool {
    key.strip_prefix(prefix)
        .is_some_and(|node| !node.contains('/'))
}

/// The heartbeat agents watch.
pub const HEARTBEAT_KEY: &str = "cilium/.heartbeat";

/// The prefix of CiliumClusterConfig keys.
pub const CLUSTER_CONFIG_PREFIX: &str = "cilium/cluster-config/";

/// The CiliumClusterConfig of `cluster`.
pub fn cluster_config_key(cluster: &str) -> String {
    format!("{CLUSTER_CONFIG_PREFIX}{cluster}")
}

/// The marker peers wait for before they read `prefix` of `cluster`
/// (written once its first full sync is done).
pub fn synced_key(cluster: &str, prefix: &str) -> String {
    format!("cilium/synced/{cluster}/{prefix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_cilium_s() {
        assert_eq!(cluster_config_key("east"), "cilium/cluster-config/east");
        assert_eq!(
            synced_key("east", "cilium/state/services/v1"),
            "cilium/synced/east/cilium/state/services/v1"
        );
    }

    #[test]
    fn lock_paths_follow_cilium_s_spelling() {
        assert_eq!(
            identity_lock_path("65536"),
            "cilium/state/identities/v1/locks/id/65536.lock"
        );
        assert_eq!(
            lock_path_of("cilium/state/identities/v1/locks/id/7.lock/694d8a1b2c"),
            Some("cilium/state/identities/v1/locks/id/7.lock")
        );
        assert_eq!(lock_path_of("no-slash"), None);
    }

    #[test]
    fn a_value_key_belongs_to_the_labels_its_last_slash_ends() {
        let short = value_prefix("k8s:a=b;");
        assert_eq!(short, "cilium/state/identities/v1/value/k8s:a=b;/");
        let cases = [
            ("cilium/state/identities/v1/value/k8s:a=b;/10.0.0.1", true),
            // A node key with an empty address still ends at the prefix.
            ("cilium/state/identities/v1/value/k8s:a=b;/", true),
            // The users of the longer labels key `k8s:a=b;/c=d;`.
            (
                "cilium/state/identities/v1/value/k8s:a=b;/c=d;/10.0.0.1",
                false,
            ),
            ("cilium/state/identities/v1/value/k8s:a=c;/10.0.0.1", false),
        ];
        for (key, belongs) in cases {
            assert_eq!(is_value_key_of(&short, key), belongs, "{key}");
        }
        let with_slash = value_prefix("k8s:a=b;/c=d;");
        assert!(is_value_key_of(
            &with_slash,
            "cilium/state/identities/v1/value/k8s:a=b;/c=d;/10.0.0.1"
        ));
    }
}
