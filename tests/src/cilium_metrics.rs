//! Cilium's operator metrics in ENI and Azure mode, as its source declares
//! them (Cilium 1.16 to 1.18, `pkg/ipam/metrics/metrics.go`, namespace
//! `cilium_operator`, subsystem `ipam`; the cloud API families of
//! `pkg/api/metrics`, subsystems `ec2` and `azure`), written out by hand
//! from there and not from this project's code, and a check of a
//! `/metrics` page in the Prometheus text format 0.0.4 against them: each
//! family with its `# TYPE`, its samples, and its label names.

use std::collections::{BTreeMap, BTreeSet};

/// One family of Cilium's.
#[derive(Debug, Clone, Copy)]
pub struct CiliumFamily {
    pub name: &'static str,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// Label names (a histogram's `le` aside).
    pub labels: &'static [&'static str],
}

const fn family(
    name: &'static str,
    kind: &'static str,
    labels: &'static [&'static str],
) -> CiliumFamily {
    CiliumFamily { name, kind, labels }
}

/// Every `cilium_operator_ipam_*` family of Cilium's operator.
pub const CILIUM_OPERATOR_IPAM: &[CiliumFamily] = &[
    family(
        "cilium_operator_ipam_available_ips",
        "gauge",
        &["target_node"],
    ),
    family("cilium_operator_ipam_used_ips", "gauge", &["target_node"]),
    family("cilium_operator_ipam_needed_ips", "gauge", &["target_node"]),
    family("cilium_operator_ipam_ips", "gauge", &["type"]),
    family(
        "cilium_operator_ipam_ip_allocation_ops",
        "counter",
        &["subnet_id"],
    ),
    family(
        "cilium_operator_ipam_ip_release_ops",
        "counter",
        &["subnet_id"],
    ),
    family(
        "cilium_operator_ipam_interface_creation_ops",
        "counter",
        &["subnet_id"],
    ),
    family("cilium_operator_ipam_available_interfaces", "gauge", &[]),
    family("cilium_operator_ipam_interface_candidates", "gauge", &[]),
    family("cilium_operator_ipam_empty_interface_slots", "gauge", &[]),
    family(
        "cilium_operator_ipam_available_ips_per_subnet",
        "gauge",
        &["subnet_id", "availability_zone"],
    ),
    family("cilium_operator_ipam_nodes", "gauge", &["category"]),
    family("cilium_operator_ipam_resync_total", "counter", &[]),
    family(
        "cilium_operator_ipam_allocation_duration_seconds",
        "histogram",
        &["type", "status", "subnet_id"],
    ),
    family(
        "cilium_operator_ipam_release_duration_seconds",
        "histogram",
        &["type", "status", "subnet_id"],
    ),
    family(
        "cilium_operator_ipam_deficit_resolver_queued_total",
        "counter",
        &[],
    ),
    family("cilium_operator_ipam_deficit_resolver_folds", "gauge", &[]),
    family(
        "cilium_operator_ipam_deficit_resolver_duration_seconds",
        "histogram",
        &[],
    ),
    family(
        "cilium_operator_ipam_deficit_resolver_latency_seconds",
        "histogram",
        &[],
    ),
    family("cilium_operator_ipam_k8s_sync_queued_total", "counter", &[]),
    family("cilium_operator_ipam_k8s_sync_folds", "gauge", &[]),
    family(
        "cilium_operator_ipam_k8s_sync_duration_seconds",
        "histogram",
        &[],
    ),
    family(
        "cilium_operator_ipam_k8s_sync_latency_seconds",
        "histogram",
        &[],
    ),
    family("cilium_operator_ipam_resync_queued_total", "counter", &[]),
    family("cilium_operator_ipam_resync_folds", "gauge", &[]),
    family(
        "cilium_operator_ipam_resync_duration_seconds",
        "histogram",
        &[],
    ),
    family(
        "cilium_operator_ipam_resync_latency_seconds",
        "histogram",
        &[],
    ),
];

/// Cilium's EC2 API families (the operator in ENI mode on AWS).
pub const CILIUM_OPERATOR_EC2: &[CiliumFamily] = &[
    family(
        "cilium_operator_ec2_api_duration_seconds",
        "histogram",
        &["operation", "response_code"],
    ),
    family(
        "cilium_operator_ec2_api_rate_limit_duration_seconds",
        "histogram",
        &["operation"],
    ),
];

/// Cilium's Azure API families (the operator in Azure mode).
pub const CILIUM_OPERATOR_AZURE: &[CiliumFamily] = &[
    family(
        "cilium_operator_azure_api_duration_seconds",
        "histogram",
        &["operation", "response_code"],
    ),
    family(
        "cilium_operator_azure_api_rate_limit_duration_seconds",
        "histogram",
        &["operation"],
    ),
];

