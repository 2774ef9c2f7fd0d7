//! `metadata.managedFields` as the API server records them for the writes
//! that are not server-side apply (operation `Update`): a create, an
//! update (PUT) and a patch, on an object or on its status subresource.
//!
//! What is recorded, as the real server does it:
//! - the manager: the request's `fieldManager` query parameter, else the
//!   User-Agent up to its first `/` (client-go's `cilium-operator-aws/v1.16.5
//!   (linux/amd64) kubernetes/abc` is recorded as `cilium-operator-aws`);
//! - one entry per manager, operation, apiVersion and subresource
//!   (`subresource: status` for a write through `/status`);
//! - the fields the write changed (every field of the object on a create):
//!   added to the writer's entry, taken from every other entry (a field has
//!   one owner among updaters); fields the write removed leave every entry;
//!   an entry left with no field is dropped;
//! - `time`, set to now (whole seconds, RFC 3339) on the writer's entry only
//!   when the write changed a field: a write that changes nothing leaves the
//!   entries as they were;
//! - the fields the server fills in (apiVersion, kind, metadata.name,
//!   namespace, uid, resourceVersion, generation, creationTimestamp,
//!   managedFields) are never anyone's;
//! - a request that carries `metadata.managedFields` replaces the entries
//!   before its own change is recorded; one that does not keeps them;
//! - entries sorted as the real server sorts them (operation, time,
//!   manager, apiVersion, subresource).
//!
//! What it does not do: server-side apply (a patch is a merge patch, and
//! recorded as `Update`); the schema: a list is one field (the real server
//! tracks the items of a keyed list, `k:{...}`), and `.` (the field itself
//! owned besides its children) is put on every object that a write added
//! whole, where the real server puts it as the schema says (maps and list
//! items, not structs); the cap of ten update entries (older ones merged
//! into `ancient-changes`).

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

/// A field: its keys from the root, each as FieldsV1 writes it (`f:spec`).
type Path = Vec<String>;

/// A set of fields. A path whose children are also members is the field
/// itself owned besides them (`.` in FieldsV1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSet(BTreeSet<Path>);

impl FieldSet {
    /// The set a FieldsV1 object holds.
    pub(crate) fn from_fields_v1(value: &Value) -> Self {
        let mut set = Self::default();
        collect(value, &mut Vec::new(), &mut set.0);
        set
    }

    /// As FieldsV1 JSON.
    pub(crate) fn to_fields_v1(&self) -> Value {
        let mut root = json!({});
        for path in &self.0 {
            let mut node = &mut root;
            for key in path {
                node = node
                    .as_object_mut()
                    .expect("FieldsV1 nodes are objects")
                    .entry(key.clone())
                    .or_insert_with(|| json!({}));
            }
        }
        // A member with children in the set is marked with `.`.
        for path in &self.0 {
            let has_children = self
                .0
                .range(path.clone()..)
                .nth(1)
                .is_some_and(|next| next.starts_with(path));
            if has_children {
                let mut node = &mut root;
                for key in path {
                    node = &mut node[key.as_str()];
                }
                node["."] = json!({});
            }
        }
        root
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn union(&mut self, other: &FieldSet) {
        self.0.extend(other.0.iter().cloned());
    }

    /// Without `other`'s members.
    fn remove_all(&mut self, other: &FieldSet) {
        self.0.retain(|path| !other.0.contains(path));
    }

    /// Without the fields under (or at) each of `prefixes`.
    fn remove_under(&mut self, prefixes: &[Path]) {
        self.0
            .retain(|path| !prefixes.iter().any(|p| path.starts_with(p)));
    }
}

fn collect(value: &Value, path: &mut Path, set: &mut BTreeSet<Path>) {
    let Some(map) = value.as_object() else { return };
    if (map.is_empty() || map.contains_key(".")) && !path.is_empty() {
        set.insert(path.clone());
    }
    for (key, child) in map {
        if key == "." {
            continue;
        }
        path.push(key.clone());
        collect(child, path, set);
        path.pop();
    }
}

/// Fields no manager owns: what the server fills in.
fn stripped(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "managedFields",
            "selfLink",
        ] {
            metadata.remove(key);
        }
        if metadata.is_empty() {
            object.as_object_mut().map(|m| m.remove("metadata"));
        }
    }
    object
}

