//! The other managers seen per node, each kept until the window after its
//! last change has passed, even once its managedFields entry is gone: a
//! write of this operator's that raced the pause (the engine stops within
//! moments, not at once) takes the fields the other manager changed, and
//! the API server drops an entry left with no field. The evidence of a
//! write must last as long as the window, not as long as the entry.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::managed_fields::RecentWriter;

#[derive(Debug, Default)]
pub struct Seen {
    /// Node -> manager -> its latest change seen.
    nodes: BTreeMap<String, BTreeMap<String, RecentWriter>>,
}

impl Seen {
    /// A node's recent writers as its entries show them now, on top of
    /// those seen before (fields merged, the latest time kept).
    pub fn note(&mut self, node: &str, writers: Vec<RecentWriter>) {
        if writers.is_empty() {
            return;
        }
        let known = self.nodes.entry(node.to_string()).or_default();
        for writer in writers {
            match known.get_mut(&writer.manager) {
                Some(before) => {
                    before.fields.extend(writer.fields);
                    before.fields.sort();
                    before.fields.dedup();
                    before.time = before.time.max(writer.time);
                }
                None => {
                    known.insert(writer.manager.clone(), writer);
                }
            }
        }
    }

    /// The node is gone.
    pub fn forget(&mut self, node: &str) {
        self.nodes.remove(node);
    }

    /// Drop what is older than `window` at `now`; what is left, by node
    /// (nodes with none left out), managers sorted.
    pub fn current(
        &mut self,
        window: Duration,
        now: Timestamp,
    ) -> BTreeMap<String, Vec<RecentWriter>> {
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        for writers in self.nodes.values_mut() {
            writers.retain(|_, w| now.as_millisecond() - w.time.as_millisecond() <= window_ms);
        }
        self.nodes.retain(|_, writers| !writers.is_empty());
        self.nodes
            .iter()
            .map(|(node, writers)| (node.clone(), writers.values().cloned().collect()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::other_writers::managed_fields::ContestedField;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn writer(manager: &str, field: ContestedField, time: &str) -> RecentWriter {
        RecentWriter {
            manager: manager.into(),
            fields: vec![field],
            time: at(time),
        }
    }

    #[test]
    fn a_writer_is_kept_for_its_window_after_its_entry_is_gone() {
        let window = Duration::from_secs(120);
        let mut seen = Seen::default();
        seen.note(
            "n1",
            vec![writer(
                "cilium-operator-aws",
                ContestedField::Pool,
                "2025-03-01T10:00:00Z",
            )],
        );
        // Its entry gone (this operator's racing write took its fields):
        // nothing new to note, still seen.
        seen.note("n1", Vec::new());
        let now = seen.current(window, at("2025-03-01T10:01:00Z"));
        assert_eq!(now["n1"][0].manager, "cilium-operator-aws");
        seen.note(
            "n1",
            vec![writer(
                "cilium-operator-aws",
                ContestedField::Eni,
                "2025-03-01T10:01:30Z",
            )],
        );
        let now = seen.current(window, at("2025-03-01T10:03:00Z"));
        assert_eq!(
            now["n1"][0].fields,
            [ContestedField::Pool, ContestedField::Eni],
            "merged"
        );
        assert_eq!(now["n1"][0].time, at("2025-03-01T10:01:30Z"), "the latest");
        assert!(
            seen.current(window, at("2025-03-01T10:03:30.001Z"))
                .is_empty(),
            "the window after its last change has passed"
        );
        seen.note(
            "n2",
            vec![writer(
                "kubectl",
                ContestedField::Pool,
                "2025-03-01T10:05:00Z",
            )],
        );
        seen.forget("n2");
        assert!(seen.current(window, at("2025-03-01T10:05:00Z")).is_empty());
    }
}
