//! The Prometheus text format 0.0.4, made from the OpenMetrics text that
//! prometheus-client writes. `/metrics` serves this format, as a Go
//! process's promhttp handler does with its default options (Cilium's
//! operator among them): a Prometheus scrape then stores every series under
//! the name written on the page. OpenMetrics names a counter's samples
//! `<family>_total` whatever the family is called; a Go client names them
//! as the counter was registered, and some of Cilium's counters have no
//! `_total` (`cilium_operator_ipam_ip_allocation_ops`). The families listed
//! as bare keep their Go names here; every other counter keeps `_total`.
//!
//! What changes: no `# EOF` and no `# UNIT`; a counter's `# HELP` and
//! `# TYPE` name its samples (`x_total`, or the bare `x`); `_created`
//! samples and exemplars go (0.0.4 has neither); `info` becomes a gauge
//! named `x_info`, `unknown` becomes `untyped`. Samples keep their labels
//! and values as written.

/// The content type of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The family a `# TYPE` line opened, and how its samples are renamed.
struct Family<'a> {
    name: &'a str,
    kind: &'a str,
    /// Counters listed as bare: `name_total` samples are written `name`.
    bare: bool,
}

/// `openmetrics` (prometheus-client's text encoding) in the 0.0.4 format;
/// counter families named in `bare_counters` (full names) are served
/// without `_total`.
pub fn from_openmetrics(openmetrics: &str, bare_counters: &[&str]) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<(&str, &str)> = None;
    let mut family: Option<Family<'_>> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let opened = Family {
                name,
                kind,
                bare: kind == "counter" && bare_counters.contains(&name),
            };
            let (served, served_kind) = served_name(&opened);
            if let Some((help_name, text)) = help.take() {
                if help_name == name {
                    out.push_str(&format!("# HELP {served} {text}\n"));
                }
            }
            out.push_str(&format!("# TYPE {served} {served_kind}\n"));
            family = Some(opened);
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            // `# EOF`, `# UNIT` and anything else the format has no place for.
            continue;
        }
        if let Some(sample) = sample(line, family.as_ref()) {
            out.push_str(&sample);
            out.push('\n');
        }
    }
    out
}

/// What the family is called and typed in 0.0.4.
fn served_name(family: &Family<'_>) -> (String, &'static str) {
    match family.kind {
        "counter" if family.bare => (family.name.to_string(), "counter"),
        "counter" => (format!("{}_total", family.name), "counter"),
        "gauge" => (family.name.to_string(), "gauge"),
        "histogram" | "gaugehistogram" => (family.name.to_string(), "histogram"),
        "summary" => (family.name.to_string(), "summary"),
        "info" => (format!("{}_info", family.name), "gauge"),
        _ => (family.name.to_string(), "untyped"),
    }
}

/// One sample line as 0.0.4 writes it, or None for a sample it has no
/// place for (`_created`).
fn sample(line: &str, family: Option<&Family<'_>>) -> Option<String> {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let (name, rest) = line.split_at(name_end);
    if name.ends_with("_created") {
        return None;
    }
    let rest = without_exemplar(rest);
    let name = match family {
        Some(f) if f.bare && name == format!("{}_total", f.name) => f.name,
        _ => name,
    };
    Some(format!("{name}{rest}"))
}

/// The labels and value of a sample, without an exemplar (` # {...} v`).
fn without_exemplar(rest: &str) -> &str {
    // The exemplar follows the value, after the label set: look for it
    // only past the labels, whose values may hold anything.
    let value_start = labels_end(rest);
    match rest[value_start..].find(" # ") {
        Some(at) => &rest[..value_start + at],
        None => rest,
    }
}

/// Where the label set that opens `rest` ends (0 when there is none).
fn labels_end(rest: &str) -> usize {
    if !rest.starts_with('{') {
        return 0;
    }
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in rest.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return i + 1,
            _ => {}
        }
    }
    rest.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_keep_total_unless_bare_and_the_openmetrics_only_lines_go() {
        let openmetrics = "\
# HELP ipam_ip_allocation_ops Number of IP allocation operations.
# TYPE ipam_ip_allocation_ops counter
ipam_ip_allocation_ops_total{subnet_id=\"s-1\"} 3
ipam_ip_allocation_ops_created{subnet_id=\"s-1\"} 1700000000.0
# HELP ipam_resync_total_runs Runs.
# TYPE ipam_resync counter
ipam_resync_total 2
# HELP wait_seconds Waits.
# TYPE wait_seconds histogram
# UNIT wait_seconds seconds
wait_seconds_sum{op=\"a # {b}\"} 1.5
wait_seconds_count{op=\"a # {b}\"} 2
wait_seconds_bucket{le=\"+Inf\",op=\"a # {b}\"} 2
# HELP build Build.
# TYPE build info
build_info{version=\"1\"} 1
# HELP up Up.
# TYPE up gauge
up 1
things_total 4 # {trace=\"x\"} 1.0
# EOF
";
        let text = from_openmetrics(openmetrics, &["ipam_ip_allocation_ops"]);
        assert_eq!(
            text,
            "\
# HELP ipam_ip_allocation_ops Number of IP allocation operations.
# TYPE ipam_ip_allocation_ops counter
ipam_ip_allocation_ops{subnet_id=\"s-1\"} 3
# TYPE ipam_resync_total counter
ipam_resync_total 2
# HELP wait_seconds Waits.
# TYPE wait_seconds histogram
wait_seconds_sum{op=\"a # {b}\"} 1.5
wait_seconds_count{op=\"a # {b}\"} 2
wait_seconds_bucket{le=\"+Inf\",op=\"a # {b}\"} 2
# HELP build_info Build.
# TYPE build_info gauge
build_info{version=\"1\"} 1
# HELP up Up.
# TYPE up gauge
up 1
things_total 4
"
        );
    }

    #[test]
    fn a_bare_name_of_another_type_changes_nothing() {
        let openmetrics = "# HELP x X.\n# TYPE x gauge\nx_total 1\n# EOF\n";
        assert_eq!(
            from_openmetrics(openmetrics, &["x"]),
            "# HELP x X.\n# TYPE x gauge\nx_total 1\n"
        );
    }
}
