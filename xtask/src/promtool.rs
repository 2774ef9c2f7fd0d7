//! The chart's monitoring files through promtool (Debian's `prometheus`
//! package, installed by `setup::ensure_promtool`): the alerting rules
//! (`deploy/helm/ipam-operator/files/alerts.yaml`) checked and their unit
//! tests (`tests/promtool/alerts_test.yaml`) run, and every query of the
//! Grafana dashboard (`files/dashboard.json`) parsed as PromQL.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::run;

/// What Grafana puts in place of `$__rate_interval` (and `$__interval`)
/// for promtool, which knows no dashboard variables.
const RATE_INTERVAL: &str = "5m";

/// `promtool check rules` and `promtool test rules` on the alerts, and
/// `promtool check rules` on the dashboard's queries.
pub fn check(repo: &Path) -> Result<(), String> {
    let files = repo.join("deploy/helm/ipam-operator/files");
    run(Command::new("promtool")
        .args(["check", "rules"])
        .arg(files.join("alerts.yaml")))?;
    run(Command::new("promtool")
        .args(["test", "rules"])
        .arg(repo.join("tests/promtool/alerts_test.yaml")))?;
    let dashboard = files.join("dashboard.json");
    let text =
        std::fs::read_to_string(&dashboard).map_err(|e| format!("{}: {e}", dashboard.display()))?;
    let json: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not JSON: {e}", dashboard.display()))?;
    let rules = dashboard_rules(&json).map_err(|e| format!("{}: {e}", dashboard.display()))?;
    let path = std::env::temp_dir().join(format!(
        "ipam-dashboard-queries-{}.yaml",
        std::process::id()
    ));
    std::fs::write(&path, rules).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!(
        "xtask: the dashboard's queries as recording rules in {}",
        path.display()
    );
    let checked = run(Command::new("promtool").args(["check", "rules"]).arg(&path));
    let _ = std::fs::remove_file(&path);
    checked
}

/// Every panel query of a Grafana dashboard as a recording rule (named
/// after its panel id and refId) in a Prometheus rule file; Grafana's
/// interval variables read as [`RATE_INTERVAL`]. A dashboard without a
/// query is an error.
/// A panel and, for a row, its own panels (a collapsed row holds them).
fn with_row_panels(panel: &Value) -> impl Iterator<Item = &Value> {
    std::iter::once(panel).chain(panel["panels"].as_array().into_iter().flatten())
}

fn dashboard_rules(dashboard: &Value) -> Result<String, String> {
    let mut rules = String::from("groups:\n  - name: dashboard-queries\n    rules:\n");
    let mut count = 0;
    let panels = dashboard["panels"].as_array().ok_or("no `panels` list")?;
    for panel in panels.iter().flat_map(with_row_panels) {
        let id = &panel["id"];
        for target in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = target["expr"].as_str() else {
                continue;
            };
            let expr = expr
                .replace("$__rate_interval", RATE_INTERVAL)
                .replace("$__interval", RATE_INTERVAL);
            let name = format!(
                "dashboard_panel_{}_{}",
                id.as_u64().ok_or("a panel without a numeric id")?,
                target["refId"].as_str().unwrap_or("A")
            );
            // A JSON string is a YAML double-quoted scalar.
            let quoted = serde_json::to_string(&expr).map_err(|e| e.to_string())?;
            rules.push_str(&format!("      - record: {name}\n        expr: {quoted}\n"));
            count += 1;
        }
    }
    if count == 0 {
        return Err("no panel query".into());
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_panel_query_becomes_a_recording_rule_with_the_interval_filled_in() {
        let dashboard = serde_json::json!({"panels": [
            {"id": 1, "type": "row"},
            {"id": 2, "targets": [
                {"refId": "A", "expr": "sum(rate(x_total{a=\"b\"}[$__rate_interval]))"},
                {"refId": "B", "expr": "y"}
            ]}
        ]});
        assert_eq!(
            dashboard_rules(&dashboard).unwrap(),
            "groups:\n  - name: dashboard-queries\n    rules:\n\
             \x20     - record: dashboard_panel_2_A\n        expr: \"sum(rate(x_total{a=\\\"b\\\"}[5m]))\"\n\
             \x20     - record: dashboard_panel_2_B\n        expr: \"y\"\n"
        );
        let error = dashboard_rules(&serde_json::json!({"panels": [{"id": 1}]})).unwrap_err();
        assert_eq!(error, "no panel query");
        assert!(dashboard_rules(&serde_json::json!({})).is_err());
    }
}
