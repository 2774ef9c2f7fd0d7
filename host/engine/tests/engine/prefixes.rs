//! Prefix delegation's fallback: when the subnet has no free /28, a step
//! asks for /32 addresses instead, and only for that error.

use std::sync::Arc;

use ipam_cloud::{Operation, ProviderError};
use ipam_engine::{MaintainError, Maintainer, MemoryNodeStore, Metrics, Step};
use ipam_fake_cloud::FakeCloud;

use crate::support::{maintainer, node, settings};

const NODE: &str = "n1";

async fn prefix_maintainer(fake: &Arc<FakeCloud>, pre: u32) -> Maintainer {
    let _ = ipam_engine::clock::unix_now();
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(node(NODE, "i-0000", pre)).unwrap();
    let mut settings = settings();
    settings.prefix_delegation = true;
    let m = maintainer(fake.clone(), store, settings, Arc::new(Metrics::new()));
    m.cache().resync_all(fake.as_ref()).await.unwrap();
    m
}

fn no_free_prefix() -> ProviderError {
    ProviderError::InsufficientPrefixes("no free /28 in subnet-a".into())
}

#[tokio::test(start_paused = true)]
async fn an_assign_without_a_free_prefix_falls_back_to_addresses() {
    let fake = Arc::new(FakeCloud::standard(1));
    let m = prefix_maintainer(&fake, 2).await;
    fake.fail_next(Operation::AssignIps, 1, no_free_prefix());
    let steps = m.allocate(NODE, 0).await.unwrap();
    let Step::Assigned {
        addresses,
        prefixes,
        ..
    } = &steps[0]
    else {
        panic!("assigned on the primary interface: {steps:?}");
    };
    assert_eq!(*prefixes, 0, "{steps:?}");
    assert!(*addresses >= 2, "{steps:?}");
    assert_eq!(fake.calls(Operation::AssignIps), 2, "the /28, then /32s");
    let primary = &fake.instance("i-0000").unwrap().interfaces[0];
    assert!(primary.prefixes.is_empty());
    assert_eq!(primary.addresses.len(), *addresses);
}

#[tokio::test(start_paused = true)]
async fn a_create_without_a_free_prefix_falls_back_to_addresses() {
    let fake = Arc::new(FakeCloud::standard(1));
    // The primary interface's nine prefix slots hold 144: the node needs a
    // second interface.
    let m = prefix_maintainer(&fake, 150).await;
    fake.fail_next(Operation::CreateInterface, 1, no_free_prefix());
    let steps = m.allocate(NODE, 0).await.unwrap();
    assert!(
        steps
            .iter()
            .any(|s| matches!(s, Step::Created { index: 1, .. })),
        "{steps:?}"
    );
    let created = &fake.instance("i-0000").unwrap().interfaces[1];
    assert!(created.prefixes.is_empty(), "/32s only: {created:?}");
    assert!(!created.addresses.is_empty(), "{created:?}");
}
#[tokio::test(start_paused = true)]
async fn other_errors_are_not_answered_with_addresses() {
    let fake = Arc::new(FakeCloud::standard(1));
    let m = prefix_maintainer(&fake, 2).await;
    fake.fail_next(
        Operation::AssignIps,
        1,
        ProviderError::Transient("try again".into()),
    );
    let error = m.allocate(NODE, 0).await.unwrap_err();
    assert!(matches!(error, MaintainError::Cloud(_)), "{error}");
    assert_eq!(fake.calls(Operation::AssignIps), 1, "no fallback call");

    let fake = Arc::new(FakeCloud::standard(1));
    let m = prefix_maintainer(&fake, 150).await;
    // The assign filling the primary goes through; the create fails.
    fake.fail_next(
        Operation::CreateInterface,
        1,
        ProviderError::Transient("try again".into()),
    );
    let lists = fake.calls(Operation::GetInstances);
    m.allocate(NODE, 0).await.unwrap_err();
    assert_eq!(
        fake.calls(Operation::CreateInterface),
        1,
        "no fallback call"
    );
    assert_eq!(
        fake.calls(Operation::GetInstances),
        lists,
        "a transient failure is no sign the cached instance is stale"
    );
}