/// The family this project leaves out, having no true meaning for it
/// (docs/metrics.md): a CiliumNode write answers exactly the change it was
/// asked for, so its folding level would be a constant.
pub const NOT_EXPORTED: &[&str] = &["cilium_operator_ipam_k8s_sync_folds"];

/// A family as a page shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exposed {
    pub kind: String,
    pub labels: BTreeSet<String>,
    pub samples: usize,
}

/// The families of a 0.0.4 page: each `# TYPE` with the samples named
/// after it (a histogram's `_bucket`, `_sum`, `_count`).
pub fn exposed(page: &str) -> BTreeMap<String, Exposed> {
    let mut families: BTreeMap<String, Exposed> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            families.entry(name.to_string()).or_default().kind = kind.to_string();
            current = Some(name.to_string());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let sample = &line[..name_end];
        let Some(family) = current.as_ref() else {
            continue;
        };
        let kind = families
            .get(family)
            .map(|f| f.kind.clone())
            .unwrap_or_default();
        let belongs = sample == family
            || (kind == "histogram"
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| sample.strip_suffix(suffix) == Some(family)));
        if !belongs {
            continue;
        }
        let entry = families.entry(family.clone()).or_default();
        entry.samples += 1;
        if let Some(labels) = line[name_end..].strip_prefix('{') {
            for pair in label_names(labels) {
                if pair != "le" {
                    entry.labels.insert(pair);
                }
            }
        }
    }
    families
}

/// The label names of a label set's text (after its `{`).
fn label_names(labels: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = labels;
    while let Some((name, after)) = rest.split_once("=\"") {
        names.push(name.trim_start_matches(',').to_string());
        // Past the value: to the first unescaped quote.
        let mut escaped = false;
        let mut end = after.len();
        for (i, c) in after.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &after[end..];
        if rest.starts_with('}') {
            break;
        }
    }
    names
}

/// Where `page` differs from `families`: each family missing (unless in
/// `left_out`), of another type, without samples, or with other label
/// names; and each family of `left_out` that is there after all.
pub fn differences(page: &str, families: &[CiliumFamily], left_out: &[&str]) -> Vec<String> {
    let exposed = exposed(page);
    let mut differences = Vec::new();
    for family in families {
        let Some(found) = exposed.get(family.name) else {
            if !left_out.contains(&family.name) {
                differences.push(format!("{}: no # TYPE line", family.name));
            }
            continue;
        };
        if left_out.contains(&family.name) {
            differences.push(format!("{}: exported, though left out", family.name));
        }
        if found.kind != family.kind {
            differences.push(format!(
                "{}: a {} where Cilium has a {}",
                family.name, found.kind, family.kind
            ));
        }
        if found.samples == 0 {
            differences.push(format!("{}: no sample", family.name));
        }
        let want: BTreeSet<String> = family.labels.iter().map(|l| l.to_string()).collect();
        if found.labels != want {
            differences.push(format!(
                "{}: labels {:?} where Cilium has {:?}",
                family.name, found.labels, want
            ));
        }
    }
    differences
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_read_family_by_family_and_its_differences_named() {
        let page = "\
# HELP cilium_operator_ipam_ips Number of IPs allocated.
# TYPE cilium_operator_ipam_ips gauge
cilium_operator_ipam_ips{type=\"used\"} 3
# TYPE cilium_operator_ipam_allocation_duration_seconds histogram
cilium_operator_ipam_allocation_duration_seconds_sum{type=\"allocateIP\",status=\"a,b=\\\"c\\\"\",subnet_id=\"s\"} 1
cilium_operator_ipam_allocation_duration_seconds_bucket{le=\"+Inf\",type=\"allocateIP\",status=\"x\",subnet_id=\"s\"} 1
# TYPE cilium_operator_ipam_ip_allocation_ops counter
cilium_operator_ipam_ip_allocation_ops_total{subnet_id=\"s\"} 1
";
        let families = [
            family("cilium_operator_ipam_ips", "gauge", &["type"]),
            family(
                "cilium_operator_ipam_allocation_duration_seconds",
                "histogram",
                &["type", "status", "subnet_id"],
            ),
            family(
                "cilium_operator_ipam_ip_allocation_ops",
                "counter",
                &["subnet_id"],
            ),
            family("cilium_operator_ipam_nodes", "gauge", &["category"]),
            family("cilium_operator_ipam_k8s_sync_folds", "gauge", &[]),
        ];
        assert_eq!(
            differences(page, &families, &["cilium_operator_ipam_k8s_sync_folds"]),
            [
                "cilium_operator_ipam_ip_allocation_ops: no sample",
                "cilium_operator_ipam_ip_allocation_ops: labels {} where Cilium has {\"subnet_id\"}",
                "cilium_operator_ipam_nodes: no # TYPE line",
            ]
        );
    }
}
