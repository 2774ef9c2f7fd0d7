//! Leaked-interface GC through the mock: a create whose attach failed and
//! leaked its interface is cleaned up on the second sighting; another
//! cluster's interfaces and young ones are left alone.

use ipam_tests as common;

use std::sync::Arc;

use common::{engine_settings, maintainer, mock, MOCK_SETTINGS};
use ipam_cloud::{CloudApi, CreateInterfaceRequest, Tag};
use ipam_engine::clock::unix_now;
use ipam_engine::InstanceCache;
use ipam_engine::LeakCollector;
use ipam_engine::MemoryNodeStore;
use ipam_engine::Step;
use ipam_pool::tags::{Ownership, CLUSTER_TAG};

fn cluster(name: &str) -> Vec<Tag> {
    vec![Tag {
        key: CLUSTER_TAG.into(),
        value: name.into(),
    }]
}

#[tokio::test]
async fn leaked_interfaces_are_deleted_on_the_second_round_only_if_ours_and_old() {
    // The first two attaches fail and leave their interface detached.
    let settings = format!("{MOCK_SETTINGS}\nfaults:\n  - {{operation: attach-interface, error: transient, times: 2, leak: true}}\n");
    let cloud = Arc::new(mock(&settings).await);
    let foreign = CreateInterfaceRequest {
        instance_id: "i-0002".into(),
        index: 1,
        subnet_id: "subnet-a1".into(),
        security_groups: Vec::new(),
        description: "another cluster's".into(),
        tags: cluster("other"),
        delete_on_termination: true,
        ipv4_count: 0,
        use_prefixes: false,
    };
    assert!(cloud.create_interface(&foreign).await.is_err());

    let cache = Arc::new(InstanceCache::new());
    cache.resync_all(cloud.as_ref()).await.unwrap();
    let store = Arc::new(MemoryNodeStore::new());
    let mut node = common::node("n3", "i-0003", 3);
    node.spec.eni.first_interface_index = Some(1);
    store.upsert(node).unwrap();
    let engine = maintainer(cloud.clone(), cache, store, engine_settings(false));
    assert!(engine.allocate("n3", 0).await.is_err(), "the attach fails");
    let steps = engine.allocate("n3", 0).await.unwrap();
    assert_eq!(steps.last(), Some(&Step::Satisfied));
    assert_eq!(
        cloud
            .get_detached_interfaces(&cluster("test"))
            .await
            .unwrap()
            .len(),
        1,
        "one leak of ours"
    );

    // Too young for a one-hour grace period.
    let patient = LeakCollector::new(Ownership::own_only("test"), 3600);
    assert_eq!(
        patient
            .round(cloud.as_ref(), unix_now(), &Default::default())
            .await
            .unwrap()
            .suspected
            .len(),
        0
    );

    let collector = LeakCollector::new(Ownership::own_only("test"), 60);
    let later = unix_now() + 120;
    let first = collector
        .round(cloud.as_ref(), later, &Default::default())
        .await
        .unwrap();
    assert_eq!(
        (first.suspected.len(), first.deleted.len()),
        (1, 0),
        "first sighting: suspected only"
    );
    let second = collector
        .round(cloud.as_ref(), later + 60, &Default::default())
        .await
        .unwrap();
    assert_eq!(second.deleted, first.suspected, "second sighting: deleted");
    assert!(cloud
        .get_detached_interfaces(&cluster("test"))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        cloud
            .get_detached_interfaces(&cluster("other"))
            .await
            .unwrap()
            .len(),
        1,
        "not ours: kept"
    );
    let attached = &cloud.get_instances(&["i-0003".into()]).await.unwrap()[0].interfaces;
    assert_eq!(
        attached.len(),
        2,
        "the node's attached interface is untouched"
    );
}
