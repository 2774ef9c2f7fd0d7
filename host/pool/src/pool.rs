//! A node's pool (spec.ipam.pool) as its cached instance gives it.

use std::collections::{BTreeMap, BTreeSet};

use ipam_ciliumnode::{AllocationIp, CiliumNode};
use ipam_cloud::Instance;

use crate::node_view::NodeView;
use crate::select;

/// spec.ipam.pool for a node: every pool address of its usable interfaces
/// ([`select::pool_addresses`]), each with its interface, less the addresses
/// in their reuse cooldown (`withheld`).
pub fn pool_of(
    node: &CiliumNode,
    instance: &Instance,
    withheld: &BTreeSet<String>,
) -> BTreeMap<String, AllocationIp> {
    let exclude = node.exclude_interface_tags();
    let mut pool = BTreeMap::new();
    for eni in instance
        .interfaces
        .iter()
        .filter(|i| select::usable(i, node.first_interface_index(), &exclude))
    {
        for address in select::pool_addresses(eni, node.spec.eni.use_primary_address) {
            if !withheld.contains(&address) {
                let entry = AllocationIp {
                    owner: None,
                    resource: Some(eni.id.clone()),
                };
                pool.insert(address, entry);
            }
        }
    }
    pool
}

/// How many addresses or entries, as the watermark arithmetic counts them.
pub fn count(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}
