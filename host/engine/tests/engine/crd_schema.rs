//! The nodes the engine writes, ENI and Azure mode, checked against the
//! CiliumNode CRD's structural schema (`ipam_ciliumnode::crd_schema`): no
//! field the API server would prune, no value it would refuse, in the node
//! as converged and in the merge patches that would write it.

use std::sync::Arc;

use ipam_ciliumnode::crd_schema::{self, Nulls};
use ipam_ciliumnode::patch::merge_patches;
use ipam_ciliumnode::{CiliumNode, NodeUpdate};
use ipam_engine::{MaintenanceSettings, MemoryNodeStore, Metrics, NodeStore};
use ipam_fake_cloud::FakeCloud;

use crate::support::{azure_node, azure_settings, maintainer, node, settings};

const NODE: &str = "n1";

/// `registered` after the engine's resync and one pass.
async fn converged(registered: CiliumNode, settings: MaintenanceSettings) -> CiliumNode {
    let _ = ipam_engine::clock::unix_now();
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(registered).unwrap();
    let maintainer = maintainer(
        Arc::new(FakeCloud::standard(1)),
        store.clone(),
        settings,
        Arc::new(Metrics::new()),
    );
    let parts = maintainer.parts();
    parts.cache.resync_all(parts.cloud.as_ref()).await.unwrap();
    let pending = store.pending_pods(NODE);
    maintainer.maintain(NODE, pending).await.unwrap();
    store.get(NODE).await.unwrap().unwrap()
}

/// The node's object and the patches that write what the engine owns of it
/// onto the node as registered, each with what the API server would not
/// keep.
fn findings(registered: &CiliumNode, node: &CiliumNode) -> Vec<crd_schema::Finding> {
    let schema = crd_schema::ciliumnode();
    let mut findings = crd_schema::check(&schema, &crd_schema::object_of(node), Nulls::Refused);
    let update = NodeUpdate {
        pool: Some(node.spec.ipam.pool.clone()),
        release_ips: Default::default(),
        operator_error: Some(node.status.ipam.operator_status.error.clone()),
        enis: Some(node.status.eni.enis.clone()),
        azure_interfaces: Some(node.status.azure.interfaces.clone()),
    };
    let (spec, status) = merge_patches(registered, &update);
    for patch in spec.into_iter().chain(status) {
        findings.extend(crd_schema::check(&schema, &patch, Nulls::RemoveField));
    }
    findings
}

#[tokio::test(start_paused = true)]
async fn an_eni_node_as_the_engine_writes_it_fits_the_crd() {
    let registered = node(NODE, "i-0000", 2);
    let node = converged(registered.clone(), settings()).await;
    let eni = node.status.eni.enis.values().next().expect("an interface");
    assert!(
        !eni.ip.is_empty() && !eni.availability_zone.is_empty(),
        "{eni:?}"
    );
    assert_eq!(findings(&registered, &node), vec![]);
}

#[tokio::test(start_paused = true)]
async fn an_azure_node_as_the_engine_writes_it_fits_the_crd() {
    let registered = azure_node(NODE, "i-0000", 2);
    let node = converged(registered.clone(), azure_settings()).await;
    let nic = node.status.azure.interfaces.first().expect("an interface");
    assert!(
        !nic.cidr.is_empty() && !nic.gateway_ip.is_empty(),
        "{nic:?}"
    );
    assert_eq!(findings(&registered, &node), vec![]);
    // What cilium-agent reads after the API server kept what fits.
    let object = crd_schema::object_of(&node);
    let stored = crd_schema::prune(&crd_schema::ciliumnode(), &object);
    let written = &stored["status"]["azure"]["interfaces"][0];
    assert_eq!(written["cidr"], nic.cidr.as_str());
    assert_eq!(written["gateway"], nic.gateway_ip.as_str());
    assert_eq!(written["GatewayIP"], nic.gateway_ip.as_str());
}