/// What a write did to the fields: changed (added, or given another
/// value) and removed (prefixes).
#[derive(Debug, Default)]
struct Change {
    changed: FieldSet,
    removed: Vec<Path>,
}

fn compare(old: Option<&Value>, new: &Value, path: &mut Path, change: &mut Change) {
    match (old, new) {
        (Some(Value::Object(old)), Value::Object(new)) => {
            for (key, value) in new {
                path.push(format!("f:{key}"));
                compare(old.get(key), value, path, change);
                path.pop();
            }
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                path.push(format!("f:{key}"));
                change.removed.push(path.clone());
                path.pop();
            }
        }
        (_, Value::Object(new)) => {
            // Added whole (or replacing a value of another kind).
            if !path.is_empty() {
                change.changed.0.insert(path.clone());
            }
            for (key, value) in new {
                path.push(format!("f:{key}"));
                compare(None, value, path, change);
                path.pop();
            }
        }
        (old, new) => {
            if old != Some(new) && !path.is_empty() {
                if matches!(old, Some(Value::Object(_))) {
                    change.removed.push(path.clone());
                }
                change.changed.0.insert(path.clone());
            }
        }
    }
}

/// Who wrote, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Writer {
    pub manager: String,
    /// `Some("status")` for a write through the status subresource.
    pub subresource: Option<String>,
    /// The resource's group/version.
    pub api_version: String,
    /// RFC 3339, whole seconds.
    pub time: String,
}

impl Writer {
    /// The manager of a request: its `fieldManager` query parameter, else
    /// its User-Agent's prefix before the first `/`.
    pub(crate) fn manager_of(query: &str, user_agent: Option<&str>) -> String {
        query
            .split('&')
            .find_map(|p| p.strip_prefix("fieldManager="))
            .map(crate::label_selector::decoded)
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| {
                user_agent
                    .unwrap_or_default()
                    .split('/')
                    .next()
                    .unwrap_or_default()
                    .to_string()
            })
    }

    fn owns(&self, entry: &Value) -> bool {
        entry["manager"].as_str() == Some(self.manager.as_str())
            && entry["operation"].as_str() == Some("Update")
            && entry["apiVersion"].as_str() == Some(self.api_version.as_str())
            && entry["subresource"].as_str() == self.subresource.as_deref()
    }
}

/// Record in `new`'s metadata.managedFields the write by `writer` that made
/// `new` of `old` (`None` on a create). `given`: the request carried
/// managedFields (they are in `new` already and replace `old`'s).
pub(crate) fn record(old: Option<&Value>, new: &mut Value, writer: &Writer, given: bool) {
    let mut entries: Vec<Value> = match given {
        true => new["metadata"]["managedFields"].as_array().cloned(),
        false => old.and_then(|o| o["metadata"]["managedFields"].as_array().cloned()),
    }
    .unwrap_or_default();
    let mut change = Change::default();
    compare(
        old.map(stripped).as_ref(),
        &stripped(new),
        &mut Vec::new(),
        &mut change,
    );
    // The writer's own entry: its fields and the time it last changed one.
    let mut mine: Option<(FieldSet, Value)> = None;
    entries.retain_mut(|entry| {
        let mut fields = FieldSet::from_fields_v1(&entry["fieldsV1"]);
        fields.remove_under(&change.removed);
        if writer.owns(entry) {
            mine = Some((fields, entry["time"].clone()));
            return false;
        }
        fields.remove_all(&change.changed);
        if fields.is_empty() {
            return false;
        }
        entry["fieldsV1"] = fields.to_fields_v1();
        true
    });
    let (mut fields, time) = match (mine, change.changed.is_empty()) {
        // Nothing changed: the writer's entry keeps its time.
        (Some((fields, time)), true) => (fields, time),
        (Some((fields, _)), false) => (fields, json!(writer.time)),
        (None, _) => (FieldSet::default(), json!(writer.time)),
    };
    fields.union(&change.changed);
    if !fields.is_empty() {
        let mut entry = Map::new();
        entry.insert("manager".into(), json!(writer.manager));
        entry.insert("operation".into(), json!("Update"));
        entry.insert("apiVersion".into(), json!(writer.api_version));
        entry.insert("time".into(), time);
        entry.insert("fieldsType".into(), json!("FieldsV1"));
        entry.insert("fieldsV1".into(), fields.to_fields_v1());
        if let Some(subresource) = &writer.subresource {
            entry.insert("subresource".into(), json!(subresource));
        }
        entries.push(Value::Object(entry));
    }
    sort(&mut entries);
    let Some(metadata) = new.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    match entries.is_empty() {
        true => metadata.remove("managedFields"),
        false => metadata.insert("managedFields".into(), Value::Array(entries)),
    };
}

