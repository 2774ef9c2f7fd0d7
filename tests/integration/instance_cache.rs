//! The instance cache through the real mock component: after the engine's
//! own mutations, the cache equals what the cloud lists, without a resync.

use ipam_tests as common;

use common::{mock, MOCK_SETTINGS};
use ipam_cloud::{CloudApi, CreateInterfaceRequest, IpRequest, Tag};
use ipam_engine::InstanceCache;

async fn fresh_listing(cloud: &dyn CloudApi) -> ipam_engine::CloudSnapshot {
    let cache = InstanceCache::new();
    cache.resync_all(cloud).await.unwrap();
    cache.snapshot()
}

#[tokio::test]
async fn mutation_results_keep_the_cache_equal_to_the_cloud() {
    let cloud = mock(MOCK_SETTINGS).await;
    let cache = InstanceCache::new();
    cache.resync_all(&cloud).await.unwrap();
    assert_eq!(cache.snapshot().instances.len(), 3);

    let request = CreateInterfaceRequest {
        instance_id: "i-0001".into(),
        index: 1,
        subnet_id: "subnet-a2".into(),
        security_groups: vec!["sg-pods".into()],
        description: "cache test".into(),
        tags: vec![Tag {
            key: "cluster".into(),
            value: "test".into(),
        }],
        delete_on_termination: true,
        ipv4_count: 3,
        use_prefixes: false,
    };
    let eni = cloud.create_interface(&request).await.unwrap();
    cache.created("i-0001", eni.clone());
    let assigned = cloud
        .assign_ips(&eni.id, IpRequest::Addresses(2))
        .await
        .unwrap();
    cache.assigned("i-0001", &eni.id, &assigned);
    let prefix = cloud
        .assign_ips(&eni.id, IpRequest::Prefixes(1))
        .await
        .unwrap();
    cache.assigned("i-0001", &eni.id, &prefix);
    // A provider answering with every address the interface has, the primary
    // included (as moto does), adds nothing twice.
    let everything = ipam_cloud::Assigned {
        addresses: [vec![eni.primary_ip.clone()], assigned.addresses.clone()].concat(),
        prefixes: prefix.prefixes.clone(),
    };
    assert_eq!(
        cache.assigned("i-0001", &eni.id, &everything),
        (0, 0),
        "nothing new"
    );
    assert_eq!(
        cache.snapshot(),
        fresh_listing(&cloud).await,
        "after create and assign"
    );

    let release = vec![assigned.addresses[0].clone()];
    cloud
        .unassign_ips(&eni.id, &release, &prefix.prefixes)
        .await
        .unwrap();
    cache.unassigned("i-0001", &eni.id, &release, &prefix.prefixes);
    assert_eq!(
        cache.snapshot(),
        fresh_listing(&cloud).await,
        "after unassign"
    );

    cloud.delete_interface(&eni.id).await.unwrap();
    cache.deleted("i-0001", &eni.id);
    assert_eq!(
        cache.snapshot(),
        fresh_listing(&cloud).await,
        "after delete"
    );
}

#[tokio::test]
async fn a_targeted_resync_refreshes_one_instance_and_drops_a_gone_one() {
    let cloud = mock(MOCK_SETTINGS).await;
    let cache = InstanceCache::new();
    cache.resync_all(&cloud).await.unwrap();
    // Something outside the engine changes i-0002.
    let request = CreateInterfaceRequest {
        instance_id: "i-0002".into(),
        index: 2,
        subnet_id: "subnet-a1".into(),
        security_groups: Vec::new(),
        description: String::new(),
        tags: Vec::new(),
        delete_on_termination: true,
        ipv4_count: 1,
        use_prefixes: false,
    };
    cloud.create_interface(&request).await.unwrap();
    assert_eq!(
        cache.instance("i-0002").unwrap().interfaces.len(),
        1,
        "stale until refreshed"
    );
    let refreshed = cache
        .resync_instance(&cloud, "i-0002")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(refreshed.interfaces.len(), 2);
    assert_eq!(cache.snapshot(), fresh_listing(&cloud).await);
    assert!(cache
        .resync_instance(&cloud, "i-gone")
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn instance_limits_are_fetched_once_then_served_from_the_cache() {
    // The mock fails every get-instance-limits after the first: a second
    // lookup that reached the cloud would fail.
    let settings = format!(
        "{MOCK_SETTINGS}\nfaults:\n  - {{operation: get-instance-limits, error: transient, after: 1, times: 100}}\n"
    );
    let cloud = mock(&settings).await;
    let cache = InstanceCache::new();
    let first = cache.limits(&cloud, "m5.large").await.unwrap();
    assert_eq!(first.max_interfaces, 3);
    assert_eq!(
        cache.limits(&cloud, "m5.large").await.unwrap(),
        first,
        "served from the cache"
    );
    assert!(
        cache.limits(&cloud, "t3.small").await.is_err(),
        "an unknown type is looked up, so the fault shows"
    );
}

#[tokio::test(start_paused = true)]
async fn a_mutation_during_a_full_resync_is_not_overwritten_by_the_older_listing() {
    use ipam_clouds::Cloud;
    use ipam_simulate::{CloudModel, Latency};
    use std::sync::Arc;
    use std::time::Duration;

    // Every call takes 200 ms and takes effect at 100 ms: the listing of
    // instances is taken at 700 ms and arrives at 800 ms.
    let latency = Latency {
        default_ms: 200,
        operations: Default::default(),
    };
    let cloud = Arc::new(CloudModel::new(
        mock(MOCK_SETTINGS).await,
        latency,
        Cloud::Aws.rate_limits(),
    ));
    let cache = Arc::new(InstanceCache::new());
    cache.resync_all(cloud.as_ref()).await.unwrap();
    let eni = cache.instance("i-0001").unwrap().interfaces[0].id.clone();

    let resync = {
        let (cloud, cache) = (cloud.clone(), cache.clone());
        tokio::spawn(async move { cache.resync_all(cloud.as_ref()).await })
    };
    tokio::time::sleep(Duration::from_millis(750)).await;
    // The engine assigns meanwhile (straight on the mock: it takes effect now).
    let assigned = cloud
        .inner()
        .assign_ips(&eni, IpRequest::Addresses(2))
        .await
        .unwrap();
    cache.assigned("i-0001", &eni, &assigned);
    resync.await.unwrap().unwrap();

    let cached = cache.instance("i-0001").unwrap().interfaces[0]
        .addresses
        .clone();
    assert_eq!(
        cached, assigned.addresses,
        "the assignment survived the resync"
    );
    assert_eq!(cache.snapshot(), fresh_listing(cloud.inner()).await);
}
