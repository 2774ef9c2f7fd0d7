//! The CiliumNode CRD's structural schema (cilium.io/v2, as Cilium's
//! `ciliumnodes.yaml` declares it), for the fields this crate models, and
//! what the API server does with a document against it: an unknown field is
//! pruned silently, a value of the wrong type is refused. [`check`] lists
//! both, so a test can show that every field the operator writes, spec and
//! status, survives a real API server ([`prune`] shows what would be left).
//! Fields of the CRD this crate never writes are left out of the schema.

use serde_json::Value;

/// A node of a structural schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schema {
    String,
    /// A string of one of these values.
    Enum(&'static [&'static str]),
    /// An integer, at least `minimum` when set.
    Integer {
        minimum: Option<i64>,
    },
    Boolean,
    Array(Box<Schema>),
    /// An object with these properties; any other is pruned.
    Object(Vec<(&'static str, Schema)>),
    /// An object whose every value has this schema (`additionalProperties`).
    Map(Box<Schema>),
    /// Kept as it is (`metadata`, which the API server checks itself).
    Preserved,
}

/// What the API server would do about one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Not in the schema: dropped on write.
    Pruned,
    /// Refused: the schema wants another type.
    WrongType {
        want: &'static str,
        got: &'static str,
    },
    NotInEnum(String),
    BelowMinimum {
        minimum: i64,
        value: String,
    },
}

/// A problem at a path (`status.azure.interfaces[0].CIDR`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub path: String,
    pub problem: Problem,
}

/// Whether `null` is a value or, in a JSON merge patch, the removal of a
/// field (which the schema does not constrain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nulls {
    Refused,
    RemoveField,
}

