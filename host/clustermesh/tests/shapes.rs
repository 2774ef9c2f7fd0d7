//! Values in Cilium's shapes (as Go's encoding/json writes them), decoded
//! field by field; and what this crate writes, read back the way a Go peer
//! would see it.

use std::net::IpAddr;

use ipam_clustermesh::{
    AgentNode, BackendZone, Cidr, ClusterService, ForZone, L4Addr, NodeValueError,
};

const ECHO: &str = include_str!("fixtures/clusterservice_echo.json");
const OLD_WRITER: &str = include_str!("fixtures/clusterservice_old_writer.json");
const NODE: &str = include_str!("fixtures/node_kind_worker.json");

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn tcp(port: u16) -> L4Addr {
    L4Addr {
        protocol: "TCP".into(),
        port,
    }
}

#[test]
fn a_peer_s_cluster_service_decodes_field_by_field() {
    let service: ClusterService = serde_json::from_str(ECHO).unwrap();
    assert_eq!(service.cluster, "cluster2");
    assert_eq!(service.namespace, "test");
    assert_eq!(service.name, "echo");
    assert_eq!(service.key(), "cilium/state/services/v1/cluster2/test/echo");
    assert_eq!(service.frontends.len(), 2);
    assert_eq!(service.frontends["10.96.207.99"]["http"], tcp(80));
    assert_eq!(service.frontends["fd00:10:96::c0fe"]["http"], tcp(80));
    assert_eq!(service.backends["10.244.2.17"]["http"], tcp(8080));
    assert_eq!(service.backends["10.244.2.17"]["metrics"], tcp(9090));
    assert_eq!(service.backends["fd00:10:244:2::b1"].len(), 1);
    assert_eq!(service.hostnames["10.244.2.17"], "echo-0");
    assert_eq!(service.hostnames.len(), 1);
    assert_eq!(
        service.zones["10.244.2.17"],
        BackendZone {
            zone: "zone-a".into(),
            for_zones: vec![
                ForZone {
                    name: "zone-a".into()
                },
                ForZone {
                    name: "zone-b".into()
                }
            ],
        }
    );
    assert_eq!(service.zones["fd00:10:244:2::b1"].for_zones, []);
    assert_eq!(service.labels["app"], "echo");
    assert_eq!(service.selector["name"], "echo");
    assert!(service.include_external);
    assert!(service.shared);
    assert_eq!(service.cluster_id, 2);
}

#[test]
fn what_we_write_is_what_go_writes_byte_for_byte() {
    // Go's encoding/json writes struct fields in declaration order and map
    // keys sorted, with no spaces: so does ClusterService::to_json.
    let service: ClusterService = serde_json::from_str(ECHO).unwrap();
    assert_eq!(
        String::from_utf8(service.to_json()).unwrap(),
        ECHO.trim_end()
    );
}

#[test]
fn nulls_and_absent_fields_of_other_writers_are_empty() {
    let service: ClusterService = serde_json::from_str(OLD_WRITER).unwrap();
    assert!(service.labels.is_empty() && service.selector.is_empty());
    assert!(service.hostnames.is_empty() && service.zones.is_empty());
    assert_eq!(
        service.frontends["10.96.0.20"][""],
        L4Addr {
            protocol: "UDP".into(),
            port: 53
        }
    );
    let written = String::from_utf8(service.to_json()).unwrap();
    assert!(
        !written.contains("hostnames") && !written.contains("zones"),
        "omitempty, as Go: {written}"
    );
    assert!(written.contains(r#""labels":{}"#), "{written}");
}

#[test]
fn an_agent_s_node_decodes_field_by_field() {
    let key = "cilium/state/nodes/v1/cluster1/kind-worker";
    let node = AgentNode::parse(key, NODE.as_bytes()).unwrap();
    assert_eq!(node.name, "kind-worker");
    assert_eq!(node.cluster, "cluster1");
    let addresses: Vec<(&str, IpAddr)> = node
        .addresses
        .iter()
        .map(|a| (a.kind.as_str(), a.ip))
        .collect();
    assert_eq!(
        addresses,
        [
            ("InternalIP", ip("172.18.0.3")),
            ("InternalIP", ip("fc00:c111::3")),
            ("CiliumInternalIP", ip("10.244.1.23")),
        ]
    );
    assert_eq!(
        node.ipv4_alloc_cidr,
        Some(Cidr {
            addr: ip("10.244.1.0"),
            prefix: 24
        }),
        "Mask ////AA== is 255.255.255.0"
    );
    assert_eq!(
        node.ipv4_secondary_alloc_cidrs,
        [Cidr {
            addr: ip("10.245.0.0"),
            prefix: 20
        }]
    );
    assert_eq!(
        node.ipv6_alloc_cidr.map(|c| c.to_string()).as_deref(),
        Some("fd00:10:244:1::/64")
    );
    assert!(node.ipv6_secondary_alloc_cidrs.is_empty(), "null");
    assert_eq!(node.ipv4_health_ip, Some(ip("10.244.1.157")));
    assert_eq!(node.ipv6_health_ip, None, "Go writes a nil IP as \"\"");
    assert_eq!((node.ipv4_ingress_ip, node.ipv6_ingress_ip), (None, None));
    assert_eq!(node.cluster_id, 1);
    assert_eq!(node.source, "local");
    assert_eq!(node.encryption_key, 3);
    assert_eq!(node.labels["topology.kubernetes.io/zone"], "zone-a");
    assert!(node.annotations.is_empty(), "null");
    assert_eq!(node.node_identity, 6);
    assert_eq!(
        node.wireguard_pub_key,
        "k1n9Xb7eJq0G3pSGsqQ4JvS6n3b0t5o8l2m4c6e8g1A="
    );
    assert_eq!(node.boot_id, "6a5f2b1e-0c3d-4e5f-8a9b-1c2d3e4f5a6b");
}

#[test]
fn a_wrong_field_is_an_error_naming_the_key_and_the_field() {
    let key = "cilium/state/nodes/v1/cluster1/kind-worker";
    let cases = [
        (
            "IPv4AllocCIDR",
            serde_json::json!({"IP": "10.244.1.0", "Mask": "not base64!"}),
        ),
        (
            "IPv4AllocCIDR",
            serde_json::json!({"IP": "10.244.1.0", "Mask": "/wD/AA=="}),
        ),
        (
            "IPv4SecondaryAllocCIDRs",
            serde_json::json!([{"IP": "x", "Mask": "////AA=="}]),
        ),
        ("IPv4HealthIP", serde_json::json!("10.244.1.999")),
        ("IPAddresses", serde_json::json!([{"Type": "InternalIP"}])),
        ("ClusterID", serde_json::json!(-1)),
        ("EncryptionKey", serde_json::json!(256)),
        ("Labels", serde_json::json!({"a": 1})),
        ("Name", serde_json::json!(7)),
    ];
    for (field, bad) in cases {
        let mut value: serde_json::Value = serde_json::from_str(NODE).unwrap();
        value[field] = bad;
        let error = AgentNode::parse(key, value.to_string().as_bytes()).unwrap_err();
        match &error {
            NodeValueError::Field {
                key: k, field: f, ..
            } => {
                assert_eq!((k.as_str(), *f), (key, field), "{error}");
            }
            other => panic!("{field}: {other}"),
        }
        let text = error.to_string();
        assert!(text.contains(key) && text.contains(field), "{text}");
    }
    assert!(matches!(
        AgentNode::parse(key, b"[]"),
        Err(NodeValueError::NotAnObject { .. })
    ));
}
