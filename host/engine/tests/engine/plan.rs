//! `plan_cluster`: the engine's own pass over a dry-run cloud. It changes
//! nothing in the cloud, and what it plans is what a real pass then does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ipam_cloud::{CloudApi, CreateInterfaceRequest, InstanceLimits, Operation, ProviderError, Tag};
use ipam_engine::{plan_cluster, MemoryNodeStore, Metrics, PlanSettings};
use ipam_fake_cloud::FakeCloud;

use crate::support::{get, maintainer, one_instance_cloud, pod_interfaces_node, settings};

/// AWS's t3.small: 3 interfaces of 4 slots, so 3 pod addresses each.
const T3_SMALL: InstanceLimits = InstanceLimits {
    max_interfaces: 3,
    ipv4_per_interface: 4,
    ipv6_per_interface: 4,
    prefix_delegation: false,
};

fn plan_settings() -> PlanSettings {
    PlanSettings {
        maintenance: settings(),
        gc_grace: Duration::from_secs(600),
        reuse_cooldown: Duration::ZERO,
    }
}

fn cilium_tags() -> Vec<Tag> {
    vec![
        Tag {
            key: "io.cilium/cilium-managed".into(),
            value: "true".into(),
        },
        Tag {
            key: "io.cilium/cluster-name".into(),
            value: "prod".into(),
        },
    ]
}

