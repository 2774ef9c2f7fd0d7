//! Engine figures, printed (not asserted). Virtual time is tokio's paused
//! clock; the cloud is the mock component behind a `CloudModel` (EC2-like
//! latency per operation, EC2's token buckets enforced by the cloud side),
//! and the engine keeps to the same buckets with its `LimitedCloud`.
//!
//! - S1: 1,000 nodes join at once (3 interfaces x 10 IPv4, pre-allocate 8,
//!   min-allocate 10): virtual time until every node is satisfied, the lower
//!   bound the mutating-call budget allows, their ratio, calls per node.
//! - S3: an engine restart over 5,000 satisfied nodes: wall and virtual time
//!   to ready, mutating calls, CPU seconds, peak RSS.
//! - Engine cost per node per resync at 5,000 nodes: one maintenance pass
//!   over every satisfied node, and (apart) the provider's full listing.
//!
//! Run: `cargo xtask bench` or, after `cargo xtask providers`,
//! `cargo bench -p ipam-tests --bench engine [-- s1|s3]`.

use std::sync::Arc;
use std::time::{Duration, Instant as WallInstant};

use ipam_ciliumnode::CiliumNode;
use ipam_cloud::{CloudApi, Operation};
use ipam_clouds::Cloud as CloudKind;
use ipam_engine::{
    Engine, InstanceCache, LimitedCloud, LoopSettings, Maintainer, MaintenanceSettings,
    MemoryNodeStore, Metrics, NodeStore,
};
use ipam_pool::{watermarks, NodeView};
use ipam_provider_runtime::{
    CallLimits, ProviderConfig, ProviderRuntime, RuntimeConfig, WasmProvider,
};
use ipam_simulate::{CloudModel, Latency};
use ipam_tests::component;

/// A cloud of `nodes` m5.large-like instances: primaries and their first
/// interface's addresses in one /16, new interfaces in another.
fn cloud_settings(nodes: u32) -> String {
    let instances: Vec<serde_json::Value> = (0..nodes)
        .map(|i| {
            serde_json::json!({"id": format!("i-{i:05}"), "instance-type": "m5.large",
                "subnet-id": "subnet-nodes", "security-groups": ["sg-1"]})
        })
        .collect();
    serde_json::json!({
        "vpcs": [{"id": "vpc-1", "cidrs": ["10.0.0.0/16", "10.1.0.0/16"]}],
        "subnets": [
            {"id": "subnet-nodes", "vpc-id": "vpc-1", "cidr": "10.0.0.0/16", "availability-zone": "z", "tags": {"tier": "nodes"}},
            {"id": "subnet-pods", "vpc-id": "vpc-1", "cidr": "10.1.0.0/16", "availability-zone": "z", "tags": {"tier": "pods"}}
        ],
        "security-groups": [{"id": "sg-1", "vpc-id": "vpc-1"}],
        "instance-types": {"m5.large": {"max-interfaces": 3, "ipv4-per-interface": 10}},
        "instances": instances,
    })
    .to_string()
}

fn node(i: u32) -> CiliumNode {
    let mut node = ipam_tests::node(&format!("node-{i:05}"), &format!("i-{i:05}"), 8);
    node.spec.ipam.min_allocate = Some(10);
    node.spec
        .eni
        .subnet_tags
        .insert("tier".into(), "pods".into());
    node
}

async fn load(runtime: &ProviderRuntime, nodes: u32) -> WasmProvider {
    let mut config = ProviderConfig::new(cloud_settings(nodes));
    config.limits = CallLimits {
        timeout: Duration::from_secs(60),
        memory_bytes: 512 << 20,
    };
    runtime
        .load(&component("mock"), config)
        .await
        .expect("mock loads")
}

fn satisfied(node: &CiliumNode) -> bool {
    let available = u32::try_from(node.spec.ipam.pool.len()).unwrap_or(u32::MAX);
    let used = u32::try_from(node.status.ipam.used.len()).unwrap_or(u32::MAX);
    watermarks::needed(node.watermarks(), available, used) == 0
}

type Cloud = LimitedCloud<CloudModel<Arc<WasmProvider>>>;

