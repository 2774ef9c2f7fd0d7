//! Where Cilium's agents and clustermesh peers look: the keys the
//! operator's kvstore duties write and read.

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
}
