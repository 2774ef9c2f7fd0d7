//! Excess addresses go through the release handshake with the agent, and an
//! interface none of whose addresses is needed is freed whole.

use std::sync::Arc;
use std::time::Duration;

use ipam_ciliumnode::ReleaseState;
use ipam_cloud::{InstanceLimits, Operation};
use ipam_engine::{MemoryNodeStore, Metrics};
use ipam_fake_cloud::FakeCloud;

use crate::agents::{settle, tick};
use crate::support::{config, get, one_instance_cloud, pod_interfaces_node, settings, start};

/// AWS's t3.small: 3 interfaces of 4 slots, so 3 pod addresses each.
const T3_SMALL: InstanceLimits = InstanceLimits {
    max_interfaces: 3,
    ipv4_per_interface: 4,
    ipv6_per_interface: 4,
    prefix_delegation: false,
};

fn small_cloud() -> FakeCloud {
    one_instance_cloud("i-small", "t3.small", T3_SMALL)
}

#[tokio::test(start_paused = true)]
async fn excess_goes_through_the_handshake_and_unneeded_interfaces_are_freed() {
    let fake = Arc::new(small_cloud());
    let store = Arc::new(MemoryNodeStore::new());
    store
        .upsert(pod_interfaces_node("n1", "i-small", 2))
        .unwrap();
    let mut settings = settings();
    settings.free_interfaces = true;
    let metrics = Arc::new(Metrics::new());
    let running = start(
        fake.clone(),
        store.clone(),
        settings,
        config(),
        metrics.clone(),
    );
    running.ready().await;
    let interfaces = || fake.instance("i-small").unwrap().interfaces;

    // Four pods: 4 used and 2 free need both pod interfaces, full.
    settle(&store, 4, Duration::from_secs(300)).await;
    let full = interfaces();
    assert_eq!(full.iter().map(|i| i.index).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(full[1..].iter().all(|i| i.addresses.len() == 3));
    assert_eq!(get(&store, "n1").await.spec.ipam.pool.len(), 6);
    assert_eq!(fake.calls(Operation::DeleteInterface), 0);
    let mutations = fake.mutating_calls();

    // The pods go: 6 available, 0 used, 2 to keep. Past the release delay
    // the operator marks the excess, and nothing leaves the cloud until the
    // agent answers.
    tick(&store, 0).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    // The excess is 4; first marked are the addresses of the interface that
    // can go whole (the highest of the two equally full ones).
    let marks = get(&store, "n1").await.status.ipam.release_ips;
    let marked: Vec<&String> = marks.keys().collect();
    assert_eq!(
        marked,
        full[2]
            .addresses
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>(),
        "{marks:?}"
    );
    assert!(marks.values().all(|s| *s == ReleaseState::MarkedForRelease));
    assert_eq!(
        fake.mutating_calls(),
        mutations,
        "nothing left before the answer"
    );
    // The agent answers ready-for-release; one interface goes whole and one
    // address is unassigned from the other.
    settle(&store, 0, Duration::from_secs(600)).await;
    let left = interfaces();
    assert_eq!(left.len(), 2, "one interface freed whole: {left:#?}");
    assert_eq!(left[1].index, 1);
    assert_eq!(left[1].addresses.len(), 2);
    let n1 = get(&store, "n1").await;
    assert_eq!(n1.spec.ipam.pool.len(), 2, "pre-allocate kept");
    assert!(n1
        .spec
        .ipam
        .pool
        .keys()
        .all(|ip| left[1].addresses.iter().any(|a| a.to_string() == *ip)));
    assert!(n1
        .status
        .ipam
        .release_ips
        .values()
        .all(|state| *state == ReleaseState::Released));
    assert_eq!(
        n1.status.eni.enis.len(),
        2,
        "the freed interface is unpublished"
    );
    assert_eq!(fake.calls(Operation::DeleteInterface), 1);
    assert_eq!(fake.calls(Operation::UnassignIps), 1);
    assert_eq!(metrics.interface_deletion_ops.get(), 1);
    let reasons: Vec<&str> = store
        .announcements()
        .into_iter()
        .map(|(_, a)| a.reason)
        .filter(|r| *r != "InterfaceCreated")
        .collect();
    assert_eq!(reasons, ["InterfaceDeleted", "AddressesReleased"]);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_released_address_stays_out_of_every_pool_for_the_reuse_cooldown() {
    use std::collections::BTreeSet;

    use ipam_engine::{InstanceCache, Maintainer};
    use ipam_fake_cloud::FakeCloud;

    let fake = Arc::new(FakeCloud::standard(1));
    let store = Arc::new(MemoryNodeStore::new());
    store
        .upsert(pod_interfaces_node("n1", "i-0000", 4))
        .unwrap();
    let cache = Arc::new(InstanceCache::with_reuse_cooldown(Duration::from_secs(60)));
    cache.resync_all(fake.as_ref()).await.unwrap();
    let mut settings = settings();
    settings.release_delay = Duration::ZERO;
    let maintainer = Maintainer::new(
        fake.clone(),
        cache,
        store.clone(),
        settings,
        Arc::new(Metrics::new()),
    );
    maintainer.allocate("n1", 0).await.unwrap();
    assert_eq!(get(&store, "n1").await.spec.ipam.pool.len(), 4);

    // The node needs one: three are marked, the agent agrees, they go.
    store
        .agent_update("n1", |n| n.spec.ipam.pre_allocate = Some(1))
        .unwrap();
    let marked = maintainer
        .release("n1", tokio::time::Instant::now())
        .await
        .unwrap()
        .marked;
    assert_eq!(marked.len(), 3);
    store
        .agent_update("n1", |n| {
            for ip in &marked {
                n.status
                    .ipam
                    .release_ips
                    .insert(ip.clone(), ReleaseState::ReadyForRelease);
            }
        })
        .unwrap();
    let released: BTreeSet<String> = maintainer
        .release("n1", tokio::time::Instant::now())
        .await
        .unwrap()
        .released
        .into_iter()
        .collect();
    assert_eq!(released.len(), 3);

    // It needs four again: the cloud hands the released addresses straight
    // back (lowest free first), but no pool may hold them yet.
    store
        .agent_update("n1", |n| n.spec.ipam.pre_allocate = Some(4))
        .unwrap();
    maintainer.allocate("n1", 0).await.unwrap();
    let on_instance: BTreeSet<String> = fake
        .instance("i-0000")
        .unwrap()
        .interfaces
        .into_iter()
        .flat_map(|i| i.addresses)
        .map(|a| a.to_string())
        .collect();
    assert!(
        released.iter().any(|ip| on_instance.contains(ip)),
        "the cloud gave a released address back: {released:?} {on_instance:?}"
    );
    let pool: BTreeSet<String> = get(&store, "n1").await.spec.ipam.pool.into_keys().collect();
    assert_eq!(pool.len(), 4);
    assert!(pool.is_disjoint(&released), "withheld: {pool:?}");

    // After the cooldown they are the node's again.
    tokio::time::advance(Duration::from_secs(61)).await;
    maintainer.allocate("n1", 0).await.unwrap();
    let pool: BTreeSet<String> = get(&store, "n1").await.spec.ipam.pool.into_keys().collect();
    assert!(
        released
            .iter()
            .filter(|ip| on_instance.contains(*ip))
            .all(|ip| pool.contains(ip)),
        "back after the cooldown: {pool:?}"
    );
}