fn modelled(provider: Arc<WasmProvider>, metrics: &Arc<Metrics>) -> Arc<Cloud> {
    let limits = CloudKind::Aws.rate_limits();
    Arc::new(
        LimitedCloud::new(
            CloudModel::new(provider, Latency::ec2_like(), limits.clone()),
            limits,
        )
        .with_metrics(metrics.clone()),
    )
}

fn start(
    cloud: Arc<dyn CloudApi>,
    store: Arc<MemoryNodeStore>,
    metrics: Arc<Metrics>,
) -> Arc<Engine> {
    let settings = MaintenanceSettings {
        cluster_name: "bench".into(),
        ..MaintenanceSettings::default()
    };
    let maintainer = Maintainer::new(
        cloud,
        Arc::new(InstanceCache::new()),
        store,
        settings,
        metrics,
    );
    Arc::new(Engine::new(Arc::new(maintainer), LoopSettings::default()))
}

fn mutating_calls(metrics: &Metrics) -> u64 {
    Operation::ALL
        .into_iter()
        .filter(|op| op.is_mutating())
        .map(|op| metrics.api_calls_with(op, "ok"))
        .sum()
}

/// Process CPU seconds (user + system) from /proc/self/stat, at 100 ticks/s.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // After the command name: state is field 0; utime 11, stime 12.
    (ticks(11) + ticks(12)) / 100.0
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime")
}

fn s1(runtime: &ProviderRuntime) {
    const NODES: u32 = 1000;
    let rt = paused_runtime();
    rt.block_on(async {
        let provider = Arc::new(load(runtime, NODES).await);
        let store = Arc::new(MemoryNodeStore::new());
        let metrics = Arc::new(Metrics::new());
        let cloud = modelled(provider, &metrics);
        let wall = WallInstant::now();
        let t0 = tokio::time::Instant::now();
        for i in 0..NODES {
            store.upsert(node(i)).expect("upsert");
        }
        let started = start(cloud.clone(), store.clone(), metrics.clone()).spawn();
        let took = loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let nodes = store.list().await.expect("list");
            if nodes.iter().all(satisfied) {
                break t0.elapsed();
            }
            assert!(t0.elapsed() < Duration::from_secs(4 * 3600), "S1 did not converge");
        };
        started.stop().await.expect("engine runs");

        // The budget: each node needs one assign (9 addresses on its
        // first interface) and one create-interface for the tenth.
        let limits = CloudKind::Aws.rate_limits();
        let per_node = |bucket: usize| -> f64 {
            [Operation::AssignIps, Operation::CreateInterface]
                .into_iter()
                .flat_map(|op| limits.cost(op).iter())
                .filter(|(b, _)| *b == bucket)
                .map(|(_, t)| t)
                .sum()
        };
        // Each bucket's bound: its tokens for every node, less the burst, at
        // its rate; the tightest bucket decides.
        let bound = |bucket: usize| {
            let (_, config) = &limits.buckets()[bucket];
            ((per_node(bucket) * f64::from(NODES) - config.burst) / config.per_second).max(0.0)
        };
        let lower = (0..limits.buckets().len()).map(bound).fold(0.0, f64::max);
        let mutate = limits
            .buckets()
            .iter()
            .position(|(name, _)| name == "mutate")
            .expect("EC2's model has a mutate bucket");
        let counts = cloud.inner().counts();
        println!("S1: {NODES} nodes join at once (3 interfaces x 10 IPv4, pre-allocate 8, min-allocate 10)");
        println!("    virtual time to all satisfied   {:.0} s", took.as_secs_f64());
        println!("    lower bound (mutating budget)   {lower:.0} s  (EC2 buckets: mutate 100 + 5/s, attach 50 + 5/s; {} mutate tokens/node)", per_node(mutate));
        println!("    ratio                           {:.3}  (target <= 1.10)", took.as_secs_f64() / lower);
        println!("    mutating calls per node         {:.2}  (assign {}, create {}, unassign {}, delete {})",
            mutating_calls(&metrics) as f64 / f64::from(NODES),
            metrics.api_calls_with(Operation::AssignIps, "ok"),
            metrics.api_calls_with(Operation::CreateInterface, "ok"),
            metrics.api_calls_with(Operation::UnassignIps, "ok"),
            metrics.api_calls_with(Operation::DeleteInterface, "ok"));
        println!("    throttled by the cloud          {}", counts.throttled.values().sum::<u64>());
        println!("    wall time                       {:.1} s", wall.elapsed().as_secs_f64());
    });
}

