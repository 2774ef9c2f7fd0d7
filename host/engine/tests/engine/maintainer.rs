//! One node's passes through the [`Maintainer`] without the loop, on the
//! paused clock: what a pass reports (release still pending or not), what it
//! writes on the node at once, what it announces, and what forgetting a
//! node resets.

use std::sync::Arc;
use std::time::Duration;

use ipam_ciliumnode::ReleaseState;
use ipam_engine::{
    Maintainer, MaintenanceSettings, MemoryNodeStore, Metrics, NodePass, NodeStore, Step,
};
use ipam_fake_cloud::FakeCloud;

use crate::agents::tick;
use crate::support::{
    azure_node, azure_settings, get, maintainer, node, one_instance_cloud, settings, TINY,
};

const NODE: &str = "n1";

struct Setup {
    store: Arc<MemoryNodeStore>,
    metrics: Arc<Metrics>,
    maintainer: Maintainer,
}

fn setup(fake: FakeCloud, node: ipam_ciliumnode::CiliumNode) -> Setup {
    setup_with(fake, node, settings())
}

fn setup_with(
    fake: FakeCloud,
    node: ipam_ciliumnode::CiliumNode,
    settings: MaintenanceSettings,
) -> Setup {
    // Interface ages are measured on the engine's clock; read it first (see
    // support::start).
    let _ = ipam_engine::clock::unix_now();
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(node).unwrap();
    let metrics = Arc::new(Metrics::new());
    let maintainer = maintainer(Arc::new(fake), store.clone(), settings, metrics.clone());
    Setup {
        store,
        metrics,
        maintainer,
    }
}

impl Setup {
    async fn resync(&self) {
        let parts = self.maintainer.parts();
        parts.cache.resync_all(parts.cloud.as_ref()).await.unwrap();
    }

    async fn pass(&self) -> NodePass {
        let pending = self.store.pending_pods(NODE);
        self.maintainer.maintain(NODE, pending).await.unwrap()
    }

    /// Eight pods come and go, and the excess waits out the delay: the pass
    /// that marks it.
    async fn excess_marked(&self) -> NodePass {
        self.resync().await;
        tick(&self.store, 8).await;
        self.pass().await;
        tick(&self.store, 0).await;
        self.pass().await;
        tokio::time::advance(Duration::from_secs(30)).await;
        self.pass().await
    }
}

/// Pods on the node come and go; the excess waits out the 30 s delay, is
/// marked, answered by the agent and released.
#[tokio::test(start_paused = true)]
async fn a_pass_reports_release_pending_until_the_excess_has_left() {
    let s = setup(FakeCloud::standard(1), node(NODE, "i-0000", 2));
    s.resync().await;
    let first = s.pass().await;
    assert!(!first.release_pending, "nothing in excess: {first:?}");
    assert_eq!(first.needed, 0);

    tick(&s.store, 8).await;
    let grown = s.pass().await;
    assert!(grown.available >= 10, "{grown:?}");
    assert!(
        !grown.release_pending,
        "{grown:?} {:?}",
        get(&s.store, NODE).await.status.ipam
    );

    // The pods go: the excess is first seen, and waits out the delay with
    // nothing marked yet.
    tick(&s.store, 0).await;
    let seen = s.pass().await;
    assert!(seen.release.marked.is_empty(), "{seen:?}");
    assert!(seen.release_pending, "the delay is running");
    assert!(get(&s.store, NODE).await.status.ipam.release_ips.is_empty());

    tokio::time::advance(Duration::from_secs(30)).await;
    let marked = s.pass().await;
    assert!(!marked.release.marked.is_empty(), "{marked:?}");
    assert!(marked.release_pending, "marks wait for the agent");

    tick(&s.store, 0).await;
    let released = s.pass().await;
    assert_eq!(
        released.release.released.len(),
        marked.release.marked.len(),
        "{released:?}"
    );
    let node = get(&s.store, NODE).await;
    for ip in &released.release.released {
        assert!(
            !node.spec.ipam.pool.contains_key(ip),
            "{ip} left the published pool in the same pass"
        );
        assert_eq!(
            node.status.ipam.release_ips.get(ip),
            Some(&ReleaseState::Released)
        );
    }

    // The rest of the excess goes the same way, an interface's worth a
    // round. The round that releases the last of it leaves only `released`
    // entries (the agent has not dropped them yet), and nothing is pending.
    let mut last = released;
    for _ in 0..10 {
        if last.available == 2 {
            break;
        }
        tokio::time::advance(Duration::from_secs(30)).await;
        s.pass().await;
        tick(&s.store, 0).await;
        last = s.pass().await;
    }
    assert_eq!(last.available, 2, "down to pre-allocate: {last:?}");
    let metrics = s.metrics.encode();
    assert!(
        metrics.lines().any(|l| l.starts_with(
            "cilium_operator_ipam_release_duration_seconds_count{type=\"releaseIP\",status=\"success\",subnet_id=\"subnet-a\"}"
        )),
        "each unassign's duration is observed: {metrics}"
    );
    let left = get(&s.store, NODE).await.status.ipam.release_ips;
    assert!(!left.is_empty());
    assert!(left.values().all(|state| *state == ReleaseState::Released));
    assert!(!last.release_pending, "{last:?} {left:?}");
}

