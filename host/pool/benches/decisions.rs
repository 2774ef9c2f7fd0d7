//! The pure core's cost per decision, printed (not asserted): an allocation
//! plan and a release plan for a node with 3 interfaces of 10 addresses, and
//! the schedule ordering 5,000 nodes. Builds no wasmtime, tokio or kube.
//!
//! Run: `cargo bench -p ipam-pool --bench decisions`.

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::time::{Duration, Instant};

use ipam_ciliumnode::{AllocationIp, CiliumNode};
use ipam_cloud::{Capabilities, Instance, InstanceLimits, NetworkInterface, SecurityGroup, Subnet};
use ipam_pool::allocation::{self, AllocationInput};
use ipam_pool::pool::pool_of;
use ipam_pool::release_plan::{self, ReleasePlanInput};
use ipam_pool::schedule::Schedule;
use ipam_pool::tags::Ownership;
use ipam_pool::IpamMode;

fn instance() -> Instance {
    let interfaces = (0..3)
        .map(|index| NetworkInterface {
            id: format!("eni-{index}"),
            mac: String::new(),
            index,
            subnet_id: "subnet-a".into(),
            vpc_id: "vpc-1".into(),
            primary_ip: format!("10.0.{index}.1").parse().unwrap(),
            addresses: (2..11)
                .map(|a| format!("10.0.{index}.{a}").parse().unwrap())
                .collect(),
            prefixes: Vec::new(),
            security_groups: vec!["sg-1".into()],
            tags: Vec::new(),
            instance_id: Some("i-1".into()),
        })
        .collect();
    Instance {
        id: "i-1".into(),
        instance_type: "m5.large".into(),
        availability_zone: "zone-a".into(),
        vpc_id: "vpc-1".into(),
        interfaces,
    }
}

fn node(used: usize) -> CiliumNode {
    let mut node = CiliumNode {
        name: "node-1".into(),
        ..CiliumNode::default()
    };
    node.spec.instance_id = "i-1".into();
    node.spec.eni.first_interface_index = Some(1);
    node.status.ipam.used = (0..used)
        .map(|i| (format!("10.0.1.{}", i + 2), AllocationIp::default()))
        .collect();
    node
}

/// Median of `runs` timings of `iterations` calls, per call.
fn time(label: &str, iterations: u32, mut f: impl FnMut()) {
    let mut runs: Vec<Duration> = (0..9)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..iterations {
                f();
            }
            started.elapsed() / iterations
        })
        .collect();
    runs.sort();
    println!("{label:<58} {:>10.2?} per call (median of 9)", runs[4]);
}

fn main() {
    let instance = instance();
    let subnets = [Subnet {
        id: "subnet-a".into(),
        cidr: "10.0.0.0/16".parse().unwrap(),
        availability_zone: "zone-a".into(),
        vpc_id: "vpc-1".into(),
        available_addresses: 1000,
        tags: Vec::new(),
    }];
    let groups = [SecurityGroup {
        id: "sg-1".into(),
        vpc_id: "vpc-1".into(),
        tags: Vec::new(),
    }];
    let limits = InstanceLimits {
        max_interfaces: 3,
        ipv4_per_interface: 10,
        ipv6_per_interface: 0,
        prefix_delegation: false,
    };
    let capabilities = Capabilities {
        create_interface: true,
        release: true,
        prefixes: false,
        delete_interface: true,
    };
    let withheld = BTreeSet::new();
    let hungry = node(17);
    time(
        "allocation: needed + plan (assign on a 3x10 instance)",
        20_000,
        || {
            let needed = allocation::needed(&hungry, &instance, &withheld, 0);
            black_box(allocation::plan(&AllocationInput {
                node: &hungry,
                instance: &instance,
                limits,
                subnets: &subnets,
                security_groups: &groups,
                needed,
                capabilities,
                prefix_delegation: false,
                cluster_name: "c1",
                now_unix: 0,
                mode: IpamMode::Eni,
            }));
        },
    );
    let satisfied = node(2);
    time("allocation: needed of a satisfied node", 20_000, || {
        black_box(allocation::needed(&satisfied, &instance, &withheld, 0));
    });
    let pool = pool_of(&satisfied, &instance, &withheld);
    let first_seen = BTreeMap::new();
    let now = Instant::now();
    let ownership = Ownership::own_only("c1");
    time("release: plan with excess addresses", 20_000, || {
        black_box(release_plan::plan(&ReleasePlanInput {
            node: &satisfied,
            instance: &instance,
            pool: &pool,
            pending_pods: 0,
            capabilities,
            free_interfaces: true,
            ownership: &ownership,
            first_seen: &first_seen,
            now,
            release_delay: Duration::from_secs(180),
        }));
    });
    let names: Vec<String> = (0..5_000).map(|i| format!("node-{i:05}")).collect();
    time(
        "schedule: mark 5,000 nodes and take them in order",
        20,
        || {
            let mut schedule = Schedule::new();
            for (i, name) in names.iter().enumerate() {
                schedule.mark(name, (i % 17) as u32);
            }
            while let Some(name) = schedule.start_next() {
                schedule.done(&name, 0);
            }
        },
    );
}
