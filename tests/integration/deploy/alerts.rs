//! The chart's alerting rules (`files/alerts.yaml`): the PrometheusRule
//! embeds exactly the file's groups with the labels asked for, and is off
//! by default; every alert has a severity, a summary, a description and a
//! runbook naming a section of docs/operations.md that exists; every metric
//! an expression uses is one the docs list; and every alert is fired by a
//! case of tests/promtool/alerts_test.yaml (which `cargo xtask test` runs
//! with `promtool test rules`).

use std::collections::BTreeSet;
use std::path::Path;

use serde_yaml::Value;

use super::metric_names::{documented, undocumented};
use super::{chart, find, get, helm_template, helm_template_with};

fn read_yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn alerts_file() -> Value {
    read_yaml(&chart().join("files/alerts.yaml"))
}

/// Every alerting rule of the file.
fn alerts(file: &Value) -> Vec<&Value> {
    get(file, "groups")
        .as_sequence()
        .expect("a list of groups")
        .iter()
        .flat_map(|group| {
            get(group, "rules")
                .as_sequence()
                .expect("each group has rules")
        })
        .filter(|rule| !get(rule, "alert").is_null())
        .collect()
}

fn text<'a>(value: &'a Value, path: &str) -> &'a str {
    get(value, path)
        .as_str()
        .unwrap_or_else(|| panic!("no {path} in {value:?}"))
}

fn docs_page(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The anchors of a docs page's headings, as GitHub makes them.
fn anchors(page: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut anchors = BTreeSet::new();
    for line in page.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        let Some(title) = line.strip_prefix('#').filter(|_| !in_code) else {
            continue;
        };
        let slug: String = title
            .trim_start_matches('#')
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        anchors.insert(slug);
    }
    anchors
}

/// The Markdown links of `page` with an anchor: (the page linked, empty
/// for the page itself; the anchor).
fn anchored_links(page: &str) -> Vec<(String, String)> {
    page.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')'))
        .filter_map(|(target, _)| target.split_once('#'))
        .filter(|(file, _)| !file.contains("://"))
        .map(|(file, anchor)| (file.to_string(), anchor.to_string()))
        .collect()
}

#[test]
fn the_prometheus_rule_embeds_exactly_the_file_s_groups() {
    assert!(
        helm_template(&[])
            .iter()
            .all(|o| get(o, "kind").as_str() != Some("PrometheusRule")),
        "off by default"
    );
    let objects = helm_template_with(
        &[],
        &[
            "--set",
            "prometheusRule.enabled=true,prometheusRule.labels.release=kube-prometheus-stack",
        ],
    );
    let rule = find(&objects, "PrometheusRule", "ipam-operator");
    assert_eq!(text(rule, "apiVersion"), "monitoring.coreos.com/v1");
    assert_eq!(text(rule, "metadata.namespace"), "kube-system");
    let labels = get(rule, "metadata.labels");
    assert_eq!(
        text(labels, "release"),
        "kube-prometheus-stack",
        "the labels asked for"
    );
    assert_eq!(
        labels.get("app.kubernetes.io/name").and_then(Value::as_str),
        Some("ipam-operator")
    );
    let spec = get(rule, "spec").as_mapping().expect("a spec");
    assert_eq!(spec.len(), 1, "groups and nothing else: {spec:?}");
    let file = alerts_file();
    assert_eq!(get(rule, "spec.groups"), get(&file, "groups"));
    assert!(alerts(&file).len() >= 20, "the rules are all there");
}

#[test]
fn every_alert_says_how_bad_what_and_where_to_read_on() {
    let anchors = anchors(&docs_page("operations.md"));
    let file = alerts_file();
    let mut names = BTreeSet::new();
    for alert in alerts(&file) {
        let name = text(alert, "alert");
        assert!(names.insert(name), "{name} twice");
        assert!(name.starts_with("IpamOperator") || name.starts_with("IpamAgent"));
        assert!(
            ["critical", "warning", "info"].contains(&text(alert, "labels.severity")),
            "{name}: severity"
        );
        for annotation in ["summary", "description"] {
            assert!(
                !text(alert, &format!("annotations.{annotation}")).is_empty(),
                "{name}: {annotation}"
            );
        }
        let runbook = text(alert, "annotations.runbook");
        let anchor = runbook
            .strip_prefix("docs/operations.md#")
            .unwrap_or_else(|| panic!("{name}: runbook {runbook} is not docs/operations.md#..."));
        assert!(
            anchors.contains(anchor),
            "{name}: no section #{anchor} in docs/operations.md (there are {anchors:?})"
        );
        assert!(
            get(alert, "annotations.runbook_url").is_null(),
            "{name}: runbook, not a runbook_url"
        );
    }
}

#[test]
fn alerts_use_only_metrics_the_docs_list() {
    let documented = documented();
    let file = alerts_file();
    for alert in alerts(&file) {
        let name = text(alert, "alert");
        let expr = text(alert, "expr");
        assert!(
            !super::metric_names::used(expr).is_empty(),
            "{name} uses none of the project's metrics: {expr}"
        );
        let missing = undocumented(expr, &documented);
        assert!(
            missing.is_empty(),
            "{name} uses {missing:?}, which neither docs/metrics.md nor docs/agent.md lists"
        );
    }
}

#[test]
fn every_alert_is_fired_by_a_promtool_test_case() {
    let tests_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("promtool/alerts_test.yaml");
    let unit_tests = read_yaml(&tests_path);
    let rule_files: Vec<&str> = get(&unit_tests, "rule_files")
        .as_sequence()
        .expect("rule_files")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let named = tests_path
        .parent()
        .expect("a folder")
        .join(rule_files.first().expect("one rule file"));
    assert_eq!(
        named.canonicalize().expect("the rule file exists"),
        chart()
            .join("files/alerts.yaml")
            .canonicalize()
            .expect("the chart's alerts"),
        "the unit tests test the chart's file"
    );
    let mut fired = BTreeSet::new();
    for case in get(&unit_tests, "tests").as_sequence().expect("tests") {
        for check in get(case, "alert_rule_test")
            .as_sequence()
            .into_iter()
            .flatten()
        {
            let expected = get(check, "exp_alerts").as_sequence();
            if expected.is_some_and(|e| !e.is_empty()) {
                fired.insert(text(check, "alertname").to_string());
            }
        }
    }
    let file = alerts_file();
    for alert in alerts(&file) {
        let name = text(alert, "alert");
        assert!(
            fired.contains(name),
            "no case of {} fires {name}",
            tests_path.display()
        );
    }
}

#[test]
fn the_operations_and_upgrade_pages_link_to_sections_that_exist() {
    let pages = ["operations.md", "upgrade.md"];
    let mut checked = 0;
    for page in pages {
        let text = docs_page(page);
        for (file, anchor) in anchored_links(&text) {
            let target = if file.is_empty() { page } else { file.as_str() };
            assert!(
                pages.contains(&target),
                "{page} links to {target}#{anchor}, outside the pages checked here"
            );
            assert!(
                anchors(&docs_page(target)).contains(&anchor),
                "{page}: the link to {target}#{anchor} lands on no section"
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "{checked} links checked");
    assert_eq!(
        anchored_links("see [x](#a-b), [y](upgrade.md#rollback) and [z](https://e.x/#q)"),
        [
            (String::new(), "a-b".to_string()),
            ("upgrade.md".to_string(), "rollback".to_string())
        ]
    );
}
