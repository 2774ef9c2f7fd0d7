//! The instance cache on the fake cloud: after the engine's own mutations
//! the cache equals what the cloud lists, to each subnet's free count,
//! without a resync; a full resync keeps what changed while it listed; an
//! instance type's limits cost one call however many nodes ask at once.

use std::sync::Arc;

use std::time::Duration;

use ipam_cloud::{
    Assigned, CloudApi, CreateInterfaceRequest, IpRequest, NetworkInterface, Operation,
    ProviderError, Tag,
};
use ipam_engine::{CloudSnapshot, InstanceCache};
use ipam_fake_cloud::{FakeCloud, STANDARD_SECURITY_GROUP};

use crate::steered::SteeredCloud;

const INSTANCE: &str = "i-0001";
const SUBNET: &str = "subnet-a";

async fn fresh_listing(cloud: &dyn CloudApi) -> CloudSnapshot {
    let cache = InstanceCache::new();
    cache.resync_all(cloud).await.unwrap();
    cache.snapshot()
}

fn create_request(index: u32, ipv4_count: u32, use_prefixes: bool) -> CreateInterfaceRequest {
    CreateInterfaceRequest {
        instance_id: INSTANCE.into(),
        index,
        subnet_id: SUBNET.into(),
        security_groups: vec![STANDARD_SECURITY_GROUP.into()],
        description: "cache test".into(),
        tags: vec![Tag {
            key: "cluster".into(),
            value: "test".into(),
        }],
        delete_on_termination: true,
        ipv4_count,
        use_prefixes,
    }
}

/// The subnet's free count as the cache has it.
fn cached_free(cache: &InstanceCache) -> u32 {
    cache
        .subnets()
        .into_iter()
        .find(|s| s.id == SUBNET)
        .expect("the subnet is cached")
        .available_addresses
}

/// The cached interface `id` of the test's instance.
fn cached_interface(cache: &InstanceCache, id: &str) -> NetworkInterface {
    cache
        .instance(INSTANCE)
        .expect("the instance is cached")
        .interfaces
        .into_iter()
        .find(|i| i.id == id)
        .expect("the interface is cached")
}

#[tokio::test]
async fn a_full_resync_holds_every_listing() {
    let cloud = FakeCloud::standard(3);
    let cache = InstanceCache::new();
    cache.resync_all(&cloud).await.unwrap();
    let snapshot = cache.snapshot();
    assert_eq!(snapshot.instances.len(), 3);
    assert_eq!(snapshot.vpcs.len(), 1);
    assert_eq!(
        cache
            .security_groups()
            .iter()
            .map(|g| g.id.as_str())
            .collect::<Vec<_>>(),
        [STANDARD_SECURITY_GROUP]
    );
    assert_eq!(cache.subnet_cidr(SUBNET), "10.0.0.0/16");
    assert_eq!(cache.subnet_cidr("subnet-unknown"), "");
    assert_eq!(
        cached_free(&cache),
        cloud.subnet(SUBNET).unwrap().available_addresses
    );
}

#[tokio::test]
async fn mutation_results_keep_the_cache_equal_to_the_cloud() {
    let cloud = FakeCloud::standard(3);
    let cache = InstanceCache::new();
    cache.resync_all(&cloud).await.unwrap();
    let free = cached_free(&cache);

    // An interface with its primary and three addresses takes four.
    let eni = cloud
        .create_interface(&create_request(1, 3, false))
        .await
        .unwrap();
    cache.created(INSTANCE, eni.clone());
    assert_eq!(cached_free(&cache), free - 4);
    let assigned = cloud
        .assign_ips(&eni.id, IpRequest::Addresses(2))
        .await
        .unwrap();
    assert_eq!(cache.assigned(INSTANCE, &eni.id, &assigned), (2, 0));
    assert_eq!(cached_free(&cache), free - 6);
    let prefixes = cloud
        .assign_ips(&eni.id, IpRequest::Prefixes(2))
        .await
        .unwrap();
    assert_eq!(cache.assigned(INSTANCE, &eni.id, &prefixes), (0, 2));
    assert_eq!(cached_free(&cache), free - 6 - 32, "a /28 takes sixteen");
    // A provider answering with every address the interface has, the
    // primary included (as moto does), adds nothing twice.
    let everything = Assigned {
        addresses: [vec![eni.primary_ip], assigned.addresses.clone()].concat(),
        prefixes: prefixes.prefixes.clone(),
    };
    assert_eq!(
        cache.assigned(INSTANCE, &eni.id, &everything),
        (0, 0),
        "nothing new"
    );
    assert!(!cached_interface(&cache, &eni.id)
        .addresses
        .contains(&eni.primary_ip));
    assert_eq!(cached_free(&cache), free - 38);
    assert_eq!(
        cache.snapshot(),
        fresh_listing(&cloud).await,
        "after create and assign"
    );

    let release = vec![assigned.addresses[0]];
    let one_prefix = vec![prefixes.prefixes[0]];
    cloud
        .unassign_ips(&eni.id, &release, &one_prefix)
        .await
        .unwrap();
    cache.unassigned(INSTANCE, &eni.id, &release, &one_prefix);
    assert_eq!(cached_free(&cache), free - 38 + 17);
    let left = cached_interface(&cache, &eni.id);
    assert_eq!(
        left.addresses.len(),
        4,
        "three created, two assigned, one gone"
    );
    assert!(!left.addresses.contains(&release[0]));
    assert_eq!(left.prefixes, [prefixes.prefixes[1]]);
    assert_eq!(
        cache.snapshot(),
        fresh_listing(&cloud).await,
        "after unassign"
    );

    cloud.delete_interface(&eni.id).await.unwrap();
    cache.deleted(INSTANCE, &eni.id);
    assert_eq!(cached_free(&cache), free, "everything back");
    assert_eq!(cache.instance(INSTANCE).unwrap().interfaces.len(), 1);
    assert_eq!(
        cache.snapshot(),
        fresh_listing(&cloud).await,
        "after delete"
    );
}

