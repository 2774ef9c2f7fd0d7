//! Pods pending on a node are allocated on top of its watermark in one pass.

use std::sync::Arc;

use ipam_engine::{MemoryNodeStore, Metrics, NodeStore, Step};
use ipam_fake_cloud::FakeCloud;

use crate::support::{get, maintainer, node, settings};

#[tokio::test(start_paused = true)]
async fn pending_pods_are_allocated_in_one_surge() {
    let fake = Arc::new(FakeCloud::standard(2));
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(node("n1", "i-0000", 8)).unwrap();
    store.upsert(node("calm", "i-0001", 8)).unwrap();
    store.set_pending_pods("n1", 15).unwrap();
    let maintainer = maintainer(
        fake.clone(),
        store.clone(),
        settings(),
        Arc::new(Metrics::new()),
    );

    let pass = maintainer
        .maintain("n1", store.pending_pods("n1"))
        .await
        .unwrap();
    // The 15 pods and the 8 to keep free: 9 on the primary interface, then
    // two interfaces with 9 and 5.
    assert_eq!(get(&store, "n1").await.spec.ipam.pool.len(), 23, "{pass:?}");
    assert_eq!(pass.needed, 0);
    let created: Vec<u32> = pass
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Created { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(created, [1, 2]);
    assert_eq!(
        pass.steps.len(),
        4,
        "assign, create, create, satisfied: {pass:?}"
    );
    assert_eq!(pass.steps.last(), Some(&Step::Satisfied));
    assert_eq!(fake.mutating_calls(), 3);
    let counts: Vec<usize> = fake
        .instance("i-0000")
        .unwrap()
        .interfaces
        .iter()
        .map(|i| i.addresses.len())
        .collect();
    assert_eq!(counts, [9, 9, 5]);

    let calm = maintainer
        .maintain("calm", store.pending_pods("calm"))
        .await
        .unwrap();
    assert_eq!(
        calm.available, 8,
        "without pending pods, the watermark only"
    );
    assert_eq!(fake.mutating_calls(), 4);
}
