//! Per-node gauges and the totals over every node, kept by difference so a
//! pass costs the same at 10 nodes as at 5,000.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::metrics::{CategoryLabel, Metrics, NodeLabel, TypeLabel};

/// The per-node summary the metrics aggregate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeFigures {
    pub available: i64,
    pub used: i64,
    pub needed: i64,
    pub at_capacity: bool,
}

/// The last figures recorded per node.
#[derive(Default)]
pub struct FigureBook(Mutex<BTreeMap<String, NodeFigures>>);

impl FigureBook {
    /// Record a node's figures now.
    pub fn record(&self, metrics: &Metrics, name: &str, now: NodeFigures) {
        let before = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), now);
        apply(metrics, name, before, Some(now));
    }

    /// The node is gone: its gauges go and the totals lose it.
    pub fn forget(&self, metrics: &Metrics, name: &str) {
        let before = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        if before.is_some() {
            apply(metrics, name, before, None);
        }
    }
}

fn apply(m: &Metrics, name: &str, before: Option<NodeFigures>, now: Option<NodeFigures>) {
    let b = before.unwrap_or_default();
    let n = now.unwrap_or_default();
    let label = NodeLabel {
        target_node: name.to_string(),
    };
    if now.is_some() {
        m.available_ips.get_or_create(&label).set(n.available);
        m.used_ips.get_or_create(&label).set(n.used);
        m.needed_ips.get_or_create(&label).set(n.needed);
    } else {
        m.available_ips.remove(&label);
        m.used_ips.remove(&label);
        m.needed_ips.remove(&label);
    }
    let ips = |t: &'static str, delta: i64| {
        if delta != 0 {
            m.ips.get_or_create(&TypeLabel { r#type: t }).inc_by(delta);
        }
    };
    ips("available", n.available - b.available);
    ips("used", n.used - b.used);
    ips("needed", n.needed - b.needed);
    let nodes = |c: &'static str, was: bool, is: bool| {
        if was != is {
            m.nodes
                .get_or_create(&CategoryLabel { category: c })
                .inc_by(if is { 1 } else { -1 });
        }
    };
    nodes("total", before.is_some(), now.is_some());
    nodes("in-deficit", b.needed > 0, n.needed > 0);
    nodes("at-capacity", b.at_capacity, n.at_capacity);
}
