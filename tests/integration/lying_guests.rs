//! A guest built to lie (`providers/testing/misbehave`, one lie per mode,
//! each about instance `i-bad` only): every lie is refused at the host's
//! boundary with a typed error naming the provider, the operation and the
//! field, counted in the metric, and the engine keeps serving `i-good`'s
//! node while no lie reaches a CiliumNode.

use ipam_tests as common;

use std::sync::Arc;

use common::{component, config, engine_settings, maintainer, runtime};
use std::sync::Mutex;

use ipam_cloud::answer::{BadField, Problem, RefusalSink};
use ipam_cloud::Operation;
use ipam_cloud::{CloudApi, CloudError, CreateInterfaceRequest, IpRequest};
use ipam_engine::{InstanceCache, Metrics};
use ipam_engine::{MemoryNodeStore, NodeStore};
use ipam_provider_runtime::WasmProvider;

/// The lying guest in `mode`, its refusals told to `sink`.
async fn liar(mode: &str, sink: Arc<dyn RefusalSink>) -> WasmProvider {
    let mut config = config(&serde_json::json!({ "mode": mode }).to_string());
    config.refusals = Some(sink);
    runtime()
        .load(&component("misbehave"), config)
        .await
        .unwrap_or_else(|e| panic!("misbehave in mode {mode} loads: {e}"))
}

/// Every refusal, as told.
#[derive(Default)]
struct Recorded(Mutex<Vec<(Operation, BadField)>>);

impl RefusalSink for Recorded {
    fn refused(&self, provider: &str, operation: Operation, bad: &BadField) {
        assert_eq!(provider, "misbehave");
        self.0.lock().unwrap().push((operation, bad.clone()));
    }
}

/// Refusals counted for `operation` and `problem`.
fn refused(metrics: &Metrics, operation: &'static str, problem: Problem) -> u64 {
    metrics
        .api_answers_refused
        .get_or_create(&ipam_engine::metrics::RefusalLabel {
            provider: "misbehave".into(),
            operation,
            problem: problem.label(),
        })
        .get()
}

