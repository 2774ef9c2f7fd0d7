//! Per-node gauges and the totals over every node, kept by difference so a
//! pass costs the same at 10 nodes as at 5,000. The figures are Cilium's
//! (`pkg/ipam/node_manager.go`): per node its capacity, used and needed
//! addresses; over all nodes the free, used and needed addresses, the
//! interfaces with room, the empty interface slots, and the nodes in
//! deficit or at capacity.

use std::collections::BTreeMap;
use std::sync::Mutex;

use ipam_pool::room::Room;

use crate::metrics::{CategoryLabel, Metrics, NodeLabel, TypeLabel};

/// The per-node summary the metrics aggregate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeFigures {
    /// Addresses in the node's pool.
    pub pool: i64,
    pub used: i64,
    pub needed: i64,
    /// What the node's instance has room for; None while its instance or
    /// its type's limits are unknown.
    pub room: Option<Room>,
}

impl NodeFigures {
    /// Pool addresses not used (Cilium: available on the node now).
    fn free(&self) -> i64 {
        self.pool - self.used
    }

    fn room(&self) -> Room {
        self.room.unwrap_or_default()
    }

    /// Cilium's at-capacity: no free address, no interface with room and
    /// no empty interface slot (a node whose room is unknown is not).
    pub fn at_capacity(&self) -> bool {
        self.room
            .is_some_and(|room| room.interface_candidates == 0 && room.empty_interface_slots == 0)
            && self.free() <= 0
    }
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
        m.available_ips
            .get_or_create(&label)
            .set(i64::from(n.room().capacity));
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
    ips("available", n.free() - b.free());
    ips("used", n.used - b.used);
    ips("needed", n.needed - b.needed);
    let (rb, rn) = (b.room(), n.room());
    let candidates = i64::from(rn.interface_candidates) - i64::from(rb.interface_candidates);
    let slots = i64::from(rn.empty_interface_slots) - i64::from(rb.empty_interface_slots);
    m.interface_candidates.inc_by(candidates);
    m.empty_interface_slots.inc_by(slots);
    m.available_interfaces.inc_by(candidates + slots);
    let nodes = |c: &'static str, was: bool, is: bool| {
        if was != is {
            m.nodes
                .get_or_create(&CategoryLabel { category: c })
                .inc_by(if is { 1 } else { -1 });
        }
    };
    nodes("total", before.is_some(), now.is_some());
    nodes("in-deficit", b.needed > 0, n.needed > 0);
    nodes("at-capacity", b.at_capacity(), n.at_capacity());
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

    fn room(candidates: u32, slots: u32, capacity: u32) -> Option<Room> {
        Some(Room {
            interface_candidates: candidates,
            empty_interface_slots: slots,
            capacity,
        })
    }

    fn figures(pool: i64, used: i64, needed: i64, room: Option<Room>) -> NodeFigures {
        NodeFigures {
            pool,
            used,
            needed,
            room,
        }
    }

    fn interfaces(m: &Metrics) -> (i64, i64, i64) {
        (
            m.interface_candidates.get(),
            m.empty_interface_slots.get(),
            m.available_interfaces.get(),
        )
    }

    #[test]
    fn totals_follow_each_node_by_difference() {
        let m = Metrics::new();
        let book = FigureBook::default();
        book.record(&m, "a", figures(10, 4, 0, room(1, 2, 30)));
        book.record(&m, "b", figures(3, 3, 5, room(0, 0, 3)));
        assert_eq!(gauge_of(&m, "a"), (30, 4, 0), "per node: its capacity");
        assert_eq!(gauge_of(&m, "b"), (3, 3, 5));
        assert_eq!(
            (
                total(&m, "available"),
                total(&m, "used"),
                total(&m, "needed")
            ),
            (6, 7, 5),
            "available: pool addresses not used"
        );
        assert_eq!(interfaces(&m), (1, 2, 3));
        assert_eq!(nodes(&m, "total"), 2);
        assert_eq!(nodes(&m, "in-deficit"), 1);
        assert_eq!(nodes(&m, "at-capacity"), 1, "b: no free address, no room");

        // b got an interface slot back (another interface went).
        book.record(&m, "b", figures(8, 3, 0, room(1, 0, 8)));
        assert_eq!(
            (
                total(&m, "available"),
                total(&m, "used"),
                total(&m, "needed")
            ),
            (11, 7, 0)
        );
        assert_eq!(interfaces(&m), (2, 2, 4));
        assert_eq!(nodes(&m, "total"), 2, "a node recorded again counts once");
        assert_eq!(nodes(&m, "in-deficit"), 0);
        assert_eq!(nodes(&m, "at-capacity"), 0);

        // a falls into deficit at capacity.
        book.record(&m, "a", figures(9, 9, 4, room(0, 0, 30)));
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
            (5, 3, 0)
        );
        assert_eq!(interfaces(&m), (1, 0, 1));
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
        first.record(&m, "a", figures(10, 4, 2, room(0, 0, 10)));
        first.record(&m, "b", figures(3, 3, 0, room(1, 2, 30)));
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
        assert_eq!(interfaces(&m), (0, 0, 0));
        assert!(!m.encode().contains("target_node="), "no frozen gauge");
        // Leading again: the same nodes, counted once.
        let second = FigureBook::default();
        second.record(&m, "a", figures(10, 4, 2, room(0, 0, 10)));
        second.record(&m, "b", figures(3, 3, 0, room(1, 2, 30)));
        assert_eq!(total(&m, "available"), 6);
        assert_eq!(nodes(&m, "total"), 2);
    }

    #[test]
    fn a_node_whose_room_is_unknown_is_not_at_capacity() {
        let m = Metrics::new();
        let book = FigureBook::default();
        book.record(&m, "a", figures(0, 0, 8, None));
        assert_eq!(nodes(&m, "at-capacity"), 0);
        assert_eq!(gauge_of(&m, "a"), (0, 0, 8));
        assert_eq!(interfaces(&m), (0, 0, 0));
    }
}
