//! Allocation end to end: the engine's allocation steps, the real mock
//! component, the in-memory node store.

use ipam_tests as common;

use std::sync::Arc;

use common::{engine_settings, maintainer, mock, MOCK_SETTINGS};
use ipam_ciliumnode::{AllocationIp, CiliumNode};
use ipam_cloud::CloudApi;
use ipam_engine::InstanceCache;
use ipam_engine::Maintainer;
use ipam_engine::Step;
use ipam_engine::{MemoryNodeStore, NodeStore};
use ipam_pool::tags::NODE_TAG;
use ipam_provider_runtime::WasmProvider;

struct World {
    cloud: Arc<WasmProvider>,
    cache: Arc<InstanceCache>,
    store: Arc<MemoryNodeStore>,
    engine: Maintainer,
}

async fn world(settings_yaml: &str, prefix_delegation: bool) -> World {
    let cloud = Arc::new(mock(settings_yaml).await);
    let cache = Arc::new(InstanceCache::new());
    cache.resync_all(cloud.as_ref()).await.unwrap();
    let store = Arc::new(MemoryNodeStore::new());
    let engine = maintainer(
        cloud.clone(),
        cache.clone(),
        store.clone(),
        engine_settings(prefix_delegation),
    );
    World {
        cloud,
        cache,
        store,
        engine,
    }
}

fn node(name: &str, instance: &str, pre: u32, first_interface_index: u32) -> CiliumNode {
    let mut node = common::node(name, instance, pre);
    node.spec.eni.first_interface_index = Some(first_interface_index);
    node
}

impl World {
    async fn allocate(&self, name: &str) -> Vec<Step> {
        self.engine.allocate(name, 0).await.unwrap()
    }

    async fn node(&self, name: &str) -> CiliumNode {
        self.store.get(name).await.unwrap().unwrap()
    }
}

#[tokio::test]
async fn a_node_converges_to_its_watermark_and_follows_its_use() {
    let w = world(MOCK_SETTINGS, false).await;
    w.store.upsert(node("n1", "i-0001", 8, 0)).unwrap();
    let steps = w.allocate("n1").await;
    assert!(
        matches!(steps[0], Step::Assigned { addresses: 8, .. }),
        "{steps:?}"
    );
    assert_eq!(steps.last(), Some(&Step::Satisfied));
    assert_eq!(w.node("n1").await.spec.ipam.pool.len(), 8);

    // Pods take five addresses: the pool grows back to eight free.
    let taken: Vec<String> = w
        .node("n1")
        .await
        .spec
        .ipam
        .pool
        .keys()
        .take(5)
        .cloned()
        .collect();
    w.store
        .agent_update("n1", |n| {
            for ip in &taken {
                n.status.ipam.used.insert(
                    ip.clone(),
                    AllocationIp {
                        owner: Some("pod".into()),
                        resource: None,
                    },
                );
            }
        })
        .unwrap();
    let steps = w.allocate("n1").await;
    assert_eq!(steps.last(), Some(&Step::Satisfied), "{steps:?}");
    let n1 = w.node("n1").await;
    assert!(n1.spec.ipam.pool.len() - n1.status.ipam.used.len() >= 8);
    // The cache never drifted from the cloud.
    let fresh = InstanceCache::new();
    fresh.resync_all(w.cloud.as_ref()).await.unwrap();
    assert_eq!(w.cache.snapshot(), fresh.snapshot());
}

#[tokio::test]
async fn a_full_interface_leads_to_a_new_one_until_the_instance_is_full() {
    // t3.small: 3 interfaces of 4 slots, so 3 pod addresses per interface;
    // pods start at interface 1.
    let w = world(MOCK_SETTINGS, false).await;
    w.store.upsert(node("n3", "i-0003", 8, 1)).unwrap();
    let steps = w.allocate("n3").await;
    assert!(
        matches!(&steps[0], Step::Created { index: 1, subnet, .. } if subnet == "subnet-b1"),
        "{steps:?}"
    );
    assert!(
        matches!(&steps[1], Step::Created { index: 2, .. }),
        "{steps:?}"
    );
    assert!(
        matches!(&steps[2], Step::Blocked(reason) if reason.contains("no room")),
        "{steps:?}"
    );
    let n3 = w.node("n3").await;
    assert_eq!(n3.spec.ipam.pool.len(), 6);
    let reasons: Vec<&str> = w
        .store
        .announcements()
        .into_iter()
        .map(|(_, a)| a.reason)
        .collect();
    assert_eq!(
        reasons,
        ["InterfaceCreated", "InterfaceCreated", "CannotAllocate"],
        "people are told"
    );
    assert!(
        n3.status.ipam.operator_status.error.contains("no room"),
        "the reason is published"
    );
    let interfaces = w.cloud.get_instances(&["i-0003".into()]).await.unwrap()[0]
        .interfaces
        .clone();
    assert_eq!(interfaces.len(), 3);
    assert!(
        interfaces[1]
            .tags
            .iter()
            .any(|t| t.key == NODE_TAG && t.value == "n3"),
        "ownership tags"
    );
}