/// Whatever the provider lists, with the subnets and VPCs learnt first.
async fn listed_instances(provider: &WasmProvider) -> Vec<String> {
    provider.get_vpcs().await.expect("vpcs");
    provider.get_subnets().await.expect("subnets");
    let mut ids: Vec<String> = provider
        .get_instances(&[])
        .await
        .expect("a listing with a lie in it is still a listing")
        .into_iter()
        .map(|i| i.id)
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn a_lying_instance_leaves_the_listing_and_the_others_are_served() {
    for (mode, problem, field) in [
        (
            "address-outside-subnet",
            Problem::OutsideNetwork,
            "instances[i-bad].interfaces[",
        ),
        (
            "duplicate-address",
            Problem::DuplicateAddress,
            "instances[i-bad].interfaces[",
        ),
        (
            "duplicate-index",
            Problem::DuplicateIndex,
            "instances[i-bad].interfaces[",
        ),
        (
            "bad-network",
            Problem::Unparsable,
            "instances[i-bad].interfaces[",
        ),
    ] {
        let recorded = Arc::new(Recorded::default());
        let provider = liar(mode, recorded.clone()).await;
        assert_eq!(listed_instances(&provider).await, ["i-good"], "{mode}");
        // By id too: the liar is left out, the other one is there.
        let ids = ["i-good".to_string(), "i-bad".to_string()];
        let by_id = provider.get_instances(&ids).await.expect("by id");
        assert_eq!(by_id.len(), 1, "{mode}");
        let refusals = recorded.0.lock().unwrap().clone();
        assert_eq!(
            refusals.len(),
            2,
            "{mode}: one refusal a listing: {refusals:?}"
        );
        for (operation, bad) in refusals {
            assert_eq!(operation, Operation::GetInstances, "{mode}");
            assert_eq!(bad.problem, problem, "{mode}: {bad}");
            assert!(bad.field.starts_with(field), "{mode}: {bad}");
        }
    }
}

fn create(instance: &str, index: u32) -> CreateInterfaceRequest {
    CreateInterfaceRequest {
        instance_id: instance.into(),
        index,
        subnet_id: "subnet-1".into(),
        security_groups: vec![],
        description: "lying guest test".into(),
        tags: vec![],
        delete_on_termination: true,
        ipv4_count: 2,
        use_prefixes: false,
    }
}

/// The typed error of a refused answer: its operation, field and problem.
fn bad_answer(result: Result<impl std::fmt::Debug, CloudError>) -> (&'static str, String, Problem) {
    match result {
        Err(CloudError::BadAnswer {
            provider,
            operation,
            bad,
        }) => {
            assert_eq!(provider, "misbehave");
            (operation, bad.field, bad.problem)
        }
        other => panic!("expected a refused answer, got {other:?}"),
    }
}

#[tokio::test]
async fn a_lying_answer_to_a_mutation_is_a_typed_error_naming_the_field() {
    let metrics = Arc::new(Metrics::new());
    let wrong_instance = liar("create-wrong-instance", metrics.clone()).await;
    listed_instances(&wrong_instance).await;
    let (operation, field, problem) =
        bad_answer(wrong_instance.create_interface(&create("i-bad", 1)).await);
    assert_eq!(operation, "create-interface");
    assert!(field.ends_with(".instance-id"), "{field}");
    assert_eq!(problem, Problem::OtherInstance);
    let good = wrong_instance
        .create_interface(&create("i-good", 1))
        .await
        .expect("the truth about i-good is believed");
    assert_eq!(good.index, 1);

    let wrong_index = liar("create-wrong-index", metrics.clone()).await;
    listed_instances(&wrong_index).await;
    let (_, field, problem) = bad_answer(wrong_index.create_interface(&create("i-bad", 1)).await);
    assert!(field.ends_with(".index"), "{field}");
    assert_eq!(problem, Problem::OtherIndex);

    let more = liar("assign-more", metrics.clone()).await;
    listed_instances(&more).await;
    let bad_primary = primary_of(&more, "i-bad").await;
    let (operation, field, problem) =
        bad_answer(more.assign_ips(&bad_primary, IpRequest::Addresses(2)).await);
    assert_eq!(
        (operation, field.as_str(), problem),
        ("assign-ips", "assigned.addresses", Problem::NotAsked)
    );
    let good_primary = primary_of(&more, "i-good").await;
    let assigned = more
        .assign_ips(&good_primary, IpRequest::Addresses(2))
        .await
        .expect("an honest answer");
    assert_eq!(assigned.addresses.len(), 2);

    let other_kind = liar("assign-other-kind", metrics.clone()).await;
    listed_instances(&other_kind).await;
    let bad_primary = primary_of(&other_kind, "i-bad").await;
    let (_, field, problem) = bad_answer(
        other_kind
            .assign_ips(&bad_primary, IpRequest::Addresses(1))
            .await,
    );
    assert_eq!(
        (field.as_str(), problem),
        ("assigned.prefixes", Problem::NotAsked)
    );

    let zero = liar("zero-limits", metrics.clone()).await;
    let (operation, field, problem) = bad_answer(zero.get_instance_limits("bad.large").await);
    assert_eq!(
        (operation, field.as_str(), problem),
        (
            "get-instance-limits",
            "limits.max-interfaces",
            Problem::ZeroLimit
        )
    );
    assert!(zero.get_instance_limits("m5.large").await.is_ok());

    assert_eq!(
        refused(&metrics, "create-interface", Problem::OtherInstance),
        1
    );
    assert_eq!(
        refused(&metrics, "create-interface", Problem::OtherIndex),
        1
    );
    assert_eq!(refused(&metrics, "assign-ips", Problem::NotAsked), 2);
    assert_eq!(
        refused(&metrics, "get-instance-limits", Problem::ZeroLimit),
        1
    );
}

async fn primary_of(provider: &WasmProvider, instance: &str) -> String {
    provider
        .get_instances(&[instance.to_string()])
        .await
        .expect("listed")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{instance} is listed"))
        .interfaces
        .into_iter()
        .find(|i| i.index == 0)
        .expect("a primary interface")
        .id
}

#[tokio::test]
async fn the_engine_serves_the_honest_node_and_no_lie_reaches_a_ciliumnode() {
    for mode in ["address-outside-subnet", "duplicate-address", "assign-more"] {
        let metrics = Arc::new(Metrics::new());
        let provider = Arc::new(liar(mode, metrics.clone()).await);
        let cache = Arc::new(InstanceCache::new());
        let store = Arc::new(MemoryNodeStore::new());
        store.upsert(common::node("n-good", "i-good", 4)).unwrap();
        store.upsert(common::node("n-bad", "i-bad", 4)).unwrap();
        let engine = maintainer(
            provider.clone(),
            cache.clone(),
            store.clone(),
            engine_settings(false),
        );
        for round in 0..3 {
            cache
                .resync_all(provider.as_ref())
                .await
                .expect("a listing with a lie in it resyncs");
            engine
                .maintain("n-good", 0)
                .await
                .unwrap_or_else(|e| panic!("{mode}: n-good: {e}"));
            // The liar's node gets nothing from the lie: a listing's lie
            // leaves its instance out (every pass is blocked on it); an
            // answer's lie fails the pass that got it (the next passes see
            // what the instance truly holds).
            let bad_pass = engine.maintain("n-bad", 0).await;
            let refused = match &bad_pass {
                Err(_) => true,
                Ok(pass) => matches!(pass.steps.last(), Some(ipam_engine::Step::Blocked(_))),
            };
            if round == 0 || mode != "assign-more" {
                assert!(refused, "{mode}: n-bad's pass {round}: {bad_pass:?}");
            }
        }
        let good = store.get("n-good").await.unwrap().unwrap();
        assert_eq!(good.spec.ipam.pool.len(), 4, "{mode}: n-good is served");
        let bad = store.get("n-bad").await.unwrap().unwrap();
        // The address each lie is about never reaches the CiliumNode.
        let lied: Vec<String> = match mode {
            "address-outside-subnet" => vec!["192.168.7.7".into()],
            "duplicate-address" => vec!["10.0.1.77".into()],
            // assign-ips answers one address more than asked, on no
            // interface: whatever is pooled must be on i-bad's interfaces
            // as the (honest) listing has them.
            _ => {
                let listed = provider
                    .get_instances(&["i-bad".to_string()])
                    .await
                    .expect("assign-more lists i-bad honestly");
                let on_instance: Vec<String> = listed
                    .iter()
                    .flat_map(|i| &i.interfaces)
                    .flat_map(|i| &i.addresses)
                    .map(ToString::to_string)
                    .collect();
                bad.spec
                    .ipam
                    .pool
                    .keys()
                    .filter(|a| !on_instance.contains(a))
                    .cloned()
                    .collect()
            }
        };
        for address in &lied {
            assert!(
                !bad.spec.ipam.pool.contains_key(address),
                "{mode}: the lied {address} is in n-bad's pool: {:?}",
                bad.spec.ipam.pool
            );
        }
        for address in bad.spec.ipam.pool.keys() {
            let ip: std::net::Ipv4Addr = address.parse().expect("an address");
            assert!(
                "10.0.1.0/24"
                    .parse::<ipam_cloud::Ipv4Net>()
                    .unwrap()
                    .contains(&ip),
                "{mode}: {address} in n-bad's pool is outside its subnet"
            );
            assert!(
                !good.spec.ipam.pool.contains_key(address),
                "{mode}: {address} is in both nodes' pools"
            );
        }
        assert!(
            metrics
                .encode()
                .contains("answers_refused_total{provider=\"misbehave\""),
            "{mode}: the refusals are counted"
        );
    }
}