/// 5,000 satisfied nodes, set up without the cloud model (no latency, no
/// buckets): the state a long-running cluster is in.
async fn satisfied_cluster(
    runtime: &ProviderRuntime,
    nodes: u32,
) -> (Arc<WasmProvider>, Arc<MemoryNodeStore>) {
    let provider = Arc::new(load(runtime, nodes).await);
    let store = Arc::new(MemoryNodeStore::new());
    let cache = Arc::new(InstanceCache::new());
    cache.resync_all(provider.as_ref()).await.expect("resync");
    let setup = Maintainer::new(
        provider.clone(),
        cache,
        store.clone(),
        MaintenanceSettings {
            cluster_name: "bench".into(),
            ..MaintenanceSettings::default()
        },
        Arc::new(Metrics::new()),
    );
    for i in 0..nodes {
        store.upsert(node(i)).expect("upsert");
        setup.allocate(&node(i).name, 0).await.expect("allocate");
    }
    (provider, store)
}

fn s3(runtime: &ProviderRuntime) {
    const NODES: u32 = 5000;
    let rt = paused_runtime();
    rt.block_on(async {
        let setup = WallInstant::now();
        let (provider, store) = satisfied_cluster(runtime, NODES).await;
        let setup = setup.elapsed();
        let metrics = Arc::new(Metrics::new());
        let cloud = modelled(provider.clone(), &metrics);
        let cpu = cpu_seconds();
        let wall = WallInstant::now();
        let t0 = tokio::time::Instant::now();
        let engine = start(cloud, store.clone(), metrics.clone());
        let mut state = engine.state();
        let started = engine.spawn();
        let _ = state.wait_for(|s| s.ready).await;
        let wall_ready = wall.elapsed();
        let virtual_ready = t0.elapsed();
        let cpu_used = cpu_seconds() - cpu;
        started.stop().await.expect("engine runs");
        println!("S3: engine restart over {NODES} satisfied nodes (set up in {:.1} s, not counted)", setup.as_secs_f64());
        println!("    wall time to ready              {:.2} s", wall_ready.as_secs_f64());
        println!("    virtual time to ready           {:.1} s  (EC2-like latencies; the first resync is 4 listings)", virtual_ready.as_secs_f64());
        println!("    mutating calls                  {}  (target 0)", mutating_calls(&metrics));
        println!("    CPU seconds                     {cpu_used:.2}");
        println!("    peak RSS (process, incl. setup) {:.0} MiB", peak_rss_mib());

        // Engine cost per node per resync: a full listing, then one
        // maintenance pass over every node, as a periodic resync does.
        let maintainer = Maintainer::new(
            provider.clone(),
            Arc::new(InstanceCache::new()),
            store.clone(),
            MaintenanceSettings {
                cluster_name: "bench".into(),
                ..MaintenanceSettings::default()
            },
            Arc::new(Metrics::new()),
        );
        let listing = WallInstant::now();
        maintainer
            .cache()
            .resync_all(provider.as_ref())
            .await
            .expect("resync");
        let listing = listing.elapsed();
        let names: Vec<String> = store.list().await.expect("list").into_iter().map(|n| n.name).collect();
        let mut best = Duration::MAX;
        for _ in 0..3 {
            let pass = WallInstant::now();
            for name in &names {
                maintainer.maintain(name, 0).await.expect("pass");
            }
            best = best.min(pass.elapsed());
        }
        let per_node = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(NODES);
        println!("Engine cost per node per resync at {NODES} nodes");
        println!("    maintenance pass (engine)       {:.1} us/node  (target <= 50 us; best of 3)", per_node(best));
        println!("    full listing (mock provider)    {:.1} us/node  (get-instances of {NODES} instances through wasm)", per_node(listing));
    });
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    let runtime = ProviderRuntime::new(RuntimeConfig::default()).expect("runtime");
    if wanted("s1") {
        s1(&runtime);
    }
    if wanted("s3") {
        s3(&runtime);
    }
}
