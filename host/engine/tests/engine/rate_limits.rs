//! `LimitedCloud` over the fake: a tight mutation bucket spaces the creates
//! out, throttled calls are retried, and every node still gets exactly the
//! calls it needs.

use std::sync::Arc;
use std::time::Duration;

use ipam_cloud::rate::{BucketConfig, RateLimits, RetryPolicy};
use ipam_cloud::{Operation, ProviderError};
use ipam_engine::{MemoryNodeStore, Metrics};
use ipam_fake_cloud::{standard_instance, FakeCloud};

use crate::support::{config, limited, pod_interfaces_node, settings, start, until};

const NODES: usize = 10;

/// Reads from a roomy bucket; every mutation takes one token of a bucket of
/// 4 refilled at one every 2 s.
fn tight_mutations() -> RateLimits {
    let mut limits = RateLimits::new([
        (
            "describe",
            BucketConfig {
                burst: 100.0,
                per_second: 20.0,
            },
        ),
        (
            "mutate",
            BucketConfig {
                burst: 4.0,
                per_second: 0.5,
            },
        ),
    ])
    .with_retry(RetryPolicy {
        max_attempts: 4,
        base: Duration::from_millis(200),
        cap: Duration::from_secs(2),
    });
    for operation in Operation::ALL {
        let bucket = if operation.is_mutating() {
            "mutate"
        } else {
            "describe"
        };
        limits = limits.with_cost(operation, &[(bucket, 1.0)]).unwrap();
    }
    limits
}

#[tokio::test(start_paused = true)]
async fn limited_cloud_keeps_mutating_calls_per_node_as_expected() {
    let fake = Arc::new(FakeCloud::standard(NODES));
    // The cloud throttles two creates: retried, not duplicated.
    fake.fail_next(
        Operation::CreateInterface,
        2,
        ProviderError::Throttled(Duration::ZERO),
    );
    let store = Arc::new(MemoryNodeStore::new());
    for n in 0..NODES {
        // 12 on pod interfaces of 9 slots: two creates, of 9 and 3.
        store
            .upsert(pod_interfaces_node(
                &format!("n{n}"),
                &standard_instance(n),
                12,
            ))
            .unwrap();
    }
    let metrics = Arc::new(Metrics::new());
    let cloud = limited(&fake, tight_mutations(), &metrics);
    let t0 = tokio::time::Instant::now();
    let running = start(cloud, store.clone(), settings(), config(), metrics.clone());
    running.ready().await;
    until(&store, Duration::from_secs(300), |nodes| {
        nodes.iter().all(|n| n.spec.ipam.pool.len() == 12)
    })
    .await;
    let took = t0.elapsed();

    for n in 0..NODES {
        let interfaces = fake.instance(&standard_instance(n)).unwrap().interfaces;
        let counts: Vec<usize> = interfaces.iter().map(|i| i.addresses.len()).collect();
        assert_eq!(counts, [0, 9, 3], "node {n}");
    }
    assert_eq!(fake.calls(Operation::CreateInterface), 2 * NODES as u64 + 2);
    assert_eq!(
        fake.mutating_calls(),
        2 * NODES as u64 + 2,
        "creates only, nothing assigned"
    );
    assert_eq!(
        metrics.api_calls_with(Operation::CreateInterface, "ok"),
        2 * NODES as u64
    );
    assert_eq!(
        metrics.api_calls_with(Operation::CreateInterface, "throttled"),
        2
    );
    // 22 mutations, 4 at once and then one per 2 s: at least 36 s.
    assert!(took >= Duration::from_secs(36), "{took:?}");
    assert!(took <= Duration::from_secs(45), "{took:?}");
    assert_eq!(
        running.state().failed_passes,
        0,
        "throttling was absorbed by retries"
    );
    running.stop().await;
}
