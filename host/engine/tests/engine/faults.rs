//! What the fake cloud stages mid-run and the wasm mock component takes only
//! from its settings: a device index taken behind the engine's back, and a
//! create that leaks its interface (the mock's attach-interface fault, armed
//! by the test).

use std::sync::Arc;
use std::time::Duration;

use ipam_cloud::{CloudApi, CreateInterfaceRequest, Operation, ProviderError, Tag};
use ipam_engine::clock::unix_now;
use ipam_engine::{LeakCollector, LoopSettings, MemoryNodeStore, Metrics};
use ipam_fake_cloud::FakeCloud;
use ipam_pool::tags::{cluster_tag, Ownership, NODE_TAG};
use tokio::time::{sleep_until, Instant};

use crate::support::{
    config, get, maintainer, pod_interfaces_node, settings, start, until, CLUSTER,
};

fn tag(key: &str, value: &str) -> Tag {
    Tag {
        key: key.into(),
        value: value.into(),
    }
}

/// An interface someone else attaches at `index`, with `tags`.
fn foreign(instance: &str, index: u32, tags: Vec<Tag>) -> CreateInterfaceRequest {
    CreateInterfaceRequest {
        instance_id: instance.into(),
        index,
        subnet_id: "subnet-a".into(),
        security_groups: Vec::new(),
        description: "not the operator's".into(),
        tags,
        delete_on_termination: true,
        ipv4_count: 0,
        use_prefixes: false,
    }
}