#[tokio::test(start_paused = true)]
async fn a_mark_no_longer_in_excess_is_taken_back() {
    let s = setup(FakeCloud::standard(1), node(NODE, "i-0000", 2));
    let marked = s.excess_marked().await.release.marked;
    assert!(!marked.is_empty());

    // The scheduler sends pods before the agent answered: the marked
    // addresses are needed again.
    s.store
        .agent_update(NODE, |n| {
            for ip in &marked {
                n.status.ipam.used.insert(ip.clone(), Default::default());
            }
        })
        .unwrap();
    let pass = s.pass().await;
    assert_eq!(pass.release.unmarked, marked);
    let node = get(&s.store, NODE).await;
    assert!(
        marked
            .iter()
            .all(|ip| !node.status.ipam.release_ips.contains_key(ip)),
        "{:?}",
        node.status.ipam.release_ips
    );
}

#[tokio::test(start_paused = true)]
async fn a_forgotten_node_starts_its_release_delay_and_figures_afresh() {
    let s = setup(FakeCloud::standard(1), node(NODE, "i-0000", 2));
    s.resync().await;
    tick(&s.store, 8).await;
    s.pass().await;
    tick(&s.store, 0).await;
    s.pass().await;
    assert!(s.metrics.encode().contains("target_node=\"n1\""));

    tokio::time::advance(Duration::from_secs(20)).await;
    s.maintainer.forget(NODE);
    assert!(
        !s.metrics.encode().contains("target_node=\"n1\""),
        "its gauges went with it"
    );
    tokio::time::advance(Duration::from_secs(15)).await;
    let again = s.pass().await;
    assert!(
        again.release.marked.is_empty(),
        "35 s after the excess was first seen, but 0 s after the node came back: {again:?}"
    );
    tokio::time::advance(Duration::from_secs(30)).await;
    assert!(!s.pass().await.release.marked.is_empty());
}

#[tokio::test(start_paused = true)]
async fn subnets_free_counts_are_recorded_from_the_cache() {
    let fake = FakeCloud::standard(1);
    let free = fake.subnet("subnet-a").unwrap().available_addresses;
    let s = setup(fake, node(NODE, "i-0000", 2));
    s.resync().await;
    s.maintainer.record_subnets();
    let metrics = s.metrics.encode();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("cilium_operator_ipam_available_ips_per_subnet{"))
        .unwrap_or_else(|| panic!("no per-subnet line in {metrics}"));
    assert!(line.contains("subnet_id=\"subnet-a\""), "{line}");
    assert!(line.contains("availability_zone=\"zone-a\""), "{line}");
    assert!(line.ends_with(&format!(" {free}")), "{line}");
}

