//! The metric names a PromQL expression of the chart's alerts or dashboard
//! uses, held to the metrics the docs list (the first column of the tables
//! of docs/metrics.md and docs/agent.md): a rule or a panel on a metric
//! that does not exist would never fire or show anything.

use std::collections::BTreeSet;
use std::path::Path;

/// The prefixes of this project's own metrics.
const PREFIXES: &[&str] = &["cilium_operator_", "ipam_agent_"];

/// The series a histogram adds to its documented name.
const HISTOGRAM_SUFFIXES: &[&str] = &["_bucket", "_sum", "_count"];

/// Every metric name in the first cell of a table row of the docs.
pub fn documented() -> BTreeSet<String> {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let mut names = BTreeSet::new();
    for page in ["metrics.md", "agent.md"] {
        let path = docs.join(page);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        names.extend(in_tables(&text));
    }
    names
}

/// The names in backticks in the first cell of each table row of `text`.
fn in_tables(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix('|'))
        .filter_map(|row| row.split('|').next())
        .flat_map(|cell| cell.split('`').skip(1).step_by(2))
        .filter(|name| is_ours(name) && name.bytes().all(is_name_byte))
        .map(str::to_string)
        .collect()
}

fn is_ours(name: &str) -> bool {
    PREFIXES.iter().any(|p| name.starts_with(p))
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':'
}

/// The names of this project's metrics in a PromQL expression: identifiers
/// with one of its prefixes, outside string literals (label values).
pub fn used(expr: &str) -> BTreeSet<String> {
    let bytes = expr.as_bytes();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            quote @ (b'"' | b'\'' | b'`') => {
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b if b.is_ascii_alphabetic() || b == b'_' => {
                let start = i;
                while i < bytes.len() && is_name_byte(bytes[i]) {
                    i += 1;
                }
                let name = &expr[start..i];
                if is_ours(name) {
                    names.insert(name.to_string());
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// The names `expr` uses that the docs do not list (a histogram's series
/// count as its documented name).
pub fn undocumented(expr: &str, documented: &BTreeSet<String>) -> Vec<String> {
    used(expr)
        .into_iter()
        .filter(|name| {
            let base = HISTOGRAM_SUFFIXES
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix));
            !documented.contains(name) && !base.is_some_and(|b| documented.contains(b))
        })
        .collect()
}

#[test]
fn the_checker_finds_names_outside_label_values_and_knows_histograms() {
    let names = used(
        r#"sum by (le) (rate(cilium_operator_ipam_api_duration_seconds_bucket{job="ipam_agent_fake"}[5m]))
           / on () ipam_agent_allocated_addresses and up"#,
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        [
            "cilium_operator_ipam_api_duration_seconds_bucket",
            "ipam_agent_allocated_addresses"
        ]
    );
    let docs = in_tables(
        "| metric | what |\n| --- | --- |\n\
         | `cilium_operator_ipam_api_duration_seconds` | histogram |\n\
         | `ipam_agent_allocated_addresses`, `ipam_agent_pool_addresses` | now |\n\
         | `--flag` | `cilium_operator_not_in_the_first_cell` |\n",
    );
    assert_eq!(docs.len(), 3, "{docs:?}");
    assert!(undocumented(
        "histogram_quantile(0.9, rate(cilium_operator_ipam_api_duration_seconds_bucket[5m]))",
        &docs
    )
    .is_empty());
    assert_eq!(
        undocumented(
            "cilium_operator_not_in_the_first_cell + ipam_agent_pool_addresses",
            &docs
        ),
        ["cilium_operator_not_in_the_first_cell"]
    );
    // The docs themselves list the metrics the alerts need.
    let listed = documented();
    for name in [
        "cilium_operator_ipam_api_calls_total",
        "cilium_operator_leader",
        "cilium_operator_leader_transitions_total",
        "cilium_operator_kvstore_heartbeat_timestamp_seconds",
        "ipam_agent_cni_requests_total",
        "ipam_agent_startup_step",
    ] {
        assert!(listed.contains(name), "{name} in {listed:?}");
    }
}
