//! Who else writes a CiliumNode's contested fields, read from its
//! `metadata.managedFields`: the entries (typed at the boundary; a
//! malformed one is ignored with the reason) whose fields hold
//! `spec.ipam.pool`, `status.eni` or `status.azure`, and, of those, the
//! managers that are neither this operator nor ignored and whose entry
//! changed within the window.
//!
//! The API server sets an entry's `time` when a write of that manager
//! changed any field the entry holds, so "changed within the window" means
//! "wrote within the window while owning a contested field": a manager that
//! set the pool long ago and since writes only other fields of the same
//! entry (status.ipam.operator-status, say) counts as writing again.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// A field this operator owns that another IPAM writer would also write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ContestedField {
    /// `spec.ipam.pool`: the addresses a node may hand out.
    Pool,
    /// `status.eni`: the node's interfaces in ENI mode.
    Eni,
    /// `status.azure`: the node's interfaces in Azure mode.
    Azure,
}

impl ContestedField {
    pub const ALL: [Self; 3] = [Self::Pool, Self::Eni, Self::Azure];

    /// Its keys in FieldsV1.
    fn keys(self) -> &'static [&'static str] {
        match self {
            Self::Pool => &["f:spec", "f:ipam", "f:pool"],
            Self::Eni => &["f:status", "f:eni"],
            Self::Azure => &["f:status", "f:azure"],
        }
    }

    /// As people write it.
    pub fn path(self) -> &'static str {
        match self {
            Self::Pool => "spec.ipam.pool",
            Self::Eni => "status.eni",
            Self::Azure => "status.azure",
        }
    }

    /// Whether a FieldsV1 set holds this field (or anything under it).
    fn held_by(self, fields: &Value) -> bool {
        self.keys()
            .iter()
            .try_fold(fields, |node, key| node.get(*key))
            .is_some()
    }
}

impl std::fmt::Display for ContestedField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.path())
    }
}

/// How an entry's fields were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Create, update or patch.
    Update,
    /// Server-side apply.
    Apply,
}

/// A managedFields entry holding at least one contested field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContestedEntry {
    pub manager: String,
    pub operation: Operation,
    /// `status` for writes through the status subresource.
    pub subresource: Option<String>,
    /// When a write of this entry's last changed one of its fields.
    pub time: Timestamp,
    /// The contested fields it holds, in [`ContestedField::ALL`]'s order.
    pub fields: Vec<ContestedField>,
}

/// Why an entry was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MalformedEntry {
    #[error("no manager")]
    NoManager,
    #[error("operation {0:?} is neither Update nor Apply")]
    Operation(Option<String>),
    #[error("fieldsType {0:?} is not FieldsV1")]
    FieldsType(Option<String>),
    #[error("fieldsV1 is not an object")]
    Fields,
    #[error("it holds {0} but has no time")]
    NoTime(ContestedField),
}

/// An entry left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    /// Its place in the list.
    pub index: usize,
    pub manager: Option<String>,
    pub problem: MalformedEntry,
}

/// The entries that hold a contested field, and those that could not be
/// read. Entries holding no contested field are left out silently.
pub fn contested_entries(entries: &[ManagedFieldsEntry]) -> (Vec<ContestedEntry>, Vec<Ignored>) {
    let mut contested = Vec::new();
    let mut ignored = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        match read_entry(entry) {
            Ok(Some(read)) => contested.push(read),
            Ok(None) => {}
            Err(problem) => ignored.push(Ignored {
                index,
                manager: entry.manager.clone(),
                problem,
            }),
        }
    }
    (contested, ignored)
}