#[tokio::test]
async fn a_full_subnet_leads_to_another_subnet() {
    let settings = r#"
vpcs: [{id: vpc-1, cidrs: [10.0.0.0/16]}]
subnets:
  - {id: own, vpc-id: vpc-1, cidr: 10.0.0.0/28, availability-zone: z}
  - {id: other, vpc-id: vpc-1, cidr: 10.0.1.0/24, availability-zone: z}
security-groups: [{id: sg-1, vpc-id: vpc-1}]
instance-types: {t: {max-interfaces: 4, ipv4-per-interface: 10}}
instances:
  - {id: i-1, instance-type: t, subnet-id: own, security-groups: [sg-1]}
  - {id: i-2, instance-type: t, subnet-id: own, security-groups: [sg-1]}
"#;
    let w = world(settings, false).await;
    w.store.upsert(node("n1", "i-1", 8, 1)).unwrap();
    w.store.upsert(node("n2", "i-2", 8, 1)).unwrap();
    let first = w.allocate("n1").await;
    assert!(
        matches!(&first[0], Step::Created { subnet, .. } if subnet == "own"),
        "own subnet fits: {first:?}"
    );
    let second = w.allocate("n2").await;
    assert!(
        matches!(&second[0], Step::Created { subnet, .. } if subnet == "other"),
        "own subnet is full: {second:?}"
    );
    assert_eq!(second.last(), Some(&Step::Satisfied));
}

#[tokio::test]
async fn exhausted_prefixes_fall_back_to_single_addresses() {
    let w = world(MOCK_SETTINGS, true).await;
    // subnet-a3 is fragmented: no /28 is free there.
    let mut fragmented = node("frag", "i-0001", 8, 1);
    fragmented.spec.eni.subnet_ids = vec!["subnet-a3".into()];
    w.store.upsert(fragmented).unwrap();
    let steps = w.allocate("frag").await;
    assert!(
        matches!(&steps[0], Step::Created { subnet, .. } if subnet == "subnet-a3"),
        "{steps:?}"
    );
    let interface =
        w.cloud.get_instances(&["i-0001".into()]).await.unwrap()[0].interfaces[1].clone();
    assert!(
        interface.prefixes.is_empty() && interface.addresses.len() == 8,
        "/32 fallback: {interface:?}"
    );
    assert_eq!(w.node("frag").await.spec.ipam.pool.len(), 8);

    // Where a /28 is free, prefixes are used and the pool counts 16 per prefix.
    let mut roomy = node("roomy", "i-0002", 8, 1);
    roomy.spec.eni.subnet_ids = vec!["subnet-a2".into()];
    w.store.upsert(roomy).unwrap();
    w.allocate("roomy").await;
    let interface =
        w.cloud.get_instances(&["i-0002".into()]).await.unwrap()[0].interfaces[1].clone();
    assert_eq!(interface.prefixes.len(), 1, "{interface:?}");
    assert_eq!(w.node("roomy").await.spec.ipam.pool.len(), 16);
}

