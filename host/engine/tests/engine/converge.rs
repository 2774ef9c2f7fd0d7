//! Nodes converge through the running loop, publish their pool and
//! interfaces, show in the metrics; a restart over satisfied nodes changes
//! nothing in the cloud.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ipam_ciliumnode::CiliumNode;
use ipam_cloud::Operation;
use ipam_engine::metrics::SubnetLabel;
use ipam_engine::{MemoryNodeStore, Metrics, NodeStore};
use ipam_fake_cloud::{standard_instance, FakeCloud};
use tokio::time::{sleep_until, Instant};

use crate::agents::settle;
use crate::support::{config, get, limited, node, settings, start, unfelt_limits};

#[tokio::test(start_paused = true)]
async fn nodes_converge_publish_their_interfaces_and_show_in_metrics() {
    let fake = Arc::new(FakeCloud::standard(2));
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(node("n1", "i-0000", 8)).unwrap();
    store.upsert(node("n2", "i-0001", 12)).unwrap();
    let metrics = Arc::new(Metrics::new());
    let cloud = limited(&fake, unfelt_limits(), &metrics);
    let running = start(cloud, store.clone(), settings(), config(), metrics.clone());
    running.ready().await;
    settle(&store, 3, Duration::from_secs(300)).await;

    for (name, pre, interfaces) in [("n1", 8, 2), ("n2", 12, 2)] {
        let n = get(&store, name).await;
        assert_eq!(n.status.ipam.used.len(), 3, "{name}: three pods run");
        assert_eq!(
            n.spec.ipam.pool.len() - 3,
            pre,
            "{name}: pre-allocate kept free"
        );
        let enis = &n.status.eni.enis;
        assert_eq!(enis.len(), interfaces, "{name}: {enis:#?}");
        let instance = fake.instance(&n.spec.instance_id).unwrap();
        for eni in &instance.interfaces {
            let published = &enis[&eni.id];
            assert_eq!(published.number, eni.index);
            assert_eq!(published.subnet.cidr, "10.0.0.0/16");
            assert_eq!(published.vpc.primary_cidr, "10.0.0.0/8");
            assert_eq!(published.ip, eni.primary_ip.to_string(), "the primary");
            let secondaries: Vec<String> = eni.addresses.iter().map(ToString::to_string).collect();
            assert_eq!(
                published.addresses, secondaries,
                "the secondaries only, as Cilium lists them"
            );
        }
        let in_cloud: BTreeSet<String> = instance
            .interfaces
            .iter()
            .flat_map(|i| i.addresses.iter().map(ToString::to_string))
            .collect();
        let pool: BTreeSet<String> = n.spec.ipam.pool.keys().cloned().collect();
        assert_eq!(
            pool, in_cloud,
            "{name}: the pool is what the cloud assigned"
        );
        assert!(n.status.ipam.operator_status.error.is_empty());
    }
    // n1: 8 on the primary, then 1 more and an interface with 2.
    // n2: 9 on the primary, an interface with 3, then 3 more on it.
    assert_eq!(fake.calls(Operation::CreateInterface), 2);
    assert_eq!(fake.calls(Operation::AssignIps), 4);
    assert_eq!(fake.mutating_calls(), 6);
    assert_eq!(metrics.api_calls_with(Operation::AssignIps, "ok"), 4);
    let subnet = SubnetLabel {
        subnet_id: "subnet-a".into(),
    };
    assert_eq!(
        metrics.interface_creation_ops.get_or_create(&subnet).get(),
        2
    );
    assert_eq!(
        metrics.ip_allocation_ops.get_or_create(&subnet).get(),
        11 + 15,
        "every address, those created with an interface included"
    );
    let text = metrics.encode();
    for line in [
        "cilium_operator_ipam_nodes{category=\"total\"} 2",
        "cilium_operator_ipam_ips{type=\"used\"} 6",
        // m5.large: 3 interfaces of 9 secondary addresses.
        "cilium_operator_ipam_available_ips{target_node=\"n1\"} 27",
        "cilium_operator_ipam_available_ips{target_node=\"n2\"} 27",
        "cilium_operator_ipam_used_ips{target_node=\"n2\"} 3",
        // Free: pre-allocate 8 and 12.
        "cilium_operator_ipam_ips{type=\"available\"} 20",
        // Each has one interface with room, and one slot left.
        "cilium_operator_ipam_interface_candidates 2",
        "cilium_operator_ipam_empty_interface_slots 2",
        "cilium_operator_ipam_available_interfaces 4",
        "cilium_operator_ipam_api_calls_total{operation=\"create-interface\",response_code=\"ok\"} 2",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    assert!(!text.contains("in-deficit\"} 1") && !text.contains("at-capacity\"} 1"));
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_restart_over_satisfied_nodes_makes_zero_mutating_calls() {
    let fake = Arc::new(FakeCloud::standard(2));
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(node("n1", "i-0000", 8)).unwrap();
    store.upsert(node("n2", "i-0001", 4)).unwrap();
    let first_metrics = Arc::new(Metrics::new());
    let first = start(
        limited(&fake, unfelt_limits(), &first_metrics),
        store.clone(),
        settings(),
        config(),
        first_metrics,
    );
    first.ready().await;
    settle(&store, 2, Duration::from_secs(300)).await;
    let mutations = fake.mutating_calls();
    assert!(mutations > 0);
    first.stop().await;
    let pools = |nodes: Vec<CiliumNode>| {
        nodes
            .into_iter()
            .map(|n| (n.name, n.spec.ipam.pool))
            .collect::<Vec<_>>()
    };
    let before = pools(store.list().await.unwrap());
    let listings = fake.calls(Operation::GetInstances);

    let second_metrics = Arc::new(Metrics::new());
    let t0 = Instant::now();
    let second = start(
        limited(&fake, unfelt_limits(), &second_metrics),
        store.clone(),
        settings(),
        config(),
        second_metrics.clone(),
    );
    second.ready().await;
    settle(&store, 2, Duration::from_secs(5)).await;
    // Three minutes of resyncs, the one at 180 s included.
    sleep_until(t0 + Duration::from_secs(181)).await;
    assert_eq!(
        fake.mutating_calls(),
        mutations,
        "{}",
        second_metrics.encode()
    );
    eprintln!(
        "DEBUG {} {}",
        fake.calls(Operation::GetInstances) - listings,
        second_metrics.resync_total.get()
    );
    assert_eq!(
        fake.calls(Operation::GetInstances) - listings,
        4,
        "resyncs at 0, 60, 120 and 180 s listed the instances, and nothing else did"
    );
    assert_eq!(second_metrics.resync_total.get(), 4);
    assert!(second.state().passes >= 2, "every node had a pass");
    let after = pools(store.list().await.unwrap());
    assert_eq!(after, before, "the pools are as the first engine left them");
    second.stop().await;
}

#[tokio::test(start_paused = true)]
async fn many_nodes_of_a_new_instance_type_cost_one_limits_call() {
    let fake = Arc::new(FakeCloud::standard(20));
    let store = Arc::new(MemoryNodeStore::new());
    for i in 0..20 {
        store
            .upsert(node(&format!("n{i}"), &standard_instance(i), 8))
            .unwrap();
    }
    let metrics = Arc::new(Metrics::new());
    let running = start(fake.clone(), store.clone(), settings(), config(), metrics);
    running.ready().await;
    settle(&store, 2, Duration::from_secs(300)).await;
    assert_eq!(
        fake.calls(Operation::GetInstanceLimits),
        1,
        "m5.large's limits are fetched once and kept"
    );
    running.stop().await;
}