#[tokio::test]
async fn an_interface_created_with_prefixes_takes_sixteen_addresses_each() {
    let cloud = FakeCloud::standard(2);
    let cache = InstanceCache::new();
    cache.resync_all(&cloud).await.unwrap();
    let free = cached_free(&cache);
    let eni = cloud
        .create_interface(&create_request(1, 2, true))
        .await
        .unwrap();
    assert_eq!(eni.prefixes.len(), 2);
    cache.created(INSTANCE, eni.clone());
    assert_eq!(cached_free(&cache), free - 33, "the primary and two /28s");
    assert_eq!(cached_interface(&cache, &eni.id).prefixes, eni.prefixes);
    assert_eq!(cache.snapshot(), fresh_listing(&cloud).await);
}

#[tokio::test]
async fn a_targeted_resync_refreshes_one_instance_and_its_subnets() {
    let cloud = FakeCloud::standard(3);
    let cache = InstanceCache::new();
    cache.resync_all(&cloud).await.unwrap();
    // Something outside the engine changes the instance.
    cloud
        .create_interface(&create_request(2, 1, false))
        .await
        .unwrap();
    assert_eq!(
        cache.instance(INSTANCE).unwrap().interfaces.len(),
        1,
        "stale until refreshed"
    );
    let refreshed = cache
        .resync_instance(&cloud, INSTANCE)
        .await
        .unwrap()
        .expect("the instance exists");
    assert_eq!(refreshed.interfaces.len(), 2);
    assert_eq!(cache.snapshot(), fresh_listing(&cloud).await);
    assert!(cache
        .resync_instance(&cloud, "i-gone")
        .await
        .unwrap()
        .is_none());
    assert!(cache.instance("i-gone").is_none());
}

#[tokio::test]
async fn instance_limits_are_fetched_once_then_served_from_the_cache() {
    let cloud = FakeCloud::standard(1);
    let cache = InstanceCache::new();
    let first = cache.limits(&cloud, "m5.large").await.unwrap();
    assert_eq!(first.max_interfaces, 3);
    // Every later lookup that reached the cloud would fail.
    cloud.fail_next(
        Operation::GetInstanceLimits,
        100,
        ProviderError::Transient("down".into()),
    );
    assert_eq!(
        cache.limits(&cloud, "m5.large").await.unwrap(),
        first,
        "served from the cache"
    );
    assert!(
        cache.limits(&cloud, "t3.small").await.is_err(),
        "an unknown type is looked up, so the fault shows"
    );
    assert_eq!(cloud.calls(Operation::GetInstanceLimits), 2);
}

#[tokio::test(start_paused = true)]
async fn nodes_of_a_new_type_arriving_together_cost_one_limits_call() {
    // Each lookup takes a second: the others arrive while the first waits.
    let cloud = Arc::new(SteeredCloud::new(
        Arc::new(FakeCloud::standard(1)),
        Duration::from_secs(1),
    ));
    let cache = Arc::new(InstanceCache::new());
    let lookups: Vec<_> = (0..20)
        .map(|_| {
            let (cloud, cache) = (cloud.clone(), cache.clone());
            tokio::spawn(async move { cache.limits(cloud.as_ref(), "m5.large").await })
        })
        .collect();
    for lookup in lookups {
        assert_eq!(lookup.await.unwrap().unwrap().max_interfaces, 3);
    }
    assert_eq!(cloud.fake.calls(Operation::GetInstanceLimits), 1);
}

#[tokio::test]
async fn a_mutation_during_a_full_resync_is_not_overwritten_by_the_older_listing() {
    let cloud = Arc::new(SteeredCloud::new(
        Arc::new(FakeCloud::standard(3)),
        Duration::ZERO,
    ));
    let cache = Arc::new(InstanceCache::new());
    cache.resync_all(cloud.as_ref()).await.unwrap();
    let (listing_taken, hand_back) = cloud.hold_next_listing();
    let eni = cache.instance(INSTANCE).unwrap().interfaces[0].id.clone();

    let resync = {
        let (cloud, cache) = (cloud.clone(), cache.clone());
        tokio::spawn(async move { cache.resync_all(cloud.as_ref()).await })
    };
    listing_taken.await.expect("the resync lists instances");
    // The engine assigns after the listing (and the subnets') was taken.
    let assigned = cloud
        .assign_ips(&eni, IpRequest::Addresses(2))
        .await
        .unwrap();
    cache.assigned(INSTANCE, &eni, &assigned);
    hand_back.send(()).unwrap();
    resync.await.unwrap().unwrap();

    assert_eq!(
        cached_interface(&cache, &eni).addresses,
        assigned.addresses,
        "the assignment survived the resync"
    );
    assert_eq!(
        cached_free(&cache),
        cloud.fake.subnet(SUBNET).unwrap().available_addresses,
        "the subnet's free count too"
    );
    assert_eq!(cache.snapshot(), fresh_listing(cloud.fake.as_ref()).await);
}
