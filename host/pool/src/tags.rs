//! The tags the operator puts on every interface it creates: they say whose
//! it is (leaked-interface GC and interface freeing touch only this
//! cluster's) and when it was made (GC's grace period).

use ipam_cloud::Tag;

/// The cluster that owns the interface.
pub const CLUSTER_TAG: &str = "ipam-operator/cluster";
/// The node it was made for.
pub const NODE_TAG: &str = "ipam-operator/node";
/// Unix seconds; leaked-interface GC reads it for the interface's age.
pub const CREATED_AT_TAG: &str = "ipam-operator/created-at";

/// The tag that marks an interface as this cluster's.
pub fn cluster_tag(cluster_name: &str) -> Tag {
    Tag {
        key: CLUSTER_TAG.into(),
        value: cluster_name.into(),
    }
}

/// Every ownership tag of an interface made now (`now_unix`) for a node.
pub fn ownership_tags(cluster_name: &str, node_name: &str, now_unix: u64) -> Vec<Tag> {
    vec![
        cluster_tag(cluster_name),
        Tag {
            key: NODE_TAG.into(),
            value: node_name.into(),
        },
        Tag {
            key: CREATED_AT_TAG.into(),
            value: now_unix.to_string(),
        },
    ]
}

/// When the interface was made, from its created-at tag.
pub fn created_at(tags: &[Tag]) -> Option<u64> {
    tags.iter()
        .find(|t| t.key == CREATED_AT_TAG)
        .and_then(|t| t.value.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_at_reads_its_own_tag_only() {
        let tags = ownership_tags("c1", "node-1", 1_700_000_000);
        assert_eq!(created_at(&tags), Some(1_700_000_000));
        assert_eq!(created_at(&tags[..2]), None, "no created-at tag");
        let unreadable = [Tag {
            key: CREATED_AT_TAG.into(),
            value: "yesterday".into(),
        }];
        assert_eq!(created_at(&unreadable), None);
        assert_eq!(tags[0], cluster_tag("c1"));
        assert_eq!(tags[1].value, "node-1");
    }
}
