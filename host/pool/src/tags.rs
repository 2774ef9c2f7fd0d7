//! The tags the operator puts on every interface it creates: they say whose
//! it is (leaked-interface GC and interface freeing touch only this
//! cluster's) and when it was made (GC's grace period). [`Ownership`] adds
//! the interfaces another operator made that the user hands over to this
//! one by naming their tags (adoption: ENIs Cilium's operator created).

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

/// The interfaces this operator may free and collect: those carrying this
/// cluster's tag, and those carrying every one of the adoption tags the
/// user named (none named: no adoption).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    cluster: Tag,
    adopted: Vec<Tag>,
}

impl Ownership {
    pub fn new(cluster_name: &str, adoption_tags: Vec<Tag>) -> Self {
        Self {
            cluster: cluster_tag(cluster_name),
            adopted: adoption_tags,
        }
    }

    /// Only this cluster's own interfaces.
    pub fn own_only(cluster_name: &str) -> Self {
        Self::new(cluster_name, Vec::new())
    }

    /// An interface with these tags is this operator's to free or collect.
    pub fn owns(&self, tags: &[Tag]) -> bool {
        tags.contains(&self.cluster) || self.adopts(tags)
    }

    /// It is this operator's only through the adoption tags.
    pub fn adopts(&self, tags: &[Tag]) -> bool {
        !self.adopted.is_empty()
            && !tags.contains(&self.cluster)
            && self.adopted.iter().all(|tag| tags.contains(tag))
    }

    /// The tag sets that find owned interfaces, one listing each (a
    /// provider lists the interfaces carrying all the tags it is given).
    pub fn listings(&self) -> Vec<Vec<Tag>> {
        let mut listings = vec![vec![self.cluster.clone()]];
        if !self.adopted.is_empty() {
            listings.push(self.adopted.clone());
        }
        listings
    }
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

    fn tag(key: &str, value: &str) -> Tag {
        Tag {
            key: key.into(),
            value: value.into(),
        }
    }

    #[test]
    fn ownership_is_the_cluster_tag_or_every_adoption_tag() {
        let cilium = vec![
            tag("io.cilium/cilium-managed", "true"),
            tag("io.cilium/cluster-name", "prod"),
        ];
        let adopting = Ownership::new("prod", vec![tag("io.cilium/cluster-name", "prod")]);
        let own_only = Ownership::own_only("prod");
        let ours = ownership_tags("prod", "node-1", 1);
        let cases: [(&str, &[Tag], bool, bool); 5] = [
            ("ours", &ours, true, true),
            ("Cilium's, adopted", &cilium, true, false),
            (
                "Cilium's of another cluster",
                &[tag("io.cilium/cluster-name", "dev")],
                false,
                false,
            ),
            (
                "another cluster of ours",
                &ownership_tags("dev", "node-1", 1),
                false,
                false,
            ),
            ("untagged", &[], false, false),
        ];
        for (what, tags, by_adopting, by_own_only) in cases {
            assert_eq!(adopting.owns(tags), by_adopting, "{what}, adopting");
            assert_eq!(own_only.owns(tags), by_own_only, "{what}, own only");
        }
        assert!(adopting.adopts(&cilium));
        assert!(!adopting.adopts(&ours), "ours is not adopted");
        assert!(!own_only.adopts(&cilium));
        assert_eq!(own_only.listings(), vec![vec![cluster_tag("prod")]]);
        assert_eq!(
            adopting.listings(),
            vec![
                vec![cluster_tag("prod")],
                vec![tag("io.cilium/cluster-name", "prod")]
            ]
        );
    }

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