/// The real server's order: operation, time, manager, apiVersion,
/// subresource. RFC 3339 times in UTC with whole seconds sort as text.
fn sort(entries: &mut [Value]) {
    let key = |e: &Value| {
        let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
        (
            text("operation"),
            text("time"),
            text("manager"),
            text("apiVersion"),
            text("subresource"),
        )
    };
    entries.sort_by_key(key);
}

/// Now, as the API server writes a managedFields time.
pub(crate) fn now() -> String {
    let seconds = jiff::Timestamp::now().as_second();
    jiff::Timestamp::from_second(seconds)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(manager: &str, subresource: Option<&str>, time: &str) -> Writer {
        Writer {
            manager: manager.into(),
            subresource: subresource.map(String::from),
            api_version: "cilium.io/v2".into(),
            time: time.into(),
        }
    }

    fn node(pool: Value) -> Value {
        json!({"apiVersion": "cilium.io/v2", "kind": "CiliumNode",
               "metadata": {"name": "n1", "uid": "u", "resourceVersion": "3"},
               "spec": {"instance-id": "i-1", "ipam": {"pool": pool}}})
    }

    #[test]
    fn the_manager_is_the_field_manager_else_the_user_agents_prefix() {
        assert_eq!(
            Writer::manager_of("fieldManager=ipam-operator", Some("kube/1")),
            "ipam-operator"
        );
        assert_eq!(
            Writer::manager_of(
                "",
                Some("cilium-operator-aws/v1.16.5 (linux/amd64) kubernetes/abcdef")
            ),
            "cilium-operator-aws"
        );
        assert_eq!(
            Writer::manager_of("dryRun=All&fieldManager=a%2Fb", None),
            "a/b"
        );
        assert_eq!(Writer::manager_of("", None), "");
    }

    #[test]
    fn fields_v1_marks_a_field_owned_with_its_children_by_a_dot() {
        let fields = json!({"f:spec": {"f:ipam": {"f:pool": {".": {},
            "f:10.0.0.1": {".": {}, "f:resource": {}}}}, "f:instance-id": {}}});
        let set = FieldSet::from_fields_v1(&fields);
        assert_eq!(set.0.len(), 4, "{set:?}");
        assert_eq!(set.to_fields_v1(), fields, "read and written back the same");
    }

    #[test]
    fn a_create_records_every_field_but_the_servers_own() {
        let mut created = node(json!({"10.0.0.1": {"resource": "eni-1"}}));
        record(
            None,
            &mut created,
            &writer("cilium-agent", None, "2025-01-02T03:04:05Z"),
            false,
        );
        assert_eq!(
            created["metadata"]["managedFields"],
            json!([{"manager": "cilium-agent", "operation": "Update",
                    "apiVersion": "cilium.io/v2", "time": "2025-01-02T03:04:05Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {".": {}, "f:instance-id": {},
                        "f:ipam": {".": {}, "f:pool": {".": {},
                            "f:10.0.0.1": {".": {}, "f:resource": {}}}}}}}])
        );
    }

    #[test]
    fn an_update_takes_the_fields_it_changes_and_leaves_the_rest() {
        let mut before = node(json!({"10.0.0.1": {"resource": "eni-1"}}));
        record(
            None,
            &mut before,
            &writer("cilium-agent", None, "2025-01-02T03:04:05Z"),
            false,
        );
        // Another manager adds an address and changes nothing else.
        let mut after = before.clone();
        after["spec"]["ipam"]["pool"]["10.0.0.2"] = json!({"resource": "eni-1"});
        record(
            Some(&before),
            &mut after,
            &writer("cilium-operator-aws", None, "2025-01-02T03:05:00Z"),
            false,
        );
        let entries = after["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 2, "{entries:#?}");
        assert_eq!(entries[0]["manager"], "cilium-agent");
        assert_eq!(entries[0]["time"], "2025-01-02T03:04:05Z", "not its change");
        assert!(entries[0]["fieldsV1"]["f:spec"]["f:ipam"]["f:pool"]["f:10.0.0.1"].is_object());
        assert_eq!(entries[1]["manager"], "cilium-operator-aws");
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({"f:spec": {"f:ipam": {"f:pool": {"f:10.0.0.2": {".": {}, "f:resource": {}}}}}})
        );
        // It changes the first address: the field moves to it.
        let mut moved = after.clone();
        moved["spec"]["ipam"]["pool"]["10.0.0.1"]["resource"] = json!("eni-2");
        record(
            Some(&after),
            &mut moved,
            &writer("cilium-operator-aws", None, "2025-01-02T03:06:00Z"),
            false,
        );
        let entries = moved["metadata"]["managedFields"].as_array().unwrap();
        let agent = &entries[0]["fieldsV1"]["f:spec"]["f:ipam"]["f:pool"]["f:10.0.0.1"];
        assert_eq!(
            agent,
            &json!({}),
            "the agent keeps the entry, not its resource"
        );
        assert_eq!(entries[1]["time"], "2025-01-02T03:06:00Z");
        assert!(
            entries[1]["fieldsV1"]["f:spec"]["f:ipam"]["f:pool"]["f:10.0.0.1"]["f:resource"]
                .is_object()
        );
    }

    #[test]
    fn a_write_that_changes_nothing_keeps_the_time_and_a_removed_field_leaves_every_entry() {
        let mut before = node(json!({"10.0.0.1": {"resource": "eni-1"}}));
        record(
            None,
            &mut before,
            &writer("a", None, "2025-01-02T03:04:05Z"),
            false,
        );
        let mut same = before.clone();
        record(
            Some(&before),
            &mut same,
            &writer("a", None, "2025-01-02T09:00:00Z"),
            false,
        );
        assert_eq!(
            same["metadata"]["managedFields"],
            before["metadata"]["managedFields"]
        );
        let mut removed = before.clone();
        removed["spec"]["ipam"] = json!({});
        record(
            Some(&before),
            &mut removed,
            &writer("b", None, "2025-01-02T09:00:00Z"),
            false,
        );
        // A removal alone gives b nothing to own.
        let entries = removed["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 1, "{entries:#?}");
        assert_eq!(
            entries[0]["fieldsV1"]["f:spec"]["f:ipam"],
            json!({}),
            "the pool left a's entry: {:#}",
            entries[0]
        );
    }

    #[test]
    fn a_status_write_is_its_own_entry_and_given_entries_replace_the_old() {
        let mut before = node(json!({}));
        before["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Update",
            "apiVersion": "cilium.io/v2", "time": "2020-01-01T00:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:instance-id": {}}}}]);
        let mut after = before.clone();
        after["status"] = json!({"eni": {"enis": {"eni-1": {"id": "eni-1"}}}});
        record(
            Some(&before),
            &mut after,
            &writer(
                "cilium-operator-aws",
                Some("status"),
                "2025-01-02T03:04:05Z",
            ),
            false,
        );
        let entries = after["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1]["subresource"], "status");
        assert!(entries[1]["fieldsV1"]["f:status"]["f:eni"]["f:enis"].is_object());
        let mut cleared = after.clone();
        cleared["metadata"]["managedFields"] = json!([]);
        cleared["spec"]["instance-id"] = json!("i-2");
        record(
            Some(&after),
            &mut cleared,
            &writer("y", None, "2025-01-02T03:04:06Z"),
            true,
        );
        let entries = cleared["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 1, "{entries:#?}");
        assert_eq!(entries[0]["manager"], "y");
    }
}
