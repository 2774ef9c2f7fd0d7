//! Provider runtime figures, printed (not asserted):
//! - per-call cost of get-instances returning 1 instance with 15 interfaces
//!   of 50 secondary addresses each, through the mock component built for
//!   WIT 0.2.0 (addresses as numbers) and the same cloud behind the 0.1.0
//!   fixture (addresses as text), boundary checks included; and the checks
//!   alone;
//! - a fresh instance from the InstancePre (instantiate, info, configure);
//! - module ready from the disk cache versus a cold compile (mock and aws).
//!
//! Run: `cargo xtask bench` (builds the components, then `cargo bench`).

use std::time::{Duration, Instant};

use ipam_cloud::answer::{self, KnownNetworks};
use ipam_cloud::{CloudApi, CreateInterfaceRequest, IpRequest};
use ipam_provider_runtime::{ProviderConfig, ProviderRuntime, RuntimeConfig};
use ipam_tests::component;

const INTERFACES: u32 = 15;
const ADDRESSES: u32 = 50;

fn config(settings: serde_json::Value) -> ProviderConfig {
    ProviderConfig::new(settings.to_string())
}

fn big_instance_cloud() -> serde_json::Value {
    serde_json::json!({
        "vpcs": [{"id": "vpc-1", "cidrs": ["10.0.0.0/16"]}],
        "subnets": [{"id": "subnet-1", "vpc-id": "vpc-1", "cidr": "10.0.0.0/20", "availability-zone": "z"}],
        "security-groups": [{"id": "sg-1", "vpc-id": "vpc-1"}],
        "instance-types": {"big": {"max-interfaces": INTERFACES, "ipv4-per-interface": ADDRESSES + 1}},
        "instances": [{"id": "i-1", "instance-type": "big", "subnet-id": "subnet-1", "security-groups": ["sg-1"]}],
    })
}

fn per_op(total: Duration, n: u32) -> String {
    let nanos = total.as_nanos() / u128::from(n);
    if nanos < 10_000 {
        format!("{:.2} us", nanos as f64 / 1000.0)
    } else {
        format!("{:.3} ms", nanos as f64 / 1e6)
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The same mock cloud through each served WIT version.
const MOCKS: [(&str, &str); 2] = [("mock", "0.2.0"), ("mock-v0.1.0", "0.1.0")];

async fn call_overhead(runtime: &ProviderRuntime, name: &str, version: &str) {
    let provider = runtime
        .load(&component(name), config(big_instance_cloud()))
        .await
        .expect("mock loads");
    let primary = provider.get_instances(&[]).await.unwrap()[0].interfaces[0]
        .id
        .clone();
    provider
        .assign_ips(&primary, IpRequest::Addresses(ADDRESSES))
        .await
        .unwrap();
    for index in 1..INTERFACES {
        let request = CreateInterfaceRequest {
            instance_id: "i-1".into(),
            index,
            subnet_id: "subnet-1".into(),
            security_groups: vec!["sg-1".into()],
            description: "bench".into(),
            tags: Vec::new(),
            delete_on_termination: true,
            ipv4_count: ADDRESSES,
            use_prefixes: false,
        };
        provider.create_interface(&request).await.unwrap();
    }
    let ids = vec!["i-1".to_string()];
    let instance = &provider.get_instances(&ids).await.unwrap()[0];
    let addresses: usize = instance.interfaces.iter().map(|i| i.addresses.len()).sum();
    assert_eq!(
        (instance.interfaces.len(), addresses),
        (INTERFACES as usize, (INTERFACES * ADDRESSES) as usize)
    );

    let n = 2_000;
    let started = Instant::now();
    for _ in 0..n {
        std::hint::black_box(provider.get_instances(&ids).await.unwrap());
    }
    println!(
        "get-instances through WIT {version} (1 instance, {INTERFACES} interfaces x {ADDRESSES} addresses): {} per call over {n} calls",
        per_op(started.elapsed(), n)
    );
    if version == MOCKS[0].1 {
        let listing = std::slice::from_ref(instance);
        let mut known = KnownNetworks::default();
        known.learn_subnets(&provider.get_subnets().await.unwrap());
        let n = 20_000;
        let started = Instant::now();
        for _ in 0..n {
            std::hint::black_box(answer::check_instances(
                std::hint::black_box(listing),
                &known,
            ));
        }
        println!(
            "  of which the boundary checks of that listing (each address in its subnet, none twice, one index each): {} per listing",
            per_op(started.elapsed(), n)
        );
    }
    let n = 20_000;
    let started = Instant::now();
    for _ in 0..n {
        std::hint::black_box(provider.get_vpcs().await.unwrap());
    }
    println!(
        "get-vpcs through WIT {version} (1 small record; the fixed cost of a call): {} per call over {n} calls",
        per_op(started.elapsed(), n)
    );
}

async fn warm_instantiate(runtime: &ProviderRuntime) {
    for (name, settings) in [
        ("misbehave", serde_json::json!({"mode": "behave"})),
        ("mock", big_instance_cloud()),
        // configure builds the SDK client; nothing is sent.
        ("aws", serde_json::json!({"region": "us-east-1"})),
    ] {
        let provider = runtime
            .load(&component(name), config(settings))
            .await
            .expect("loads");
        let mut samples = Vec::new();
        for _ in 0..200 {
            provider.drain_idle();
            let started = Instant::now();
            provider.prewarm().await.unwrap();
            samples.push(started.elapsed());
        }
        println!(
            "fresh instance from InstancePre ({name}: instantiate + info + configure): median {} over 200",
            per_op(median(samples), 1)
        );
    }
}

fn module_ready(name: &str) {
    let bytes = component(name);
    let cache = tempfile::tempdir().unwrap();
    let cached = RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    };
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let runtime = ProviderRuntime::new(RuntimeConfig {
            cache_dir: None,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let started = Instant::now();
        runtime.prepare(&bytes).unwrap();
        cold.push(started.elapsed());
    }
    ProviderRuntime::new(cached.clone())
        .unwrap()
        .prepare(&bytes)
        .unwrap();
    for _ in 0..20 {
        let runtime = ProviderRuntime::new(cached.clone()).unwrap();
        let started = Instant::now();
        runtime.prepare(&bytes).unwrap();
        warm.push(started.elapsed());
        assert_eq!(runtime.compiles(), 0);
    }
    println!(
        "{name} module ready ({} KiB): cold compile median {}, from disk cache median {}",
        bytes.len() / 1024,
        per_op(median(cold), 1),
        per_op(median(warm), 1)
    );
}

/// `cargo bench -- calls` runs only the sections whose name contains a filter
/// (calls, instantiate, cache); no filter runs all.
fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted =
        |section: &str| filters.is_empty() || filters.iter().any(|f| section.contains(f.as_str()));
    let runtime = ProviderRuntime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if wanted("calls") {
        for (name, version) in MOCKS {
            tokio.block_on(call_overhead(&runtime, name, version));
        }
    }
    if wanted("instantiate") {
        tokio.block_on(warm_instantiate(&runtime));
    }
    if wanted("cache") {
        module_ready("mock");
        module_ready("aws");
    }
}
