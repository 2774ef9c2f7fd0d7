//! What the engine reads out of a CiliumNode's spec, with Cilium's defaults
//! applied: watermarks, the first interface index, and the tag filters as
//! cloud tags.

use std::collections::BTreeMap;

use ipam_ciliumnode::{CiliumNode, DEFAULT_PRE_ALLOCATE};
use ipam_cloud::Tag;

use crate::watermarks::Watermarks;

/// The node's IPAM settings as the decisions use them.
pub trait NodeView {
    /// spec.eni.first-interface-index; Cilium's default is 0.
    fn first_interface_index(&self) -> u32;
    fn exclude_interface_tags(&self) -> Vec<Tag>;
    fn subnet_tags(&self) -> Vec<Tag>;
    fn security_group_tags(&self) -> Vec<Tag>;
    /// The node's watermarks; pre-allocate defaults to Cilium's 8.
    fn watermarks(&self) -> Watermarks;
}

fn tag_list(map: &BTreeMap<String, String>) -> Vec<Tag> {
    map.iter()
        .map(|(key, value)| Tag {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

impl NodeView for CiliumNode {
    fn first_interface_index(&self) -> u32 {
        self.spec.eni.first_interface_index.unwrap_or(0)
    }

    fn exclude_interface_tags(&self) -> Vec<Tag> {
        tag_list(&self.spec.eni.exclude_interface_tags)
    }

    fn subnet_tags(&self) -> Vec<Tag> {
        tag_list(&self.spec.eni.subnet_tags)
    }

    fn security_group_tags(&self) -> Vec<Tag> {
        tag_list(&self.spec.eni.security_group_tags)
    }

    fn watermarks(&self) -> Watermarks {
        let ipam = &self.spec.ipam;
        Watermarks {
            pre_allocate: ipam.pre_allocate.unwrap_or(DEFAULT_PRE_ALLOCATE),
            min_allocate: ipam.min_allocate.unwrap_or(0),
            max_allocate: ipam.max_allocate.unwrap_or(0),
            max_above_watermark: ipam.max_above_watermark.unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cilium_defaults_apply_to_unset_fields() {
        let bare: CiliumNode = serde_json::from_str(r#"{"name": "n"}"#).unwrap();
        assert_eq!(bare.watermarks().pre_allocate, DEFAULT_PRE_ALLOCATE);
        assert_eq!(bare.first_interface_index(), 0);
        let node: CiliumNode = serde_json::from_str(
            r#"{"name": "n", "spec": {
                "ipam": {"pre-allocate": 16, "min-allocate": 10, "max-above-watermark": 2},
                "eni": {"first-interface-index": 1, "subnet-tags": {"tier": "pods"},
                        "security-group-tags": {"role": "nodes"},
                        "exclude-interface-tags": {"no-pods": "true"}}}}"#,
        )
        .unwrap();
        assert_eq!(
            node.watermarks(),
            Watermarks {
                pre_allocate: 16,
                min_allocate: 10,
                max_allocate: 0,
                max_above_watermark: 2
            }
        );
        assert_eq!(node.first_interface_index(), 1);
        let tag = |key: &str, value: &str| Tag {
            key: key.into(),
            value: value.into(),
        };
        assert_eq!(node.subnet_tags(), [tag("tier", "pods")]);
        assert_eq!(node.security_group_tags(), [tag("role", "nodes")]);
        assert_eq!(node.exclude_interface_tags(), [tag("no-pods", "true")]);
    }
}
