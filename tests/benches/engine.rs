//! Engine figures, printed (not asserted). Virtual time is tokio's paused
//! clock; the cloud is the mock component behind a `CloudModel` (EC2-like
//! latency per operation) that enforces EC2's own throttling table (a token
//! bucket per EC2 API, `host/simulate/src/clouds/ec2.yaml`), and the engine's
//! `LimitedCloud` keeps to limits given apart: what the engine believes.
//!
//! - S1: 1,000 nodes join at once (3 interfaces x 10 IPv4, pre-allocate 8,
//!   min-allocate 10), side by side: (a) the engine keeping to EC2's table
//!   exactly, (b) the same with /28 prefix delegation, (c) the engine
//!   limited as Cilium is by default (one bucket, 4/s, burst 20). Per row:
//!   virtual time until every node is satisfied, the least time the cloud's
//!   table admits the calls each node needs at least in, their ratio, API
//!   calls per node, calls the cloud throttled; then (a)'s speed-up over (c).
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
use ipam_cloud::rate::RateLimits;
use ipam_cloud::{CloudApi, Operation};
use ipam_engine::{
    Engine, InstanceCache, LimitedCloud, LoopSettings, Maintainer, MaintenanceSettings,
    MemoryNodeStore, Metrics, NodeStore,
};
use ipam_pool::{watermarks, NodeView};
use ipam_provider_runtime::{
    CallLimits, ProviderConfig, ProviderRuntime, RuntimeConfig, WasmProvider,
};
use ipam_simulate::{
    admission_bound, AdmissionBound, CloudModel, CloudTable, EngineLimits, Latency, ModelCounts,
};
use ipam_tests::component;

/// A cloud of `nodes` m5.large-like instances: primaries and their first
/// interface's addresses in one /16, new interfaces in another. With
/// `prefixes` the instance type takes /28 prefixes.
fn cloud_settings(nodes: u32, prefixes: bool) -> String {
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
        "instance-types": {"m5.large": {"max-interfaces": 3, "ipv4-per-interface": 10, "prefix-delegation": prefixes}},
        "instances": instances,
    })
    .to_string()
}

/// Pre-allocate 8 and min-allocate 10: a joining node needs 10 addresses.
const NEED: u32 = 10;

fn node(i: u32) -> CiliumNode {
    let mut node = ipam_tests::node(&format!("node-{i:05}"), &format!("i-{i:05}"), 8);
    node.spec.ipam.min_allocate = Some(NEED);
    node.spec
        .eni
        .subnet_tags
        .insert("tier".into(), "pods".into());
    node
}