#[tokio::test]
async fn a_restart_over_satisfied_nodes_changes_nothing_in_the_cloud() {
    let w = world(MOCK_SETTINGS, false).await;
    w.store.upsert(node("n1", "i-0001", 8, 0)).unwrap();
    w.store.upsert(node("n3", "i-0003", 5, 1)).unwrap();
    w.allocate("n1").await;
    w.allocate("n3").await;
    let before = w.cloud.get_instances(&[]).await.unwrap();
    let subnets_before = w.cloud.get_subnets().await.unwrap();

    // A new engine: empty cache, same cloud and nodes.
    let restarted = Arc::new(InstanceCache::new());
    restarted.resync_all(w.cloud.as_ref()).await.unwrap();
    let engine = maintainer(
        w.cloud.clone(),
        restarted,
        w.store.clone(),
        engine_settings(false),
    );
    for name in ["n1", "n3"] {
        let steps = engine.allocate(name, 0).await.unwrap();
        assert_eq!(steps, vec![Step::Satisfied], "{name}");
    }
    assert_eq!(
        w.cloud.get_instances(&[]).await.unwrap(),
        before,
        "no interface or address changed"
    );
    assert_eq!(w.cloud.get_subnets().await.unwrap(), subnets_before);
}

#[tokio::test]
async fn faults_still_converge_without_leaks_or_duplicates() {
    use ipam_cloud::rate::RetryPolicy;
    use ipam_cloud::Tag;
    use ipam_engine::LimitedCloud;

    let settings = format!(
        "{MOCK_SETTINGS}\nfaults:\n\
         \x20 - {{operation: assign-ips, error: throttled, times: 2, retry-after-ms: 5}}\n\
         \x20 - {{operation: get-instances, error: transient, times: 1}}\n\
         \x20 - {{operation: attach-interface, error: transient, times: 1}}\n"
    );
    let provider = mock(&settings).await;
    let limits = common::declared_limits(&provider).with_retry(RetryPolicy {
        max_attempts: 4,
        base: std::time::Duration::from_millis(1),
        cap: std::time::Duration::from_millis(20),
    });
    let metrics = Arc::new(ipam_engine::Metrics::new());
    let cloud = Arc::new(LimitedCloud::new(provider, limits).with_metrics(metrics.clone()));
    // The first listing (this resync's) fails once and is retried.
    let cache = Arc::new(InstanceCache::new());
    cache.resync_all(cloud.as_ref()).await.unwrap();
    let store = Arc::new(MemoryNodeStore::new());
    let engine = maintainer(
        cloud.clone(),
        cache.clone(),
        store.clone(),
        engine_settings(false),
    );
    store.upsert(node("n1", "i-0001", 8, 0)).unwrap();
    store.upsert(node("n3", "i-0003", 5, 1)).unwrap();

    for name in ["n1", "n3"] {
        // A failed create is not retried (it may be half done): the next
        // round picks the node up again, as the engine's loop would.
        let mut satisfied = false;
        for _ in 0..3 {
            match engine.allocate(name, 0).await {
                Ok(steps) if steps.last() == Some(&Step::Satisfied) => {
                    satisfied = true;
                    break;
                }
                Ok(steps) => panic!("{name}: {steps:?}"),
                Err(_) => continue,
            }
        }
        assert!(satisfied, "{name} converged");
    }
    // Every fault fired, so the checks below are checks after faults.
    use ipam_cloud::Operation;
    assert_eq!(
        metrics.api_calls_with(Operation::GetInstances, "transient"),
        1
    );
    assert_eq!(metrics.api_calls_with(Operation::AssignIps, "throttled"), 2);
    assert_eq!(
        metrics.api_calls_with(Operation::CreateInterface, "transient"),
        1,
        "the failed attach"
    );
    let owned = [Tag {
        key: "ipam-operator/cluster".into(),
        value: "test".into(),
    }];
    assert!(
        cloud
            .get_detached_interfaces(&owned)
            .await
            .unwrap()
            .is_empty(),
        "no leaked interface"
    );
    let mut addresses: Vec<std::net::Ipv4Addr> = cloud
        .get_instances(&[])
        .await
        .unwrap()
        .into_iter()
        .flat_map(|i| i.interfaces)
        .flat_map(|e| std::iter::once(e.primary_ip).chain(e.addresses))
        .collect();
    let total = addresses.len();
    addresses.sort();
    addresses.dedup();
    assert_eq!(addresses.len(), total, "no address assigned twice");
    let fresh = InstanceCache::new();
    fresh.resync_all(cloud.as_ref()).await.unwrap();
    assert_eq!(
        cache.snapshot(),
        fresh.snapshot(),
        "the cache matches the cloud"
    );
}