#[tokio::test(start_paused = true)]
async fn a_blocked_node_says_why_once_and_creations_are_announced() {
    let s = setup(
        one_instance_cloud("i-tiny", "t3.nano", TINY),
        node(NODE, "i-tiny", 8),
    );
    s.resync().await;
    let first = s.pass().await;
    let Some(Step::Blocked(reason)) = first.steps.last() else {
        panic!("blocked at capacity: {first:?}");
    };
    let created = first
        .steps
        .iter()
        .find_map(|step| match step {
            Step::Created {
                interface, index, ..
            } => Some((interface.clone(), *index)),
            _ => None,
        })
        .expect("an interface was created");
    let node = get(&s.store, NODE).await;
    assert_eq!(&node.status.ipam.operator_status.error, reason);

    let announced = |reason: &str| {
        s.store
            .announcements()
            .into_iter()
            .filter(|(name, a)| name == NODE && a.reason == reason)
            .collect::<Vec<_>>()
    };
    let creations = announced("InterfaceCreated");
    assert_eq!(creations.len(), 1, "{creations:?}");
    assert!(!creations[0].1.warning);
    assert!(creations[0]
        .1
        .note
        .contains(&format!("{} at index {}", created.0, created.1)));
    let blocked = announced("CannotAllocate");
    assert_eq!(blocked.len(), 1);
    assert!(blocked[0].1.warning);
    assert_eq!(&blocked[0].1.note, reason);

    let second = s.pass().await;
    assert_eq!(second.steps, [Step::Blocked(reason.clone())]);
    assert_eq!(
        announced("CannotAllocate").len(),
        1,
        "the same reason is not announced again"
    );

    // Fewer addresses wanted: satisfied, and the error is cleared.
    s.store
        .agent_update(NODE, |n| n.spec.ipam.pre_allocate = Some(1))
        .unwrap();
    let relieved = s.pass().await;
    assert_eq!(relieved.steps, [Step::Satisfied]);
    assert_eq!(
        get(&s.store, NODE).await.status.ipam.operator_status.error,
        ""
    );
}

#[tokio::test(start_paused = true)]
async fn in_azure_mode_a_go_written_node_gets_its_interfaces_in_status_azure() {
    // Cilium's Go agent writes "eni": {} on an Azure node too.
    let s = setup_with(
        FakeCloud::standard(1),
        azure_node(NODE, "i-0000", 2),
        azure_settings(),
    );
    s.resync().await;
    s.pass().await;
    let node = s.store.get(NODE).await.unwrap().unwrap();
    assert!(node.status.eni.enis.is_empty(), "{:?}", node.status.eni);
    let interfaces = &node.status.azure.interfaces;
    assert!(!interfaces.is_empty());
    let published: usize = interfaces.iter().map(|i| i.addresses.len()).sum();
    assert!(published >= node.spec.ipam.pool.len(), "{interfaces:?}");
}

#[tokio::test(start_paused = true)]
async fn in_eni_mode_a_go_written_node_gets_its_interfaces_in_status_eni() {
    // Cilium's Go agent writes "azure": {} and "alibaba-cloud": {} on an ENI
    // node: cilium-agent finds every pool entry's interface in
    // status.eni.enis, or hands out no address.
    let registered = node(NODE, "i-0000", 2);
    let s = setup(FakeCloud::standard(1), registered);
    s.resync().await;
    s.pass().await;
    let node = s.store.get(NODE).await.unwrap().unwrap();
    assert!(
        node.status.azure.interfaces.is_empty(),
        "{:?}",
        node.status.azure
    );
    assert!(!node.spec.ipam.pool.is_empty());
    for (ip, entry) in &node.spec.ipam.pool {
        let resource = entry.resource.as_deref().unwrap_or_default();
        assert!(
            node.status.eni.enis.contains_key(resource),
            "{ip}: interface {resource} is not in status.eni.enis"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_released_address_the_cloud_hands_back_is_free_for_pods_again() {
    let s = setup(FakeCloud::standard(1), node(NODE, "i-0000", 2));
    s.excess_marked().await;
    tick(&s.store, 0).await;
    let released = s.pass().await.release.released;
    assert!(!released.is_empty());

    // Before the agent drops the `released` entries, the node wants more
    // and the cloud hands the same addresses out again (the fake gives the
    // lowest free ones).
    s.store
        .agent_update(NODE, |n| n.spec.ipam.pre_allocate = Some(12))
        .unwrap();
    s.pass().await;
    let node = get(&s.store, NODE).await;
    let back: Vec<&String> = released
        .iter()
        .filter(|ip| node.spec.ipam.pool.contains_key(*ip))
        .collect();
    assert!(!back.is_empty(), "the cloud handed one back");
    for ip in back {
        assert!(
            !node.status.ipam.release_ips.contains_key(ip),
            "{ip} is in the pool again: its finished release must not keep pods off it"
        );
    }
}