fn object(properties: Vec<(&'static str, Schema)>) -> Schema {
    Schema::Object(properties)
}
fn array(items: Schema) -> Schema {
    Schema::Array(Box::new(items))
}
fn map(values: Schema) -> Schema {
    Schema::Map(Box::new(values))
}
fn strings() -> Schema {
    array(Schema::String)
}
fn string_map() -> Schema {
    map(Schema::String)
}
fn count() -> Schema {
    Schema::Integer { minimum: Some(0) }
}

/// `AllocationIP`, the value of spec.ipam.pool and status.ipam.used.
fn allocation_ip() -> Schema {
    object(vec![
        ("owner", Schema::String),
        ("resource", Schema::String),
    ])
}

/// Cilium's release handshake states (`IPReleaseStatus`).
const RELEASE_STATES: &[&str] = &[
    "marked-for-release",
    "ready-for-release",
    "do-not-release",
    "released",
];

/// The CiliumNode object, as far as this crate reads and writes it.
pub fn ciliumnode() -> Schema {
    object(vec![
        ("apiVersion", Schema::String),
        ("kind", Schema::String),
        ("metadata", Schema::Preserved),
        ("spec", spec()),
        ("status", status()),
    ])
}

fn spec() -> Schema {
    object(vec![
        ("instance-id", Schema::String),
        (
            "ipam",
            object(vec![
                ("pool", map(allocation_ip())),
                ("pre-allocate", count()),
                ("min-allocate", count()),
                ("max-allocate", count()),
                ("max-above-watermark", count()),
            ]),
        ),
        (
            "eni",
            object(vec![
                ("instance-type", Schema::String),
                ("availability-zone", Schema::String),
                ("vpc-id", Schema::String),
                ("node-subnet-id", Schema::String),
                ("first-interface-index", count()),
                ("subnet-ids", strings()),
                ("subnet-tags", string_map()),
                ("security-groups", strings()),
                ("security-group-tags", string_map()),
                ("exclude-interface-tags", string_map()),
                ("use-primary-address", Schema::Boolean),
                ("disable-prefix-delegation", Schema::Boolean),
                ("delete-on-termination", Schema::Boolean),
            ]),
        ),
        ("azure", object(vec![("interface-name", Schema::String)])),
    ])
}

fn status() -> Schema {
    let eni = object(vec![
        ("id", Schema::String),
        ("ip", Schema::String),
        ("mac", Schema::String),
        ("availability-zone", Schema::String),
        ("description", Schema::String),
        ("number", Schema::Integer { minimum: None }),
        (
            "subnet",
            object(vec![("id", Schema::String), ("cidr", Schema::String)]),
        ),
        (
            "vpc",
            object(vec![
                ("id", Schema::String),
                ("primary-cidr", Schema::String),
                ("cidrs", strings()),
            ]),
        ),
        ("addresses", strings()),
        ("prefixes", strings()),
        ("security-groups", strings()),
        ("tags", string_map()),
    ]);
    let azure_interface = object(vec![
        ("id", Schema::String),
        ("name", Schema::String),
        ("mac", Schema::String),
        ("state", Schema::String),
        (
            "addresses",
            array(object(vec![
                ("ip", Schema::String),
                ("subnet", Schema::String),
                ("state", Schema::String),
            ])),
        ),
        ("security-group", Schema::String),
        ("cidr", Schema::String),
        ("gateway", Schema::String),
        ("GatewayIP", Schema::String),
    ]);
    object(vec![
        (
            "ipam",
            object(vec![
                ("used", map(allocation_ip())),
                ("release-ips", map(Schema::Enum(RELEASE_STATES))),
                ("operator-status", object(vec![("error", Schema::String)])),
            ]),
        ),
        ("eni", object(vec![("enis", map(eni))])),
        (
            "azure",
            object(vec![("interfaces", array(azure_interface))]),
        ),
    ])
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn want_name(schema: &Schema) -> &'static str {
    match schema {
        Schema::String | Schema::Enum(_) => "string",
        Schema::Integer { .. } => "integer",
        Schema::Boolean => "boolean",
        Schema::Array(_) => "array",
        Schema::Object(_) | Schema::Map(_) => "object",
        Schema::Preserved => "anything",
    }
}

/// Every field of `value` the API server would prune or refuse.
pub fn check(schema: &Schema, value: &Value, nulls: Nulls) -> Vec<Finding> {
    let mut findings = Vec::new();
    walk(schema, value, nulls, "", &mut findings);
    findings
}

fn walk(schema: &Schema, value: &Value, nulls: Nulls, path: &str, out: &mut Vec<Finding>) {
    let found = |out: &mut Vec<Finding>, problem| {
        out.push(Finding {
            path: path.to_string(),
            problem,
        })
    };
    if value.is_null() && nulls == Nulls::RemoveField {
        return;
    }
    match (schema, value) {
        (Schema::Preserved, _)
        | (Schema::String, Value::String(_))
        | (Schema::Boolean, Value::Bool(_)) => {}
        (Schema::Enum(allowed), Value::String(s)) => {
            if !allowed.contains(&s.as_str()) {
                found(out, Problem::NotInEnum(s.clone()));
            }
        }
        (Schema::Integer { minimum }, Value::Number(n)) if n.is_i64() || n.is_u64() => {
            if let (Some(minimum), Some(v)) = (minimum, n.as_i64()) {
                if v < *minimum {
                    found(
                        out,
                        Problem::BelowMinimum {
                            minimum: *minimum,
                            value: n.to_string(),
                        },
                    );
                }
            }
        }
        (Schema::Array(items), Value::Array(values)) => {
            for (i, item) in values.iter().enumerate() {
                walk(items, item, nulls, &format!("{path}[{i}]"), out);
            }
        }
        (Schema::Map(values), Value::Object(fields)) => {
            for (key, item) in fields {
                walk(values, item, nulls, &format!("{path}[{key}]"), out);
            }
        }
        (Schema::Object(properties), Value::Object(fields)) => {
            for (key, item) in fields {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match properties.iter().find(|(name, _)| name == key) {
                    Some((_, schema)) => walk(schema, item, nulls, &child, out),
                    None => out.push(Finding {
                        path: child,
                        problem: Problem::Pruned,
                    }),
                }
            }
        }
        (schema, value) => found(
            out,
            Problem::WrongType {
                want: want_name(schema),
                got: type_name(value),
            },
        ),
    }
}

/// `value` as the API server stores it: every field the schema lacks
/// removed (values of the wrong type are left for [`check`] to report).
pub fn prune(schema: &Schema, value: &Value) -> Value {
    match (schema, value) {
        (Schema::Object(properties), Value::Object(fields)) => Value::Object(
            fields
                .iter()
                .filter_map(|(key, item)| {
                    let (_, schema) = properties.iter().find(|(name, _)| name == key)?;
                    Some((key.clone(), prune(schema, item)))
                })
                .collect(),
        ),
        (Schema::Map(values), Value::Object(fields)) => Value::Object(
            fields
                .iter()
                .map(|(key, item)| (key.clone(), prune(values, item)))
                .collect(),
        ),
        (Schema::Array(items), Value::Array(values)) => {
            Value::Array(values.iter().map(|item| prune(items, item)).collect())
        }
        _ => value.clone(),
    }
}

/// A node as the object the API server holds: `name` becomes
/// `metadata.name`, beside `spec` and `status`.
pub fn object_of(node: &crate::CiliumNode) -> Value {
    serde_json::json!({
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNode",
        "metadata": {"name": node.name},
        "spec": node.spec,
        "status": node.status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_checker_finds_pruned_fields_and_wrong_types() {
        let doc = json!({
            "metadata": {"anything": [1]},
            "spec": {"ipam": {"pre-allocate": -1, "pool": {"10.0.0.1": {"resource": 7}}},
                     "unknown": true},
            "status": {"ipam": {"release-ips": {"10.0.0.2": "gone", "10.0.0.3": null}},
                       "azure": {"interfaces": [{"CIDR": "10.0.0.0/24", "gateway": "10.0.0.1"}]}}
        });
        let mut findings: Vec<(String, Problem)> = check(&ciliumnode(), &doc, Nulls::Refused)
            .into_iter()
            .map(|f| (f.path, f.problem))
            .collect();
        findings.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            findings,
            vec![
                (
                    "spec.ipam.pool[10.0.0.1].resource".into(),
                    Problem::WrongType {
                        want: "string",
                        got: "integer"
                    }
                ),
                (
                    "spec.ipam.pre-allocate".into(),
                    Problem::BelowMinimum {
                        minimum: 0,
                        value: "-1".into()
                    }
                ),
                ("spec.unknown".into(), Problem::Pruned),
                ("status.azure.interfaces[0].CIDR".into(), Problem::Pruned),
                (
                    "status.ipam.release-ips[10.0.0.2]".into(),
                    Problem::NotInEnum("gone".into())
                ),
                (
                    "status.ipam.release-ips[10.0.0.3]".into(),
                    Problem::WrongType {
                        want: "string",
                        got: "null"
                    }
                ),
            ]
        );
        let patch_findings = check(&ciliumnode(), &doc, Nulls::RemoveField);
        assert_eq!(patch_findings.len(), 5, "a null removes in a merge patch");
        let pruned = prune(&ciliumnode(), &doc);
        assert_eq!(
            pruned["status"]["azure"]["interfaces"][0],
            json!({"gateway": "10.0.0.1"})
        );
        assert!(pruned["spec"].get("unknown").is_none());
        assert_eq!(pruned["metadata"], doc["metadata"]);
    }
}
