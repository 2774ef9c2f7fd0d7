//! The chart's Grafana dashboard (`files/dashboard.json`): it parses, asks
//! for its data source through the `${datasource}` variable in every panel
//! and query, queries only metrics the docs list, and the ConfigMap the
//! chart renders (off by default, with the sidecar's label as configured)
//! carries the file verbatim. `cargo xtask test` also has promtool parse
//! every query.

use std::collections::BTreeSet;

use serde_json::Value as Json;

use super::metric_names::{documented, undocumented, used};
use super::{chart, find, get, helm_template, helm_template_with};

fn dashboard_text() -> String {
    let path = chart().join("files/dashboard.json");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn dashboard() -> Json {
    serde_json::from_str(&dashboard_text()).expect("files/dashboard.json is JSON")
}

/// Panels, those of collapsed rows included.
fn panels(dashboard: &Json) -> Vec<&Json> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push(panel);
        all.extend(panel["panels"].as_array().into_iter().flatten());
    }
    all
}

#[test]
fn the_dashboard_is_grafana_json_on_the_datasource_variable() {
    let dashboard = dashboard();
    assert!(
        dashboard["schemaVersion"]
            .as_u64()
            .is_some_and(|v| (36..=41).contains(&v)),
        "a current schema: {}",
        dashboard["schemaVersion"]
    );
    assert_eq!(dashboard["uid"], "ipam-operator");
    assert!(dashboard["title"].as_str().is_some_and(|t| !t.is_empty()));
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("variables");
    assert!(
        variables.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "a Prometheus data source variable: {variables:?}"
    );
    let mut ids = BTreeSet::new();
    let mut queries = 0;
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().expect("every panel has a title");
        assert!(
            ids.insert(panel["id"].as_u64().expect("a numeric id")),
            "{title}: id twice"
        );
        let grid = &panel["gridPos"];
        for key in ["h", "w", "x", "y"] {
            assert!(grid[key].is_u64(), "{title}: gridPos.{key}");
        }
        assert!(
            grid["x"].as_u64().unwrap_or(0) + grid["w"].as_u64().unwrap_or(0) <= 24,
            "{title}"
        );
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().expect("queries");
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            assert!(
                target["expr"].as_str().is_some_and(|e| !e.is_empty()),
                "{title}"
            );
            queries += 1;
        }
    }
    assert!(queries >= 30, "{queries} queries");
}

#[test]
fn the_dashboard_shows_only_metrics_the_docs_list_and_the_ones_asked_for() {
    let documented = documented();
    let dashboard = dashboard();
    let mut shown = BTreeSet::new();
    for panel in panels(&dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("an expression");
            let missing = undocumented(expr, &documented);
            assert!(
                missing.is_empty(),
                "{}: {missing:?} is listed in neither docs/metrics.md nor docs/agent.md",
                panel["title"]
            );
            shown.extend(used(expr));
        }
    }
    // What operators on day two look at, operator and agent.
    for wanted in [
        "cilium_operator_ipam_ips",
        "cilium_operator_ipam_nodes",
        "cilium_operator_ipam_available_ips_per_subnet",
        "cilium_operator_ipam_api_calls_total",
        "cilium_operator_ipam_api_duration_seconds_bucket",
        "cilium_operator_ipam_api_rate_limit_duration_seconds_bucket",
        "cilium_operator_ipam_allocation_duration_seconds_bucket",
        "cilium_operator_ipam_release_duration_seconds_bucket",
        "cilium_operator_ipam_api_answers_refused_total",
        "cilium_operator_leader",
        "cilium_operator_startup_step",
        "cilium_operator_duty_failures_total",
        "cilium_operator_kvstore_heartbeat_timestamp_seconds",
        "ipam_agent_cni_requests_total",
        "ipam_agent_cni_request_duration_seconds_bucket",
        "ipam_agent_allocations_total",
        "ipam_agent_releases_total",
        "ipam_agent_datapath_drops_total",
    ] {
        assert!(shown.contains(wanted), "no panel shows {wanted}");
    }
}

#[test]
fn the_dashboard_config_map_carries_the_file_verbatim_with_the_sidecar_s_label() {
    assert!(
        helm_template(&[])
            .iter()
            .all(|o| get(o, "metadata.name").as_str() != Some("ipam-operator-dashboard")),
        "off by default"
    );
    let objects = helm_template_with(&[], &["--set", "dashboard.enabled=true"]);
    let config_map = find(&objects, "ConfigMap", "ipam-operator-dashboard");
    assert_eq!(
        get(config_map, "metadata.labels.grafana_dashboard").as_str(),
        Some("1"),
        "Grafana's sidecar default label"
    );
    assert_eq!(
        get(config_map, "metadata.namespace").as_str(),
        Some("kube-system")
    );
    let carried = get(config_map, "data")
        .get("ipam-operator.json")
        .and_then(|v| v.as_str())
        .expect("data.ipam-operator.json");
    assert_eq!(carried, dashboard_text(), "verbatim");

    let objects = helm_template_with(
        &[],
        &[
            "--set",
            "dashboard.enabled=true,dashboard.label=dashboards.example.com/grafana,\
             dashboard.labelValue=ops,dashboard.namespace=monitoring,\
             dashboard.annotations.grafana_folder=Networking",
        ],
    );
    let config_map = find(&objects, "ConfigMap", "ipam-operator-dashboard");
    let labels = get(config_map, "metadata.labels");
    assert_eq!(
        labels
            .get("dashboards.example.com/grafana")
            .and_then(|v| v.as_str()),
        Some("ops")
    );
    assert!(labels.get("grafana_dashboard").is_none());
    assert_eq!(
        get(config_map, "metadata.namespace").as_str(),
        Some("monitoring")
    );
    assert_eq!(
        get(config_map, "metadata.annotations.grafana_folder").as_str(),
        Some("Networking")
    );
}
