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
    let waits = metrics
        .encode()
        .lines()
        .find(|l| {
            l.starts_with("cilium_operator_ipam_api_rate_limit_duration_seconds_count")
                && l.contains("operation=\"create-interface\"")
        })
        .map(|l| l.rsplit(' ').next().unwrap_or_default().to_string());
    assert_eq!(
        waits.as_deref(),
        Some("22"),
        "every create's wait for the bucket is observed"
    );
    running.stop().await;
}

/// Every operation goes through to the cloud and its answer comes back as
/// the cloud gave it.
#[tokio::test(start_paused = true)]
async fn every_operation_reaches_the_cloud_through_limited_cloud() {
    use ipam_cloud::{CloudApi, CreateInterfaceRequest, IpRequest, Tag};

    let fake = Arc::new(FakeCloud::standard(1));
    let metrics = Arc::new(Metrics::new());
    let cloud = limited(&fake, tight_mutations(), &metrics);
    let instance = standard_instance(0);
    assert_eq!(
        cloud.get_vpcs().await.unwrap(),
        fake.get_vpcs().await.unwrap()
    );
    assert_eq!(
        cloud.get_subnets().await.unwrap(),
        fake.get_subnets().await.unwrap()
    );
    let groups = cloud.get_security_groups().await.unwrap();
    assert!(!groups.is_empty());
    assert_eq!(groups, fake.get_security_groups().await.unwrap());
    assert_eq!(
        cloud.get_instances(&[]).await.unwrap(),
        fake.get_instances(&[]).await.unwrap()
    );
    assert_eq!(
        cloud.get_instance_limits("m5.large").await.unwrap(),
        fake.get_instance_limits("m5.large").await.unwrap()
    );
    let tags = vec![Tag {
        key: "ipam-operator/cluster".into(),
        value: "test".into(),
    }];
    // A create that leaks: the detached interface is what the listing finds.
    fake.leak_next_creates(1, ProviderError::Transient("attach failed".into()));
    let request = CreateInterfaceRequest {
        instance_id: instance.clone(),
        index: 1,
        subnet_id: "subnet-a".into(),
        security_groups: Vec::new(),
        description: String::new(),
        tags: tags.clone(),
        delete_on_termination: true,
        ipv4_count: 0,
        use_prefixes: false,
    };
    cloud.create_interface(&request).await.unwrap_err();
    let detached = cloud.get_detached_interfaces(&tags).await.unwrap();
    assert_eq!(detached.len(), 1);
    assert_eq!(detached, fake.detached());
    cloud.delete_interface(&detached[0].id).await.unwrap();
    assert!(fake.detached().is_empty(), "deleted in the cloud");

    let created = cloud.create_interface(&request).await.unwrap();
    let assigned = cloud
        .assign_ips(&created.id, IpRequest::Addresses(2))
        .await
        .unwrap();
    assert_eq!(assigned.addresses.len(), 2);
    cloud
        .unassign_ips(&created.id, &assigned.addresses[..1], &[])
        .await
        .unwrap();
    let on_cloud = fake.instance(&instance).unwrap().interfaces[1]
        .addresses
        .clone();
    assert_eq!(on_cloud, assigned.addresses[1..], "unassigned in the cloud");
}