async fn load(runtime: &ProviderRuntime, nodes: u32, prefixes: bool) -> WasmProvider {
    let mut config = ProviderConfig::new(cloud_settings(nodes, prefixes));
    config.limits = CallLimits {
        timeout: Duration::from_secs(60),
        memory_bytes: 512 << 20,
        ..CallLimits::default()
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

fn ec2_table() -> CloudTable {
    CloudTable::ec2().expect("EC2's embedded table parses")
}

/// The mock behind a cloud enforcing EC2's table, the engine keeping to
/// `engine_limits`.
fn modelled(
    provider: Arc<WasmProvider>,
    engine_limits: RateLimits,
    metrics: &Arc<Metrics>,
) -> Arc<Cloud> {
    Arc::new(
        LimitedCloud::new(
            CloudModel::new(provider, Latency::ec2_like(), ec2_table()),
            engine_limits,
        )
        .with_metrics(metrics.clone()),
    )
}

fn start(
    cloud: Arc<dyn CloudApi>,
    store: Arc<MemoryNodeStore>,
    metrics: Arc<Metrics>,
    prefix_delegation: bool,
) -> Arc<Engine> {
    let settings = MaintenanceSettings {
        cluster_name: "bench".into(),
        prefix_delegation,
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

/// The operations a joining m5.large-like node needs at least for `need`
/// addresses: its primary interface has 9 free slots (the tenth is its own
/// address), a new interface brings up to 9 more; a slot holds one address,
/// or 16 with /28 prefixes. One assign fills the primary; each further 9
/// slots' worth is a create-interface, which carries its addresses.
fn least_operations(need: u32, prefixes: bool) -> Vec<(Operation, u64)> {
    const SLOTS: u32 = 9;
    let per_slot = if prefixes { 16 } else { 1 };
    let creates = need
        .saturating_sub(SLOTS * per_slot)
        .div_ceil(SLOTS * per_slot);
    let mut operations = vec![(Operation::AssignIps, 1)];
    if creates > 0 {
        operations.push((Operation::CreateInterface, u64::from(creates)));
    }
    operations
}

/// The least time `limits` (the engine's own belief) let `nodes` nodes'
/// `operations` through: per bucket, the tokens beyond its burst at its rate.
fn engine_bound(limits: &RateLimits, nodes: u32, operations: &[(Operation, u64)]) -> f64 {
    let mut tokens = vec![0.0; limits.buckets().len()];
    for &(operation, times) in operations {
        for &(bucket, cost) in limits.cost(operation) {
            tokens[bucket] += cost * times as f64 * f64::from(nodes);
        }
    }
    limits
        .buckets()
        .iter()
        .zip(tokens)
        .map(|((_, config), tokens)| ((tokens - config.burst) / config.per_second).max(0.0))
        .fold(0.0, f64::max)
}

/// One S1 run.
struct S1Row {
    took: Duration,
    operations: Vec<(Operation, u64)>,
    bound: AdmissionBound,
    engine_bound: f64,
    counts: ModelCounts,
    /// WIT operations that succeeded: (mutating, all).
    wit_calls: (u64, u64),
    wall: Duration,
}

const S1_NODES: u32 = 1000;

fn s1_run(runtime: &ProviderRuntime, engine_limits: EngineLimits, prefixes: bool) -> S1Row {
    let rt = paused_runtime();
    rt.block_on(async {
        let provider = Arc::new(load(runtime, S1_NODES, prefixes).await);
        let engine_limits = engine_limits
            .limits(&ec2_table(), provider.info())
            .expect("the mock declares a whole rate model");
        let store = Arc::new(MemoryNodeStore::new());
        let metrics = Arc::new(Metrics::new());
        let cloud = modelled(provider, engine_limits.clone(), &metrics);
        let wall = WallInstant::now();
        let t0 = tokio::time::Instant::now();
        for i in 0..S1_NODES {
            store.upsert(node(i)).expect("upsert");
        }
        let started = start(cloud.clone(), store.clone(), metrics.clone(), prefixes).spawn();
        let took = loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let nodes = store.list().await.expect("list");
            if nodes.iter().all(satisfied) {
                break t0.elapsed();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(4 * 3600),
                "S1 did not converge"
            );
        };
        started.stop().await.expect("engine runs");
        let operations = least_operations(NEED, prefixes);
        let table = ec2_table();
        let per_node = table.calls_of(&operations);
        let bound = admission_bound(&table, u64::from(S1_NODES), &per_node)
            .expect("the calls per node are EC2's");
        let all = Operation::ALL
            .into_iter()
            .map(|op| metrics.api_calls_with(op, "ok"))
            .sum();
        S1Row {
            took,
            engine_bound: engine_bound(&engine_limits, S1_NODES, &operations),
            operations,
            bound,
            counts: cloud.inner().counts(),
            wit_calls: (mutating_calls(&metrics), all),
            wall: wall.elapsed(),
        }
    })
}

fn s1(runtime: &ProviderRuntime) {
    let table = ec2_table();
    let rows = [
        (
            "(a) declared",
            s1_run(runtime, EngineLimits::Declared, false),
        ),
        (
            "(b) (a) + /28s",
            s1_run(runtime, EngineLimits::Declared, true),
        ),
        (
            "(c) Cilium 4/s",
            s1_run(runtime, EngineLimits::Cilium, false),
        ),
    ];
    let nodes = f64::from(S1_NODES);
    let per_node = |n: u64| n as f64 / nodes;
    println!("S1: {S1_NODES} nodes join at once (m5.large-like: 3 interfaces x 10 IPv4; pre-allocate 8, min-allocate 10)");
    println!("    the cloud enforces EC2's table (a bucket per API; Describe* 100 + 20/s, Create/Delete/Assign/Unassign/Modify 100 + 5/s, Attach/Detach 50 + 5/s)");
    println!("    the engine keeps to: (a) and (b) the rate model the mock component declares (EC2's per-API buckets, as the AWS provider declares them); (c) Cilium's default, one bucket of 20 at 4/s, a token per EC2 call");
    let line = |label: &str, cell: &dyn Fn(&S1Row) -> String| {
        let cells: Vec<String> = rows
            .iter()
            .map(|(_, row)| format!("{:>26}", cell(row)))
            .collect();
        println!("    {label:<40}{}", cells.concat());
    };
    let header: Vec<String> = rows.iter().map(|(name, _)| format!("{name:>26}")).collect();
    println!("    {:<40}{}", "", header.concat());
    line("virtual time to all satisfied", &|r| {
        format!("{:.0} s", r.took.as_secs_f64())
    });
    line("WIT calls each node needs at least", &|r| {
        r.operations
            .iter()
            .map(|(op, n)| match op {
                Operation::AssignIps => format!("{n} assign"),
                Operation::CreateInterface => format!("{n} create"),
                other => format!("{n} {other}"),
            })
            .collect::<Vec<_>>()
            .join(" + ")
    });
    line("bound from the cloud's table", &|r| {
        format!("{:.0} s", r.bound.seconds)
    });
    line("  its slowest bucket", &|r| {
        r.bound.bucket.clone().unwrap_or_else(|| "-".into())
    });
    line("ratio to it (target <= 1.10)", &|r| {
        format!("{:.3}", r.took.as_secs_f64() / r.bound.seconds)
    });
    line("bound from the engine's own limits", &|r| {
        format!("{:.0} s", r.engine_bound)
    });
    line("ratio to it", &|r| {
        format!("{:.3}", r.took.as_secs_f64() / r.engine_bound)
    });
    line("EC2 API calls per node: mutating", &|r| {
        format!("{:.2}", per_node(r.counts.api_totals(&table).1))
    });
    line("                        all", &|r| {
        format!("{:.2}", per_node(r.counts.api_totals(&table).0))
    });
    line("WIT calls per node (ok): mutating", &|r| {
        format!("{:.2}", per_node(r.wit_calls.0))
    });
    line("                         all", &|r| {
        format!("{:.2}", per_node(r.wit_calls.1))
    });
    line("calls throttled by the cloud", &|r| {
        r.counts.throttled.values().sum::<u64>().to_string()
    });
    line("wall time", &|r| format!("{:.1} s", r.wall.as_secs_f64()));
    println!("    EC2 API calls made (admitted by the cloud):");
    for (name, row) in &rows {
        let apis: Vec<String> = row
            .counts
            .api_calls
            .iter()
            .map(|(api, n)| format!("{api}: {n}"))
            .collect();
        println!("      {name}: {}", apis.join(", "));
    }
    let (a, c) = (&rows[0].1, &rows[2].1);
    println!(
        "    speed-up of (a) over (c): {:.2}x ({:.0} s against {:.0} s)",
        c.took.as_secs_f64() / a.took.as_secs_f64(),
        a.took.as_secs_f64(),
        c.took.as_secs_f64()
    );
}

/// 5,000 satisfied nodes, set up without the cloud model (no latency, no
/// buckets): the state a long-running cluster is in.
async fn satisfied_cluster(
    runtime: &ProviderRuntime,
    nodes: u32,
) -> (Arc<WasmProvider>, Arc<MemoryNodeStore>) {
    let provider = Arc::new(load(runtime, nodes, false).await);
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
        let cloud = modelled(provider.clone(), ec2_table().engine_limits(), &metrics);
        let cpu = cpu_seconds();
        let wall = WallInstant::now();
        let t0 = tokio::time::Instant::now();
        let engine = start(cloud, store.clone(), metrics.clone(), false);
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
