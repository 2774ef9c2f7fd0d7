use serde_json::{json, Value};

use super::*;

fn cluster() -> ClusterInfo {
    ClusterInfo::new("c1", 7).unwrap()
}

fn service(annotations: Value, spec: Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"namespace": "shop", "name": "web", "annotations": annotations,
                     "labels": {"app": "web"}},
        "spec": spec,
    }))
    .unwrap()
}

fn cluster_ip() -> Value {
    json!({"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
           "selector": {"app": "web"},
           "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]})
}

fn slice(name: &str, body: Value) -> EndpointSlice {
    let mut object = json!({
        "metadata": {"namespace": "shop", "name": name,
                     "labels": {SERVICE_NAME_LABEL: "web"}},
        "addressType": "IPv4",
    });
    if let (Value::Object(object), Value::Object(body)) = (&mut object, body) {
        object.extend(body);
    }
    serde_json::from_value(object).unwrap()
}

#[test]
fn which_services_are_exported() {
    let cases = [
        ("no annotation", json!({}), cluster_ip(), false),
        ("global", json!({GLOBAL: "true"}), cluster_ip(), true),
        (
            "global in capitals",
            json!({GLOBAL: "TRUE"}),
            cluster_ip(),
            true,
        ),
        (
            "global false",
            json!({GLOBAL: "false"}),
            cluster_ip(),
            false,
        ),
        (
            "older global alias",
            json!({GLOBAL_ALIAS: "true"}),
            cluster_ip(),
            true,
        ),
        (
            "the current name wins over the alias",
            json!({GLOBAL: "false", GLOBAL_ALIAS: "true"}),
            cluster_ip(),
            false,
        ),
        (
            "global, not shared",
            json!({GLOBAL: "true", SHARED: "false"}),
            cluster_ip(),
            false,
        ),
        (
            "global, not shared by the alias",
            json!({GLOBAL: "true", SHARED_ALIAS: "false"}),
            cluster_ip(),
            false,
        ),
        (
            "global, shared said",
            json!({GLOBAL: "true", SHARED: "True"}),
            cluster_ip(),
            true,
        ),
        (
            "shared without global",
            json!({SHARED: "true"}),
            cluster_ip(),
            false,
        ),
        (
            "ExternalName",
            json!({GLOBAL: "true"}),
            json!({"type": "ExternalName", "externalName": "db.example.com"}),
            false,
        ),
    ];
    for (case, annotations, spec, exported) in cases {
        let value = cluster_service(&cluster(), &service(annotations, spec), []);
        assert_eq!(value.is_some(), exported, "{case}");
    }
}

#[test]
fn frontends_are_the_cluster_ips_with_the_service_ports() {
    let global = || json!({GLOBAL: "true"});
    let cases: [(&str, Value, &[&str]); 5] = [
        ("one cluster IP", cluster_ip(), &["10.96.0.10"]),
        (
            "dual stack, IPv6 in canonical form",
            json!({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00:0:0:0::a"],
                   "ports": [{"name": "http", "port": 80}]}),
            &["10.96.0.10", "fd00::a"],
        ),
        (
            "clusterIP only (an old object)",
            json!({"clusterIP": "10.96.0.11", "ports": [{"name": "http", "port": 80}]}),
            &["10.96.0.11"],
        ),
        (
            "headless",
            json!({"clusterIP": "None", "clusterIPs": ["None"],
                   "ports": [{"name": "http", "port": 80}]}),
            &[],
        ),
        (
            "load balancer: its ingress IPs are not frontends",
            json!({"type": "LoadBalancer", "clusterIP": "10.96.0.12",
                   "externalIPs": ["192.0.2.9"],
                   "ports": [{"name": "http", "port": 80, "nodePort": 30080}]}),
            &["10.96.0.12"],
        ),
    ];
    for (case, spec, expected) in cases {
        let value = cluster_service(&cluster(), &service(global(), spec), []).unwrap();
        let ips: Vec<&str> = value.frontends.keys().map(String::as_str).collect();
        assert_eq!(ips, expected, "{case}");
        for ports in value.frontends.values() {
            assert_eq!(
                ports.get("http"),
                Some(&L4Addr {
                    protocol: "TCP".into(),
                    port: 80
                }),
                "{case}: a port with no protocol is TCP"
            );
        }
    }
    let mut labelled = service(global(), cluster_ip());
    labelled
        .metadata
        .labels
        .get_or_insert_default()
        .insert(HEADLESS_LABEL.into(), String::new());
    let value = cluster_service(&cluster(), &labelled, []).unwrap();
    assert!(value.frontends.is_empty(), "the headless label");
}

#[test]
fn several_ports_and_an_unnamed_one() {
    let spec = json!({"clusterIP": "10.96.0.10", "ports": [
        {"name": "dns", "port": 53, "protocol": "UDP"},
        {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
        {"name": "sctp", "port": 9899, "protocol": "SCTP"},
    ]});
    let value = cluster_service(&cluster(), &service(json!({GLOBAL: "true"}), spec), []).unwrap();
    let ports = &value.frontends["10.96.0.10"];
    assert_eq!(ports.len(), 3);
    assert_eq!(
        (ports["dns"].protocol.as_str(), ports["dns"].port),
        ("UDP", 53)
    );
    assert_eq!(ports["dns-tcp"].protocol, "TCP");
    assert_eq!(ports["sctp"].protocol, "SCTP");

    let single = json!({"clusterIP": "10.96.0.10", "ports": [{"port": 8080}]});
    let value = cluster_service(&cluster(), &service(json!({GLOBAL: "true"}), single), []).unwrap();
    assert_eq!(value.frontends["10.96.0.10"][""].port, 8080);
}

#[test]
fn backends_are_the_ready_addresses_with_the_slice_ports() {
    let ports = json!([{"name": "http", "port": 8080, "protocol": "TCP"},
                       {"name": "metrics", "port": 9090},
                       {"name": "all"}]);
    let slices = [
        slice(
            "web-a",
            json!({"ports": ports, "endpoints": [
                {"addresses": ["10.0.1.5"], "conditions": {"ready": true},
                 "hostname": "web-0", "zone": "eu-1a",
                 "hints": {"forZones": [{"name": "eu-1a"}, {"name": "eu-1b"}]}},
                {"addresses": ["10.0.1.6"], "zone": "eu-1b"},
                {"addresses": ["10.0.1.7"], "conditions": {"ready": false, "serving": false}},
                {"addresses": ["10.0.1.8"],
                 "conditions": {"ready": false, "serving": true, "terminating": true}},
            ]}),
        ),
        slice(
            "web-b",
            json!({"addressType": "IPv6",
                   "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                             {"name": "quic", "port": 8443, "protocol": "UDP"}],
                   "endpoints": [{"addresses": ["fd00:0::1:5"], "hostname": "web-1"}]}),
        ),
        slice(
            "web-c",
            json!({"ports": [{"name": "admin", "port": 7070}],
                   "endpoints": [{"addresses": ["10.0.1.5"], "hostname": "other"}]}),
        ),
        slice(
            "web-fqdn",
            json!({"addressType": "FQDN", "ports": [{"name": "http", "port": 80}],
                   "endpoints": [{"addresses": ["db.example.com"]}]}),
        ),
    ];
    let value = cluster_service(
        &cluster(),
        &service(json!({GLOBAL: "true"}), cluster_ip()),
        &slices,
    )
    .unwrap();
    let ips: Vec<&str> = value.backends.keys().map(String::as_str).collect();
    assert_eq!(
        ips,
        ["10.0.1.5", "10.0.1.6", "fd00::1:5"],
        "not ready, terminating and FQDN endpoints are left out"
    );
    let first = &value.backends["10.0.1.5"];
    let names: Vec<&str> = first.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["admin", "http", "metrics"],
        "ports of both slices; a port with no number is not exported"
    );
    assert_eq!(first["metrics"].protocol, "TCP");
    assert_eq!(value.backends["fd00::1:5"]["quic"].protocol, "UDP");
    assert_eq!(
        value.hostnames["10.0.1.5"], "web-0",
        "the first slice's wins"
    );
    assert_eq!(value.hostnames["fd00::1:5"], "web-1");
    assert!(!value.hostnames.contains_key("10.0.1.6"));
    assert_eq!(
        value.zones["10.0.1.5"],
        BackendZone {
            zone: "eu-1a".into(),
            for_zones: vec![
                ForZone {
                    name: "eu-1a".into()
                },
                ForZone {
                    name: "eu-1b".into()
                }
            ],
        }
    );
    assert_eq!(value.zones["10.0.1.6"].for_zones, []);
    assert!(!value.zones.contains_key("fd00::1:5"));
}

#[test]
fn the_rest_of_the_value() {
    let value = cluster_service(
        &cluster(),
        &service(json!({GLOBAL: "true"}), cluster_ip()),
        [],
    )
    .unwrap();
    assert_eq!(value.cluster, "c1");
    assert_eq!(value.cluster_id, 7);
    assert_eq!(
        (value.namespace.as_str(), value.name.as_str()),
        ("shop", "web")
    );
    assert_eq!(value.key(), "cilium/state/services/v1/c1/shop/web");
    assert_eq!(value.labels["app"], "web");
    assert_eq!(value.selector["app"], "web");
    assert!(value.include_external && value.shared);
    assert!(value.backends.is_empty(), "no slices yet");
}
