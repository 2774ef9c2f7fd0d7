//! The release handshake end to end: excess addresses are marked after the
//! delay, only those the agent declares ready are unassigned, and marks are
//! cancelled when demand comes back.

use ipam_tests as common;

use std::time::Duration;

use std::sync::Arc;

use common::{engine_settings, maintainer, mock, MOCK_SETTINGS};
use ipam_ciliumnode::ReleaseState;
use ipam_cloud::CloudApi;
use ipam_engine::InstanceCache;
use ipam_engine::Maintainer;
use ipam_engine::{MemoryNodeStore, NodeStore};
use tokio::time::Instant;

const DELAY: Duration = Duration::from_secs(30);

/// A node on i-0001 with 8 addresses allocated, then told it needs only 2.
async fn over_allocated() -> (
    Arc<ipam_provider_runtime::WasmProvider>,
    Maintainer,
    Arc<MemoryNodeStore>,
) {
    let cloud = Arc::new(mock(MOCK_SETTINGS).await);
    let cache = Arc::new(InstanceCache::new());
    cache.resync_all(cloud.as_ref()).await.unwrap();
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(common::node("n1", "i-0001", 8)).unwrap();
    let mut settings = engine_settings(false);
    settings.release_delay = DELAY;
    let engine = maintainer(cloud.clone(), cache, store.clone(), settings);
    engine.allocate("n1", 0).await.unwrap();
    store
        .agent_update("n1", |n| n.spec.ipam.pre_allocate = Some(2))
        .unwrap();
    (cloud, engine, store)
}

async fn secondaries(cloud: &dyn CloudApi) -> usize {
    cloud.get_instances(&["i-0001".into()]).await.unwrap()[0].interfaces[0]
        .addresses
        .len()
}

#[tokio::test]
async fn only_addresses_the_agent_declared_ready_are_released() {
    let (cloud, engine, store) = over_allocated().await;
    let t0 = Instant::now();
    let round = engine.release("n1", t0).await.unwrap();
    assert!(
        round.marked.is_empty(),
        "nothing is marked before the delay"
    );
    let round = engine.release("n1", t0 + DELAY).await.unwrap();
    assert_eq!(
        round.marked.len(),
        6,
        "8 available, 0 used, pre-allocate 2: 6 excess"
    );
    let marked = store
        .get("n1")
        .await
        .unwrap()
        .unwrap()
        .status
        .ipam
        .release_ips;
    assert!(
        marked
            .values()
            .all(|s| *s == ReleaseState::MarkedForRelease)
            && marked.len() == 6
    );

    // The agent frees four and refuses two.
    let ips: Vec<String> = marked.keys().cloned().collect();
    let (ready, refused) = ips.split_at(4);
    store
        .agent_update("n1", |n| {
            for ip in ready {
                n.status
                    .ipam
                    .release_ips
                    .insert(ip.clone(), ReleaseState::ReadyForRelease);
            }
            for ip in refused {
                n.status
                    .ipam
                    .release_ips
                    .insert(ip.clone(), ReleaseState::DoNotRelease);
            }
        })
        .unwrap();
    let round = engine.release("n1", t0 + DELAY * 2).await.unwrap();
    assert_eq!(round.released.len(), 4);
    assert_eq!(
        secondaries(cloud.as_ref()).await,
        4,
        "only the four ready addresses left the cloud"
    );
    let node = store.get("n1").await.unwrap().unwrap();
    for ip in ready {
        assert_eq!(node.status.ipam.release_ips[ip], ReleaseState::Released);
        assert!(
            !node.spec.ipam.pool.contains_key(ip),
            "released addresses leave the pool"
        );
    }
    for ip in refused {
        assert!(
            !node.status.ipam.release_ips.contains_key(ip),
            "refusals are cleared"
        );
        assert!(
            node.spec.ipam.pool.contains_key(ip),
            "refused addresses stay"
        );
    }
}

#[tokio::test]
async fn marks_are_cancelled_when_demand_comes_back() {
    let (cloud, engine, store) = over_allocated().await;
    let t0 = Instant::now();
    engine.release("n1", t0).await.unwrap();
    let round = engine.release("n1", t0 + DELAY).await.unwrap();
    assert_eq!(round.marked.len(), 6);
    // One is ready already, then pods come back: pre-allocate 8 again.
    let first = round.marked[0].clone();
    store
        .agent_update("n1", |n| {
            n.status
                .ipam
                .release_ips
                .insert(first.clone(), ReleaseState::ReadyForRelease);
            n.spec.ipam.pre_allocate = Some(8);
        })
        .unwrap();
    let round = engine.release("n1", t0 + DELAY * 2).await.unwrap();
    assert_eq!(
        round.unmarked.len(),
        6,
        "every mark is cancelled, the ready one too"
    );
    assert!(round.released.is_empty());
    assert!(store
        .get("n1")
        .await
        .unwrap()
        .unwrap()
        .status
        .ipam
        .release_ips
        .is_empty());
    assert_eq!(
        secondaries(cloud.as_ref()).await,
        8,
        "nothing left the cloud"
    );
}
