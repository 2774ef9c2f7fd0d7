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

impl FigureBook {
    /// Every node goes from the gauges and the totals: the book's owner
    /// stops (a replica that no longer leads must neither show frozen
    /// figures nor have them counted again when it leads once more).
    pub fn forget_all(&self, metrics: &Metrics) {
        let all = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        for (name, before) in all {
            apply(metrics, &name, Some(before), None);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn total(m: &Metrics, t: &'static str) -> i64 {
        m.ips.get_or_create(&TypeLabel { r#type: t }).get()
    }

    fn nodes(m: &Metrics, c: &'static str) -> i64 {
        m.nodes.get_or_create(&CategoryLabel { category: c }).get()
    }

    fn gauge_of(m: &Metrics, name: &str) -> (i64, i64, i64) {
        let label = NodeLabel {
            target_node: name.to_string(),
        };
        (
            m.available_ips.get_or_create(&label).get(),
            m.used_ips.get_or_create(&label).get(),
            m.needed_ips.get_or_create(&label).get(),
        )
    }

    fn figures(available: i64, used: i64, needed: i64, at_capacity: bool) -> NodeFigures {
        NodeFigures {
            available,
            used,
            needed,
            at_capacity,
        }
    }

    #[test]
    fn totals_follow_each_node_by_difference() {
        let m = Metrics::new();
        let book = FigureBook::default();
        book.record(&m, "a", figures(10, 4, 0, false));
        book.record(&m, "b", figures(3, 3, 5, true));
        assert_eq!(gauge_of(&m, "a"), (10, 4, 0));
        assert_eq!(gauge_of(&m, "b"), (3, 3, 5));
        assert_eq!(
            (
                total(&m, "available"),
                total(&m, "used"),
                total(&m, "needed")
            ),
            (13, 7, 5)
        );
        assert_eq!(nodes(&m, "total"), 2);
        assert_eq!(nodes(&m, "in-deficit"), 1);
        assert_eq!(nodes(&m, "at-capacity"), 1);

        // b's pool grew: out of deficit and no longer at capacity.
        book.record(&m, "b", figures(8, 3, 0, false));
        assert_eq!(
            (
                total(&m, "available"),
                total(&m, "used"),
                total(&m, "needed")
            ),
            (18, 7, 0)
        );
        assert_eq!(nodes(&m, "total"), 2, "a node recorded again counts once");
        assert_eq!(nodes(&m, "in-deficit"), 0);
        assert_eq!(nodes(&m, "at-capacity"), 0);

        // a falls into deficit at capacity.
        book.record(&m, "a", figures(2, 9, 4, true));
        assert_eq!(nodes(&m, "in-deficit"), 1);
        assert_eq!(nodes(&m, "at-capacity"), 1);
        assert_eq!(total(&m, "needed"), 4);

        book.forget(&m, "a");
        assert_eq!(
            (
                total(&m, "available"),
                total(&m, "used"),
                total(&m, "needed")
            ),
            (8, 3, 0)
        );
        assert_eq!(nodes(&m, "total"), 1);
        assert_eq!(nodes(&m, "in-deficit"), 0);
        assert_eq!(nodes(&m, "at-capacity"), 0);
        assert!(
            !m.encode().contains("target_node=\"a\""),
            "a's gauges are gone"
        );
        assert!(m.encode().contains("target_node=\"b\""));

        book.forget(&m, "a");
        assert_eq!(nodes(&m, "total"), 1, "forgetting twice changes nothing");
    }

    #[test]
    fn a_book_that_goes_takes_its_nodes_and_the_next_counts_them_once() {
        let m = Metrics::new();
        let first = FigureBook::default();
        first.record(&m, "a", figures(10, 4, 2, true));
        first.record(&m, "b", figures(3, 3, 0, false));
        first.forget_all(&m);
        assert_eq!(
            (
                total(&m, "available"),
                total(&m, "used"),
                total(&m, "needed")
            ),
            (0, 0, 0)
        );
        assert_eq!(
            (
                nodes(&m, "total"),
                nodes(&m, "in-deficit"),
                nodes(&m, "at-capacity")
            ),
            (0, 0, 0)
        );
        assert!(!m.encode().contains("target_node="), "no frozen gauge");
        // Leading again: the same nodes, counted once.
        let second = FigureBook::default();
        second.record(&m, "a", figures(10, 4, 2, true));
        second.record(&m, "b", figures(3, 3, 0, false));
        assert_eq!(total(&m, "available"), 13);
        assert_eq!(nodes(&m, "total"), 2);
    }
}