fn read_entry(entry: &ManagedFieldsEntry) -> Result<Option<ContestedEntry>, MalformedEntry> {
    let manager = entry
        .manager
        .clone()
        .filter(|m| !m.is_empty())
        .ok_or(MalformedEntry::NoManager)?;
    let operation = match entry.operation.as_deref() {
        Some("Update") => Operation::Update,
        Some("Apply") => Operation::Apply,
        other => return Err(MalformedEntry::Operation(other.map(String::from))),
    };
    if entry.fields_type.as_deref() != Some("FieldsV1") {
        return Err(MalformedEntry::FieldsType(entry.fields_type.clone()));
    }
    let fields = entry
        .fields_v1
        .as_ref()
        .map(|f| &f.0)
        .filter(|f| f.is_object())
        .ok_or(MalformedEntry::Fields)?;
    let held: Vec<ContestedField> = ContestedField::ALL
        .into_iter()
        .filter(|field| field.held_by(fields))
        .collect();
    let Some(first) = held.first() else {
        return Ok(None);
    };
    let time = entry
        .time
        .as_ref()
        .map(|t| t.0)
        .ok_or(MalformedEntry::NoTime(*first))?;
    Ok(Some(ContestedEntry {
        manager,
        operation,
        subresource: entry.subresource.clone().filter(|s| !s.is_empty()),
        time,
        fields: held,
    }))
}

/// Which managers count as another writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterRules {
    /// This operator's field manager.
    pub own_manager: String,
    /// Managers that write those fields without contesting them
    /// (cilium-agent sets them when it creates a node).
    pub ignored: BTreeSet<String>,
    /// How long after its last change a manager still counts as writing;
    /// zero: never (only Cilium's operator's Lease is looked at).
    pub window: Duration,
}

/// Another manager that changed a contested field within the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentWriter {
    pub manager: String,
    /// The contested fields its entries hold.
    pub fields: Vec<ContestedField>,
    /// Its latest change.
    pub time: Timestamp,
}

impl WriterRules {
    /// The other managers among a node's `entries` that changed them within
    /// the window of `now` (a time ahead of `now`, a skewed clock, counts
    /// as within), one per manager (its entries for the object and the
    /// status merged), sorted by manager.
    pub fn recent(&self, entries: &[ContestedEntry], now: Timestamp) -> Vec<RecentWriter> {
        // No window: the managedFields are not looked at.
        if self.window.is_zero() {
            return Vec::new();
        }
        let window_ms = i64::try_from(self.window.as_millis()).unwrap_or(i64::MAX);
        let mut writers: Vec<RecentWriter> = Vec::new();
        for entry in entries {
            if entry.manager == self.own_manager || self.ignored.contains(&entry.manager) {
                continue;
            }
            let age_ms = now.as_millisecond() - entry.time.as_millisecond();
            if age_ms > window_ms {
                continue;
            }
            match writers.iter_mut().find(|w| w.manager == entry.manager) {
                Some(writer) => {
                    writer.fields.extend(entry.fields.iter().copied());
                    writer.fields.sort();
                    writer.fields.dedup();
                    writer.time = writer.time.max(entry.time);
                }
                None => writers.push(RecentWriter {
                    manager: entry.manager.clone(),
                    fields: entry.fields.clone(),
                    time: entry.time,
                }),
            }
        }
        writers.sort_by(|a, b| a.manager.cmp(&b.manager));
        writers
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a time")
    }

    /// managedFields as the API server serves them.
    fn entries(json: Value) -> Vec<ManagedFieldsEntry> {
        serde_json::from_value(json).expect("managedFields")
    }

    fn rules() -> WriterRules {
        WriterRules {
            own_manager: "ipam-operator".into(),
            ignored: ["cilium-agent".to_string()].into(),
            window: Duration::from_secs(120),
        }
    }

