//! Everything this crate writes of a CiliumNode, spec and status, checked
//! against the CRD's structural schema (`ipam_ciliumnode::crd_schema`,
//! written from Cilium's `ciliumnodes.yaml`): no field a real API server
//! would prune, no value it would refuse, and the node read back after
//! pruning is the node written.

use std::collections::BTreeMap;

use ipam_ciliumnode::crd_schema::{self, Nulls};
use ipam_ciliumnode::patch::merge_patches;
use ipam_ciliumnode::{
    AllocationIp, AzureAddress, AzureInterface, AzureSpec, CiliumNode, EniInterface, EniSpec,
    EniSubnet, EniVpc, NodeUpdate, ReleaseState,
};

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn string_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn eni() -> EniInterface {
    EniInterface {
        id: "eni-1".into(),
        ip: "10.0.1.10".into(),
        mac: "0a:1b:2c:3d:4e:5f".into(),
        availability_zone: "us-east-1a".into(),
        description: "Cilium-CNI (i-1)".into(),
        number: 1,
        subnet: EniSubnet {
            id: "subnet-1".into(),
            cidr: "10.0.1.0/24".into(),
        },
        vpc: EniVpc {
            id: "vpc-1".into(),
            primary_cidr: "10.0.0.0/16".into(),
            cidrs: strings(&["10.0.0.0/16", "10.1.0.0/16"]),
        },
        addresses: strings(&["10.0.1.10", "10.0.1.11"]),
        prefixes: strings(&["10.0.1.16/28"]),
        security_groups: strings(&["sg-1"]),
        tags: string_map(&[("cluster", "c")]),
    }
}

fn azure_interface() -> AzureInterface {
    AzureInterface {
        id:
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/nic-1"
                .into(),
        name: "nic-1".into(),
        mac: "00:0d:3a:00:00:01".into(),
        state: "succeeded".into(),
        addresses: vec![AzureAddress {
            ip: "10.240.0.5".into(),
            subnet: "subnet-1".into(),
            state: "succeeded".into(),
        }],
        security_group: "nsg-1".into(),
        gateway_ip: "10.240.0.1".into(),
        cidr: "10.240.0.0/16".into(),
    }
}

/// A node with every field of the model set.
fn full_node() -> CiliumNode {
    let mut node = CiliumNode {
        name: "ip-10-0-1-17".into(),
        ..Default::default()
    };
    let spec = &mut node.spec;
    spec.instance_id = "i-1".into();
    spec.ipam.pool = BTreeMap::from([(
        "10.0.1.11".to_string(),
        AllocationIp {
            owner: Some("default/web".into()),
            resource: Some("eni-1".into()),
        },
    )]);
    spec.ipam.pre_allocate = Some(8);
    spec.ipam.min_allocate = Some(2);
    spec.ipam.max_allocate = Some(64);
    spec.ipam.max_above_watermark = Some(4);
    spec.eni = EniSpec {
        instance_type: "m5.large".into(),
        availability_zone: "us-east-1a".into(),
        vpc_id: "vpc-1".into(),
        node_subnet_id: "subnet-1".into(),
        first_interface_index: Some(1),
        subnet_ids: strings(&["subnet-1"]),
        subnet_tags: string_map(&[("tier", "pods")]),
        security_groups: strings(&["sg-1"]),
        security_group_tags: string_map(&[("role", "nodes")]),
        exclude_interface_tags: string_map(&[("no-pods", "true")]),
        use_primary_address: true,
        disable_prefix_delegation: true,
        delete_on_termination: Some(true),
    };
    spec.azure = AzureSpec {
        interface_name: "eth0".into(),
    };
    let status = &mut node.status;
    status.ipam.used = node.spec.ipam.pool.clone();
    status.ipam.release_ips = BTreeMap::from([
        ("10.0.1.12".to_string(), ReleaseState::MarkedForRelease),
        ("10.0.1.13".to_string(), ReleaseState::ReadyForRelease),
        ("10.0.1.14".to_string(), ReleaseState::DoNotRelease),
        ("10.0.1.15".to_string(), ReleaseState::Released),
    ]);
    status.ipam.operator_status.error = "subnet full".into();
    status.eni.enis = BTreeMap::from([("eni-1".to_string(), eni())]);
    status.azure.interfaces = vec![azure_interface()];
    node
}

#[test]
fn a_full_node_survives_the_api_server() {
    let node = full_node();
    let object = crd_schema::object_of(&node);
    let schema = crd_schema::ciliumnode();
    assert_eq!(crd_schema::check(&schema, &object, Nulls::Refused), vec![]);
    let stored = crd_schema::prune(&schema, &object);
    assert_eq!(stored, object, "nothing pruned");
    let read: CiliumNode = serde_json::from_value(serde_json::json!({
        "name": node.name, "spec": stored["spec"], "status": stored["status"],
    }))
    .unwrap();
    assert_eq!(read, node);
}

#[test]
fn every_patch_the_operator_sends_survives_the_api_server() {
    let node = full_node();
    let mut current = node.clone();
    current.spec.ipam.pool.insert(
        "10.0.1.99".into(),
        AllocationIp {
            owner: None,
            resource: Some("eni-9".into()),
        },
    );
    current.status.eni.enis.insert("eni-9".into(), eni());
    let update = NodeUpdate {
        pool: Some(node.spec.ipam.pool.clone()),
        release_ips: node
            .status
            .ipam
            .release_ips
            .iter()
            .map(|(ip, state)| (ip.clone(), Some(state.clone())))
            .chain([("10.0.1.99".to_string(), None)])
            .collect(),
        operator_error: Some(String::new()),
        enis: Some(node.status.eni.enis.clone()),
        azure_interfaces: Some(node.status.azure.interfaces.clone()),
    };
    let mut emptied = current.clone();
    emptied.status.azure.interfaces.clear();
    let (spec, status) = merge_patches(&emptied, &update);
    let schema = crd_schema::ciliumnode();
    for patch in [spec.expect("a spec patch"), status.expect("a status patch")] {
        assert_eq!(
            crd_schema::check(&schema, &patch, Nulls::RemoveField),
            vec![],
            "{patch}"
        );
        assert!(
            patch.to_string().contains("null"),
            "removals included: {patch}"
        );
    }
}

#[test]
fn the_old_azure_field_names_would_be_pruned() {
    // What this operator wrote before: `CIDR` and no `gateway`. The check
    // catches it, and pruning shows what cilium-agent would have read.
    let object = serde_json::json!({"status": {"azure": {"interfaces": [
        {"id": "nic-1", "CIDR": "10.240.0.0/16", "GatewayIP": "10.240.0.1"}
    ]}}});
    let schema = crd_schema::ciliumnode();
    let findings = crd_schema::check(&schema, &object, Nulls::Refused);
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0].path, "status.azure.interfaces[0].CIDR");
    let stored = crd_schema::prune(&schema, &object);
    let read: AzureInterface =
        serde_json::from_value(stored["status"]["azure"]["interfaces"][0].clone()).unwrap();
    assert_eq!(read.cidr, "", "the range is lost");
}