#[tokio::test(start_paused = true)]
async fn an_index_conflict_on_create_is_survived_and_the_node_converges() {
    let fake = Arc::new(FakeCloud::standard(1));
    let store = Arc::new(MemoryNodeStore::new());
    let metrics = Arc::new(Metrics::new());
    let running = start(fake.clone(), store.clone(), settings(), config(), metrics);
    running.ready().await;
    // After the engine's first resync, someone else takes index 1; the
    // node excludes interfaces with their tag.
    let someone_else = tag("owner", "someone-else");
    let theirs = fake
        .create_interface(&foreign("i-0000", 1, vec![someone_else.clone()]))
        .await
        .unwrap();
    let mut n1 = pod_interfaces_node("n1", "i-0000", 4);
    n1.spec.eni.exclude_interface_tags = [(someone_else.key, someone_else.value)].into();
    store.upsert(n1).unwrap();

    let took = until(&store, Duration::from_secs(300), |nodes| {
        nodes[0].spec.ipam.pool.len() == 4
    })
    .await;
    let creates = fake.calls(Operation::CreateInterface);
    assert_eq!(creates, 3, "theirs, ours at the stale index 1, ours at 2");
    assert_eq!(
        running.state().failed_passes,
        1,
        "the conflict failed one pass"
    );
    assert!(
        took < Duration::from_secs(10),
        "the conflict refreshed the instance, so the pass after the failure \
         backoff created at index 2, without waiting for the next resync: {took:?}"
    );
    let interfaces = fake.instance("i-0000").unwrap().interfaces;
    assert_eq!(
        interfaces.iter().map(|i| i.index).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(interfaces[1], theirs, "theirs untouched");
    let ours = &interfaces[2];
    assert_eq!(ours.addresses.len(), 4);
    let n1 = get(&store, "n1").await;
    assert!(n1
        .spec
        .ipam
        .pool
        .keys()
        .all(|ip| ours.addresses.iter().any(|a| a.to_string() == *ip)));
    assert!(n1.status.ipam.operator_status.error.is_empty());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_leaked_create_is_collected_two_gc_rounds_past_the_grace_period() {
    let fake = Arc::new(FakeCloud::standard(1));
    fake.leak_next_creates(1, ProviderError::Transient("attach failed".into()));
    let store = Arc::new(MemoryNodeStore::new());
    store
        .upsert(pod_interfaces_node("n1", "i-0000", 4))
        .unwrap();
    let metrics = Arc::new(Metrics::new());
    // Rounds at 300, 600 and 900 s: too young, then suspected, then deleted.
    let config = LoopSettings {
        gc_interval: Duration::from_secs(300),
        gc_grace: Duration::from_secs(450),
        ..config()
    };
    let t0 = Instant::now();
    let running = start(
        fake.clone(),
        store.clone(),
        settings(),
        config,
        metrics.clone(),
    );
    running.ready().await;
    until(&store, Duration::from_secs(60), |nodes| {
        nodes[0].spec.ipam.pool.len() == 4
    })
    .await;
    let leaked = fake.detached();
    assert_eq!(leaked.len(), 1, "the failed create left its interface");
    assert!(leaked[0].tags.contains(&cluster_tag(CLUSTER)));
    assert!(leaked[0].tags.contains(&tag(NODE_TAG, "n1")));
    assert_eq!(
        fake.calls(Operation::CreateInterface),
        2,
        "failed, then retried"
    );
    assert_eq!(fake.instance("i-0000").unwrap().interfaces.len(), 2);

    sleep_until(t0 + Duration::from_secs(610)).await;
    assert_eq!(fake.calls(Operation::GetDetachedInterfaces), 2);
    assert_eq!(fake.detached(), leaked, "suspected, not yet deleted");
    assert_eq!(fake.calls(Operation::DeleteInterface), 0);

    sleep_until(t0 + Duration::from_secs(910)).await;
    assert_eq!(fake.calls(Operation::GetDetachedInterfaces), 3);
    assert!(fake.detached().is_empty(), "deleted on the second sighting");
    assert_eq!(fake.calls(Operation::DeleteInterface), 1);
    assert_eq!(metrics.interface_deletion_ops.get(), 1);
    assert_eq!(
        fake.instance("i-0000").unwrap().interfaces.len(),
        2,
        "the node's own interface stays"
    );
    assert_eq!(get(&store, "n1").await.spec.ipam.pool.len(), 4);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_collector_spares_young_and_foreign_interfaces() {
    let fake = Arc::new(FakeCloud::standard(1));
    fake.leak_next_creates(2, ProviderError::Transient("attach failed".into()));
    let other = tag(ipam_pool::tags::CLUSTER_TAG, "other");
    assert!(fake
        .create_interface(&foreign("i-0000", 1, vec![other]))
        .await
        .is_err());
    let store = Arc::new(MemoryNodeStore::new());
    store
        .upsert(pod_interfaces_node("n1", "i-0000", 3))
        .unwrap();
    let maintainer = maintainer(fake.clone(), store, settings(), Arc::new(Metrics::new()));
    assert!(
        maintainer.allocate("n1", 0).await.is_err(),
        "the create leaked"
    );
    maintainer.allocate("n1", 0).await.unwrap();
    assert_eq!(fake.detached().len(), 2, "theirs and ours");

    let patient = LeakCollector::new(Ownership::own_only(CLUSTER), 3600);
    assert_eq!(
        patient
            .round(fake.as_ref(), unix_now(), &Default::default())
            .await
            .unwrap()
            .suspected
            .len(),
        0,
        "too young"
    );
    let collector = LeakCollector::new(Ownership::own_only(CLUSTER), 60);
    let later = unix_now() + 120;
    let first = collector
        .round(fake.as_ref(), later, &Default::default())
        .await
        .unwrap();
    assert_eq!(
        (first.suspected.len(), first.deleted.len()),
        (1, 0),
        "first sighting: suspected"
    );
    let second = collector
        .round(fake.as_ref(), later + 60, &Default::default())
        .await
        .unwrap();
    assert_eq!(second.deleted, first.suspected, "second sighting: deleted");
    let left = fake.detached();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].tags[0].value, "other", "not ours: kept");
    assert_eq!(fake.instance("i-0000").unwrap().interfaces.len(), 2);
}

/// A provider whose detached listing lies: it lists one of ours that is
/// attached (and that the cache holds attached) with no instance, and one
/// that is not ours with nothing to say so. The collector deletes neither.
#[tokio::test(start_paused = true)]
async fn a_lying_detached_listing_never_gets_an_attached_or_foreign_interface_deleted() {
    use crate::steered::SteeredCloud;

    let fake = Arc::new(FakeCloud::standard(1));
    let cloud = Arc::new(SteeredCloud::new(fake.clone(), Duration::ZERO));
    let store = Arc::new(MemoryNodeStore::new());
    store
        .upsert(pod_interfaces_node("n1", "i-0000", 3))
        .unwrap();
    let maintainer = maintainer(cloud.clone(), store, settings(), Arc::new(Metrics::new()));
    maintainer.allocate("n1", 0).await.unwrap();
    let ours = fake
        .instance("i-0000")
        .unwrap()
        .interfaces
        .into_iter()
        .find(|i| i.index == 1)
        .expect("an interface of ours, attached");
    assert!(ours.tags.contains(&cluster_tag(CLUSTER)));
    let mut attached_lie = ours.clone();
    attached_lie.instance_id = None;
    let mut foreign_lie = ours.clone();
    foreign_lie.id = "eni-not-ours".into();
    foreign_lie.instance_id = None;
    foreign_lie
        .tags
        .retain(|t| t.key != ipam_pool::tags::CLUSTER_TAG);
    cloud.lie_in_detached_listings(vec![attached_lie, foreign_lie]);
    let parts = maintainer.parts();
    parts.cache.resync_all(parts.cloud.as_ref()).await.unwrap();

    let collector = LeakCollector::new(Ownership::own_only(CLUSTER), 0);
    let attached = parts.cache.attached_interfaces();
    assert!(attached.contains(&ours.id));
    let later = unix_now() + 3_600;
    for round in 0..3 {
        let done = collector
            .round(cloud.as_ref(), later + round, &attached)
            .await
            .unwrap();
        assert!(
            done.suspected.is_empty() && done.deleted.is_empty(),
            "round {round}: {done:?}"
        );
    }
    assert_eq!(fake.calls(Operation::DeleteInterface), 0);
    assert!(fake
        .instance("i-0000")
        .unwrap()
        .interfaces
        .iter()
        .any(|i| i.id == ours.id));
}