/// Mutating calls per operation, as the fake counted them.
fn mutations(fake: &FakeCloud) -> Vec<(Operation, u64)> {
    Operation::ALL
        .into_iter()
        .filter(|op| op.is_mutating())
        .map(|op| (op, fake.calls(op)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_plan_changes_nothing_and_is_what_the_pass_then_does() {
    let _ = ipam_engine::clock::unix_now();
    let fake = Arc::new(one_instance_cloud("i-small", "t3.small", T3_SMALL));
    let node = pod_interfaces_node("n1", "i-small", 2);
    let cloud: Arc<dyn CloudApi> = fake.clone();

    let plan = plan_cluster(
        cloud.clone(),
        vec![node.clone()],
        &BTreeMap::new(),
        plan_settings(),
    )
    .await
    .unwrap();
    assert_eq!(fake.mutating_calls(), 0, "the plan changed the cloud");
    let planned = &plan.nodes[0];
    assert!(!planned.adopted_as_is());
    assert_eq!((planned.available, planned.used), (0, 0));
    assert_eq!(planned.available_after, 2);
    assert_eq!(planned.pool_added, 2);
    assert!(planned.interfaces_rewritten);
    assert_eq!(
        planned
            .calls
            .iter()
            .map(|c| (c.operation, c.addresses))
            .collect::<Vec<_>>(),
        [(Operation::CreateInterface, 2)],
        "an interface for pods at index 1, with the two addresses"
    );
    assert!(plan.reads.contains_key(&Operation::GetInstances));

    // The same pass for real does what was planned.
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(node).unwrap();
    let real = maintainer(
        cloud.clone(),
        store.clone(),
        settings(),
        Arc::new(Metrics::new()),
    );
    // As `run` starts: a full resync first.
    real.cache().resync_all(cloud.as_ref()).await.unwrap();
    let pass = real.maintain("n1", 0).await.unwrap();
    assert_eq!(
        pass.steps,
        plan.nodes[0]
            .steps
            .iter()
            .map(|s| match s {
                // The plan's interface has a made-up id; the cloud's is real.
                ipam_engine::Step::Created { index, subnet, .. } => ipam_engine::Step::Created {
                    interface: pass_interface(&pass.steps),
                    index: *index,
                    subnet: subnet.clone(),
                },
                other => other.clone(),
            })
            .collect::<Vec<_>>()
    );
    assert_eq!(pass.available, planned.available_after);
    assert_eq!(mutations(&fake), [(Operation::CreateInterface, 1)]);

    // Now satisfied: taken over as it is, with no change at all.
    let served = get(&store, "n1").await;
    let again = plan_cluster(
        cloud.clone(),
        vec![served.clone()],
        &BTreeMap::new(),
        plan_settings(),
    )
    .await
    .unwrap();
    assert!(again.nodes[0].adopted_as_is(), "{:?}", again.nodes[0]);
    assert!(!again.nodes[0].interfaces_rewritten);
    assert_eq!(mutations(&fake), [(Operation::CreateInterface, 1)]);

    // Pods pending: the surge is planned on top of the watermark.
    let pending = BTreeMap::from([("n1".to_string(), 1)]);
    let surge = plan_cluster(
        cloud.clone(),
        vec![served.clone()],
        &pending,
        plan_settings(),
    )
    .await
    .unwrap();
    assert_eq!(surge.nodes[0].pending_pods, 1);
    assert_eq!(
        surge.nodes[0]
            .calls
            .iter()
            .map(|c| (c.operation, c.addresses))
            .collect::<Vec<_>>(),
        [(Operation::AssignIps, 1)]
    );

    // Fewer wanted: the excess is marked once the release delay has passed,
    // and nothing leaves the cloud before the agent answers.
    let mut smaller = served;
    smaller.spec.ipam.pre_allocate = Some(0);
    smaller.spec.ipam.min_allocate = Some(0);
    let shrink = plan_cluster(cloud, vec![smaller], &BTreeMap::new(), plan_settings())
        .await
        .unwrap();
    assert_eq!(shrink.nodes[0].marked.len(), 2, "{:?}", shrink.nodes[0]);
    assert!(shrink.nodes[0].calls.is_empty());
    assert_eq!(mutations(&fake), [(Operation::CreateInterface, 1)]);
}

fn pass_interface(steps: &[ipam_engine::Step]) -> String {
    steps
        .iter()
        .find_map(|s| match s {
            ipam_engine::Step::Created { interface, .. } => Some(interface.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn the_gc_plan_names_leaks_of_ours_and_adopted_ones_and_deletes_none() {
    let _ = ipam_engine::clock::unix_now();
    let fake = Arc::new(FakeCloud::standard(1));
    fake.leak_next_creates(1, ProviderError::Transient("attach failed".into()));
    let request = CreateInterfaceRequest {
        instance_id: "i-0000".into(),
        index: 1,
        subnet_id: "subnet-a".into(),
        security_groups: Vec::new(),
        description: "Cilium-CNI (i-0000)".into(),
        tags: cilium_tags(),
        delete_on_termination: true,
        ipv4_count: 0,
        use_prefixes: false,
    };
    assert!(fake.create_interface(&request).await.is_err(), "leaked");
    assert_eq!(fake.detached().len(), 1);
    let cloud: Arc<dyn CloudApi> = fake.clone();

    let own_only = plan_cluster(cloud.clone(), Vec::new(), &BTreeMap::new(), plan_settings())
        .await
        .unwrap();
    assert!(own_only.gc.can_delete);
    assert!(
        own_only.gc.review.leaked.is_empty(),
        "Cilium's, not adopted"
    );

    let mut adopting = plan_settings();
    adopting.maintenance.adoption_tags = vec![Tag {
        key: "io.cilium/cluster-name".into(),
        value: "prod".into(),
    }];
    let plan = plan_cluster(cloud, Vec::new(), &BTreeMap::new(), adopting)
        .await
        .unwrap();
    let leaked: Vec<&str> = plan
        .gc
        .review
        .leaked
        .iter()
        .map(|i| i.id.as_str())
        .collect();
    assert_eq!(leaked, [fake.detached()[0].id.as_str()]);
    assert_eq!(
        plan.calls().iter().map(|c| c.operation).collect::<Vec<_>>(),
        [Operation::DeleteInterface],
        "the GC's delete is among the plan's changes"
    );
    assert_eq!(fake.mutating_calls(), 1, "only the test's own create");
    assert_eq!(fake.detached().len(), 1, "still there");
}
