//! Every served WIT version through the same host: the 0.1.0 fixture (the
//! mock's cloud behind 0.1.0 bindings, addresses as text, no rate model)
//! and the mock built for 0.2.0 pass conformance and converge the same
//! nodes through the engine, each kept to the limits its version gives.

use ipam_tests as common;

use std::sync::Arc;

use common::{component, config, engine_settings, json, maintainer, runtime, MOCK_SETTINGS};
use ipam_cloud::conformance;
use ipam_cloud::CloudApi;
use ipam_engine::{InstanceCache, LimitedCloud, MemoryNodeStore, NodeStore};
use ipam_provider_runtime::WasmProvider;

async fn load(name: &str) -> WasmProvider {
    runtime()
        .load(&component(name), config(&json(MOCK_SETTINGS)))
        .await
        .unwrap_or_else(|e| panic!("{name} loads: {e}"))
}

#[tokio::test]
async fn both_versions_pass_conformance_and_converge_nodes_through_the_engine() {
    for (name, version) in [("mock-v0.1.0", "0.1.0"), ("mock", "0.2.0")] {
        let provider = load(name).await;
        assert_eq!(provider.module().wit_version, version, "{name}");
        assert_eq!(
            provider.info().rate_model.is_some(),
            version == "0.2.0",
            "{name}: only 0.2.0 can declare a model"
        );
        let limits = common::declared_limits(&provider);
        let report = conformance::run(&provider, &mut |_| {}).await;
        assert_eq!(report.failed(), 0, "{name}: {:#?}", report.checks);
        assert_eq!(report.not_run(), 0, "{name}: {:#?}", report.checks);

        // A fresh cloud for the engine: conformance left its own cloud as
        // it found it, but the engine should start from the settings.
        let provider = load(name).await;
        let cloud: Arc<dyn CloudApi> = Arc::new(LimitedCloud::new(provider, limits));
        let cache = Arc::new(InstanceCache::new());
        cache.resync_all(cloud.as_ref()).await.expect("resync");
        let store = Arc::new(MemoryNodeStore::new());
        store.upsert(common::node("n1", "i-0001", 8)).unwrap();
        store.upsert(common::node("n2", "i-0002", 12)).unwrap();
        let engine = maintainer(cloud, cache, store.clone(), engine_settings(false));
        for (node, pre) in [("n1", 8), ("n2", 12)] {
            engine
                .maintain(node, 0)
                .await
                .unwrap_or_else(|e| panic!("{name}: {node}: {e}"));
            let pool = store.get(node).await.unwrap().unwrap().spec.ipam.pool;
            assert_eq!(pool.len(), pre, "{name}: {node}");
            for address in pool.keys() {
                address
                    .parse::<std::net::Ipv4Addr>()
                    .unwrap_or_else(|_| panic!("{name}: {address:?} in the pool"));
            }
        }
    }
}

#[tokio::test]
async fn a_component_whose_export_differs_in_type_is_refused_naming_the_function() {
    let error = runtime()
        .load(&component("wrong-type"), config("{}"))
        .await
        .expect_err("a component with a field of another type is refused");
    let text = format!("{error:#}");
    assert!(
        text.contains("export func `get-instance-limits` of ipam:provider/provider@0.2.0"),
        "the function is named: {text}"
    );
    assert!(
        text.contains("max-interfaces") || text.contains("u64") || text.contains("u32"),
        "{text}"
    );
}