    /// A CiliumNode's managedFields with this operator, cilium-agent and
    /// Cilium's operator (AWS) all writing, as a v1.30 API server records
    /// Cilium's client-go Update and UpdateStatus (no fieldManager: the
    /// manager is the User-Agent's binary name) and this operator's merge
    /// patches.
    fn beside_cilium_operator() -> Value {
        json!([
            {"manager": "cilium-agent", "operation": "Update", "apiVersion": "cilium.io/v2",
             "time": "2025-03-01T10:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:ownerReferences": {".": {},
                 "k:{\"uid\":\"6b1e\"}": {}}},
                 "f:spec": {".": {}, "f:eni": {".": {}, "f:first-interface-index": {}},
                 "f:instance-id": {}, "f:ipam": {".": {}, "f:pool": {}, "f:pre-allocate": {}}}}},
            {"manager": "cilium-agent", "operation": "Update", "apiVersion": "cilium.io/v2",
             "time": "2025-03-01T10:09:00Z", "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {".": {}, "f:ipam": {".": {}, "f:used": {}}}}},
            {"manager": "cilium-operator-aws", "operation": "Update",
             "apiVersion": "cilium.io/v2", "time": "2025-03-01T10:08:30Z",
             "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:ipam": {"f:pool": {"f:10.0.1.17": {".": {},
                 "f:resource": {}}}}}}},
            {"manager": "cilium-operator-aws", "operation": "Update",
             "apiVersion": "cilium.io/v2", "time": "2025-03-01T10:08:31Z",
             "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {"f:eni": {".": {}, "f:enis": {".": {},
                 "f:eni-0a1b": {".": {}, "f:id": {}}}}, "f:ipam": {"f:operator-status": {}}}}},
            {"manager": "ipam-operator", "operation": "Update", "apiVersion": "cilium.io/v2",
             "time": "2025-03-01T10:09:10Z", "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {"f:eni": {"f:enis": {"f:eni-0c2d": {".": {}, "f:id": {}}}}}}}
        ])
    }

    #[test]
    fn entries_holding_a_contested_field_are_read_with_their_fields() {
        let (contested, ignored) = contested_entries(&entries(beside_cilium_operator()));
        assert!(ignored.is_empty(), "{ignored:?}");
        let read: Vec<(&str, Option<&str>, &[ContestedField])> = contested
            .iter()
            .map(|e| {
                (
                    e.manager.as_str(),
                    e.subresource.as_deref(),
                    e.fields.as_slice(),
                )
            })
            .collect();
        assert_eq!(
            read,
            [
                ("cilium-agent", None, [ContestedField::Pool].as_slice()),
                ("cilium-operator-aws", None, &[ContestedField::Pool]),
                (
                    "cilium-operator-aws",
                    Some("status"),
                    &[ContestedField::Eni]
                ),
                ("ipam-operator", Some("status"), &[ContestedField::Eni]),
            ],
            "cilium-agent's status entry holds no contested field"
        );
        assert_eq!(contested[1].operation, Operation::Update);
        assert_eq!(contested[1].time, at("2025-03-01T10:08:30Z"));
    }

    #[test]
    fn another_manager_is_a_writer_within_the_window_and_not_after() {
        let (contested, _) = contested_entries(&entries(beside_cilium_operator()));
        let rules = rules();
        let table = [
            // (now, the writers seen)
            (
                "2025-03-01T10:09:30Z",
                vec![(
                    "cilium-operator-aws",
                    vec![ContestedField::Pool, ContestedField::Eni],
                )],
            ),
            // 120 s after the object's change: still within.
            (
                "2025-03-01T10:10:30Z",
                vec![(
                    "cilium-operator-aws",
                    vec![ContestedField::Pool, ContestedField::Eni],
                )],
            ),
            // Its object entry aged out, its status one not yet.
            (
                "2025-03-01T10:10:30.500Z",
                vec![("cilium-operator-aws", vec![ContestedField::Eni])],
            ),
            (
                "2025-03-01T10:10:31Z",
                vec![("cilium-operator-aws", vec![ContestedField::Eni])],
            ),
            ("2025-03-01T10:10:31.001Z", vec![]),
            // A clock behind the API server's: ahead of now is recent.
            (
                "2025-03-01T10:00:00Z",
                vec![(
                    "cilium-operator-aws",
                    vec![ContestedField::Pool, ContestedField::Eni],
                )],
            ),
        ];
        for (now, want) in table {
            let got: Vec<(String, Vec<ContestedField>)> = rules
                .recent(&contested, at(now))
                .into_iter()
                .map(|w| (w.manager, w.fields))
                .collect();
            let want: Vec<(String, Vec<ContestedField>)> =
                want.into_iter().map(|(m, f)| (m.to_string(), f)).collect();
            assert_eq!(got, want, "at {now}");
        }
        let newest = rules.recent(&contested, at("2025-03-01T10:09:30Z"));
        assert_eq!(newest[0].time, at("2025-03-01T10:08:31Z"), "the latest");
        let off = WriterRules {
            window: Duration::ZERO,
            ..rules.clone()
        };
        assert!(
            off.recent(&contested, at("2025-03-01T10:00:00Z"))
                .is_empty(),
            "no window: not even a time ahead of now counts"
        );
    }

    #[test]
    fn this_operator_and_the_ignored_managers_are_never_writers() {
        let (contested, _) = contested_entries(&entries(beside_cilium_operator()));
        let mut rules = rules();
        rules.ignored.insert("cilium-operator-aws".into());
        assert!(rules
            .recent(&contested, at("2025-03-01T10:09:30Z"))
            .is_empty());
        rules.ignored.clear();
        // Within a minute of cilium-agent's creating the node.
        let seen: Vec<String> = rules
            .recent(&contested, at("2025-03-01T10:01:00Z"))
            .into_iter()
            .map(|w| w.manager)
            .collect();
        assert_eq!(seen, ["cilium-agent", "cilium-operator-aws"]);
    }

    #[test]
    fn azure_status_and_server_side_apply_are_read_too() {
        let list = entries(json!([
            {"manager": "cilium-operator-azure", "operation": "Update",
             "apiVersion": "cilium.io/v2", "time": "2025-03-01T10:00:00Z",
             "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {"f:azure": {".": {}, "f:interfaces": {}}}}},
            {"manager": "someone", "operation": "Apply", "apiVersion": "cilium.io/v2",
             "time": "2025-03-01T10:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:ipam": {"f:pool": {}}}}}
        ]));
        let (contested, ignored) = contested_entries(&list);
        assert!(ignored.is_empty());
        assert_eq!(contested[0].fields, [ContestedField::Azure]);
        assert_eq!(contested[1].operation, Operation::Apply);
        assert_eq!(contested[1].fields, [ContestedField::Pool]);
    }

    #[test]
    fn a_malformed_entry_is_ignored_with_the_reason_and_the_others_still_read() {
        let list = entries(json!([
            {"operation": "Update", "time": "2025-03-01T10:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:ipam": {"f:pool": {}}}}},
            {"manager": "a", "operation": "Patch", "time": "2025-03-01T10:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {}},
            {"manager": "b", "operation": "Update", "time": "2025-03-01T10:00:00Z",
             "fieldsType": "FieldsV2", "fieldsV1": {}},
            {"manager": "c", "operation": "Update", "time": "2025-03-01T10:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": ["f:spec"]},
            {"manager": "d", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:status": {"f:eni": {}}}},
            // No time, but nothing contested: not our business.
            {"manager": "e", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {}}}},
            {"manager": "f", "operation": "Update", "time": "2025-03-01T10:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:eni": {}}}}
        ]));
        let (contested, ignored) = contested_entries(&list);
        let problems: Vec<(usize, Option<&str>, MalformedEntry)> = ignored
            .iter()
            .map(|i| (i.index, i.manager.as_deref(), i.problem.clone()))
            .collect();
        assert_eq!(
            problems,
            [
                (0, None, MalformedEntry::NoManager),
                (
                    1,
                    Some("a"),
                    MalformedEntry::Operation(Some("Patch".into()))
                ),
                (
                    2,
                    Some("b"),
                    MalformedEntry::FieldsType(Some("FieldsV2".into()))
                ),
                (3, Some("c"), MalformedEntry::Fields),
                (4, Some("d"), MalformedEntry::NoTime(ContestedField::Eni)),
            ]
        );
        assert_eq!(
            problems[4].2.to_string(),
            "it holds status.eni but has no time"
        );
        assert_eq!(contested.len(), 1);
        assert_eq!(contested[0].manager, "f");
    }
}
