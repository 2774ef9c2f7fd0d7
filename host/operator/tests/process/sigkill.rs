//! The operator under SIGKILL: `ipam-operator run` as a process with the
//! AWS provider against moto, through a proxy that springs each kill at a
//! chosen moment (inside create-and-attach, between a cloud call and the
//! CiliumNode patch, during the release handshake, or at a random time),
//! and the fake API server over HTTP, with the test playing every node's
//! cilium-agent. Twenty nodes join, their pods grow and later shrink, and the
//! operator is killed and started again 30 times (`IPAM_SOAK_KILLS` for
//! more). After the last start settles, the cloud and the CiliumNodes agree
//! both ways: every node settled with every pod it wants holding an address
//! (nothing excess, no release in flight); every pool entry is a secondary
//! address of the interface its `resource` names, attached to the node's
//! own instance, and every secondary address of every interface attached to
//! a node's instance is in that node's pool; `status.eni.enis` lists exactly
//! those interfaces with exactly those addresses; no address is in two
//! pools; and no interface of ours is left detached past the
//! leaked-interface GC's grace.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipam_ciliumnode::{go_agent, CiliumNode};
use ipam_pool::agent;
use ipam_pool::backoff::jitter;
use ipam_tests::ec2_proxy::{Ec2Proxy, Moment};
use ipam_tests::fake_apiserver::{FakeApiServer, CILIUMNODES};
use ipam_tests::moto::Moto;
use serde_json::json;

use crate::support::{free_port, http_get, write_kubeconfig};

const NODES: usize = 20;
/// Kills in a default run; `IPAM_SOAK_KILLS` asks for another number.
const DEFAULT_KILLS: usize = 30;
const PRE_ALLOCATE: u32 = 4;
/// The pods each node wants once the kills are over.
const SETTLED_PODS: u32 = 5;
/// Seconds: short, so the soak exercises releases and GC in minutes.
const RELEASE_DELAY: u64 = 1;
const GC_INTERVAL: u64 = 2;
const GC_GRACE: u64 = 4;
/// How long a cycle waits for its trap before killing anyway.
const TRAP_WAIT: Duration = Duration::from_secs(20);

fn node_name(n: usize) -> String {
    format!("n{n:02}")
}

/// Where a cycle kills the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum KillAt {
    /// An interface created, not yet attached.
    CreatedNotAttached,
    /// The attach never reached the cloud.
    BeforeAttach,
    /// Addresses assigned in the cloud, the CiliumNode not yet patched.
    AssignedNotPublished,
    /// Addresses the agent released, unassigned in the cloud, not yet
    /// marked released.
    UnassignedNotMarked,
    /// An interface freed whole: deleted in the cloud, not yet recorded.
    DeletedNotRecorded,
    /// At a random time.
    Random,
}

impl KillAt {
    fn trap(self) -> Option<(&'static str, Moment)> {
        match self {
            KillAt::CreatedNotAttached => Some(("CreateNetworkInterface", Moment::After)),
            KillAt::BeforeAttach => Some(("AttachNetworkInterface", Moment::Before)),
            KillAt::AssignedNotPublished => Some(("AssignPrivateIpAddresses", Moment::After)),
            KillAt::UnassignedNotMarked => Some(("UnassignPrivateIpAddresses", Moment::After)),
            KillAt::DeletedNotRecorded => Some(("DeleteNetworkInterface", Moment::After)),
            KillAt::Random => None,
        }
    }
}

/// The pods each node wants in cycle `cycle` of `cycles`, and where that
/// cycle kills: the first half grows (creates, attaches, assigns), the
/// second shrinks (the release handshake, interfaces freed).
fn plan(cycle: usize, cycles: usize) -> (u32, KillAt) {
    const GROW: [KillAt; 4] = [
        KillAt::CreatedNotAttached,
        KillAt::AssignedNotPublished,
        KillAt::BeforeAttach,
        KillAt::Random,
    ];
    const SHRINK: [KillAt; 3] = [
        KillAt::UnassignedNotMarked,
        KillAt::DeletedNotRecorded,
        KillAt::Random,
    ];
    if cycle < cycles / 2 {
        ([6, 16, 10, 20][cycle % 4], GROW[cycle % GROW.len()])
    } else {
        ([2, 9, 1, 12][cycle % 4], SHRINK[cycle % SHRINK.len()])
    }
}

/// The test plays every node's cilium-agent: pods take pool addresses and
/// the release handshake is answered, as `ipam_pool::agent` decides, each
/// node read and written in one step of the fake server (so no write of the
/// operator's is lost between the two).
/// A node as the API server has it, read as the engine reads it.
fn parse(object: &serde_json::Value) -> Result<CiliumNode, String> {
    let object: kube::api::DynamicObject =
        serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    ipam_ciliumnode::kube::from_object(&object).map_err(|e| e.to_string())
}

/// The agents' task; it stops at the first node it cannot read, and says
/// why in `broken`.
fn spawn_agents(
    server: FakeApiServer,
    joined: Arc<AtomicU32>,
    pods: Arc<AtomicU32>,
    broken: Arc<Mutex<Option<String>>>,
) {
    tokio::spawn(async move {
        loop {
            let wanted = pods.load(Ordering::SeqCst);
            for n in 0..joined.load(Ordering::SeqCst) as usize {
                let mut failed = None;
                server.update(CILIUMNODES, &node_name(n), |object| {
                    let node = match parse(object) {
                        Ok(node) => node,
                        Err(error) => {
                            failed = Some(error);
                            return;
                        }
                    };
                    if let (Some(next), _pending) = agent::act(&node, wanted) {
                        object["status"]["ipam"]["used"] = json!(next.status.ipam.used);
                        object["status"]["ipam"]["release-ips"] =
                            json!(next.status.ipam.release_ips);
                    }
                });
                if let Some(error) = failed {
                    *broken.lock().unwrap() = Some(error);
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
}

struct Operator {
    binary: &'static str,
    args: Vec<String>,
    cache: PathBuf,
    logs: PathBuf,
}

impl Operator {
    fn start(&self, run: usize) -> Child {
        let log = std::fs::File::create(self.logs.join(format!("operator-{run}.log")))
            .expect("a log file");
        Command::new(self.binary)
            .args(&self.args)
            .env("IPAM_CACHE_DIR", &self.cache)
            .env("IPAM_COMPONENTS_DIR", ipam_tests::components_dir())
            .env("IPAM_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // A file, not a pipe: nothing has to read it while it runs.
            .stderr(log)
            .spawn()
            .expect("the operator starts")
    }

    fn log_tail(&self, run: usize) -> String {
        let text = std::fs::read_to_string(self.logs.join(format!("operator-{run}.log")))
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

fn kill(mut child: Child) {
    // Child::kill is SIGKILL on Unix: no handler runs, nothing is handed back.
    child.kill().expect("SIGKILL the operator");
    let _ = child.wait();
}

/// Whether the operator's /readyz answers 200.
fn readyz(listen: &str) -> bool {
    http_get(listen, "/readyz").is_some_and(|(code, _)| code == 200)
}

fn nodes(server: &FakeApiServer, joined: usize) -> Vec<CiliumNode> {
    (0..joined)
        .map(|n| {
            let object = server
                .get(CILIUMNODES, &node_name(n))
                .expect("the node exists");
            parse(&object).unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
}

/// Every network interface in moto, as boto3 describes it.
#[derive(Debug, serde::Deserialize)]
struct CloudInterface {
    id: String,
    status: String,
    instance: Option<String>,
    /// Its private addresses but the primary.
    secondaries: Vec<String>,
    ours: bool,
}

fn cloud_interfaces(moto: &Moto) -> Vec<CloudInterface> {
    let printed = moto.boto3(
        "out = []\n\
         for page in ec2.get_paginator('describe_network_interfaces').paginate():\n\
         \x20   for eni in page['NetworkInterfaces']:\n\
         \x20       out.append({'id': eni['NetworkInterfaceId'], 'status': eni['Status'],\n\
         \x20           'instance': eni.get('Attachment', {}).get('InstanceId'),\n\
         \x20           'secondaries': [a['PrivateIpAddress'] for a in eni['PrivateIpAddresses']\n\
         \x20                           if not a.get('Primary')],\n\
         \x20           'ours': any(t['Key'] == 'ipam-operator/cluster' for t in eni.get('TagSet', []))})\n\
         print(json.dumps(out))\n",
    );
    serde_json::from_str(&printed).expect("boto3 printed the interfaces")
}

/// Every pod the agents want runs, and the node needs and holds nothing
/// more.
fn settled(node: &CiliumNode) -> bool {
    node.status.ipam.used.len() == SETTLED_PODS as usize && agent::settled(node, 0)
}

/// Where the cloud and the node disagree: a pool entry that is not a
/// secondary address of the interface its `resource` names on the node's
/// instance, a secondary address of such an interface that is not in the
/// pool with that resource, or a `status.eni.enis` that is not those
/// interfaces with those addresses. Empty when they agree both ways.
fn disagreements(node: &CiliumNode, interfaces: &[CloudInterface]) -> Vec<String> {
    let mut found = Vec::new();
    let on_instance: Vec<&CloudInterface> = interfaces
        .iter()
        .filter(|i| i.instance.as_deref() == Some(node.spec.instance_id.as_str()))
        .collect();
    for (address, entry) in &node.spec.ipam.pool {
        let resource = entry.resource.as_deref().unwrap_or_default();
        let holds = on_instance
            .iter()
            .any(|i| i.id == resource && i.secondaries.contains(address));
        if !holds {
            found.push(format!(
                "{address} is pooled on {resource}, which does not hold it on {}",
                node.spec.instance_id
            ));
        }
    }
    for interface in &on_instance {
        for address in &interface.secondaries {
            let pooled = node.spec.ipam.pool.get(address);
            if pooled.and_then(|e| e.resource.as_deref()) != Some(interface.id.as_str()) {
                found.push(format!(
                    "{address} on {} is not in the pool as that interface's: {pooled:?}",
                    interface.id
                ));
            }
        }
        match node.status.eni.enis.get(&interface.id) {
            None => found.push(format!("{} is not in status.eni.enis", interface.id)),
            Some(eni) => {
                let published: BTreeSet<&String> = eni.addresses.iter().collect();
                let held: BTreeSet<&String> = interface.secondaries.iter().collect();
                if published != held {
                    found.push(format!(
                        "status.eni.enis lists {published:?} on {}, the cloud {held:?}",
                        interface.id
                    ));
                }
            }
        }
    }
    for id in node.status.eni.enis.keys() {
        if !on_instance.iter().any(|i| i.id == *id) {
            found.push(format!("status.eni.enis lists {id}, not on the instance"));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_killed_at_any_moment_leaves_the_cloud_and_the_nodes_consistent() {
    let kills: usize = std::env::var("IPAM_SOAK_KILLS")
        .ok()
        .map(|k| k.parse().expect("IPAM_SOAK_KILLS is a number"))
        .unwrap_or(DEFAULT_KILLS);
    let seed: u64 = std::env::var("IPAM_SOAK_SEED")
        .ok()
        .map(|s| s.parse().expect("IPAM_SOAK_SEED is a number"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or_default()
        });
    println!("soak: {kills} kills, seed {seed} (IPAM_SOAK_SEED replays it)");
    let started = Instant::now();

    let moto = Moto::start();
    let seeded = moto.seed_with(NODES);
    assert_eq!(seeded.instances.len(), NODES);
    let proxy = Ec2Proxy::start(&moto.endpoint).await;
    let server = FakeApiServer::default();
    let api = server.serve_http().await;

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(&kubeconfig, api);
    let settings = dir.path().join("aws.json");
    std::fs::write(
        &settings,
        json!({
            "region": "us-east-1",
            "endpoint": proxy.endpoint,
            "cluster-name": "test",
            "max-attempts": 1,
            "subnet-tags": {"ipam": "pods"},
            "security-group-tags": {"ipam": "pods"},
        })
        .to_string(),
    )
    .unwrap();
    let credentials = dir.path().join("credentials.yaml");
    std::fs::write(
        &credentials,
        "access-key-id: AKIDSOAK\nsecret-access-key: soak-secret\n",
    )
    .unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let operator = Operator {
        binary: env!("CARGO_BIN_EXE_ipam-operator"),
        args: [
            "run",
            "--provider=aws",
            "--cloud=aws",
            "--cluster-name=test",
            "--identity=soak",
            "--lease-namespace=kube-system",
            "--retry-period-seconds=1",
            "--resync-seconds=5",
            "--reuse-cooldown-seconds=0",
        ]
        .into_iter()
        .map(String::from)
        .chain([
            format!("--provider-settings={}", settings.display()),
            format!("--provider-credentials={}", credentials.display()),
            format!("--allow-egress={}", proxy.endpoint),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--listen={listen}"),
            format!("--release-delay-seconds={RELEASE_DELAY}"),
            format!("--gc-interval-seconds={GC_INTERVAL}"),
            format!("--gc-grace-seconds={GC_GRACE}"),
        ])
        .collect(),
        cache: dir.path().join("cache"),
        // IPAM_SOAK_LOGS keeps each start's log after the test.
        logs: std::env::var_os("IPAM_SOAK_LOGS")
            .map(PathBuf::from)
            .unwrap_or_else(|| dir.path().to_path_buf()),
    };

    let joined = Arc::new(AtomicU32::new(0));
    let pods = Arc::new(AtomicU32::new(0));
    let agents_broken = Arc::new(Mutex::new(None));
    spawn_agents(
        server.clone(),
        joined.clone(),
        pods.clone(),
        agents_broken.clone(),
    );
    let agents_alive = || {
        if let Some(error) = agents_broken.lock().unwrap().as_ref() {
            panic!("the agents stopped: {error}");
        }
    };
    let join = |upto: usize| {
        for n in joined.load(Ordering::SeqCst) as usize..upto {
            // As cilium-agent registers it in ENI mode.
            let mut node = go_agent::object(
                go_agent::ENI_AGENT_REGISTERED,
                &node_name(n),
                &seeded.instances[n],
            );
            node["spec"]["ipam"]["pre-allocate"] = json!(PRE_ALLOCATE);
            server.put(CILIUMNODES, node);
        }
        joined.store(upto as u32, Ordering::SeqCst);
    };

    // A first start compiles the provider into the cache and must not be
    // killed before it is done (each later start then loads it in
    // milliseconds): it runs until ready, with no node yet.
    let warm_up = operator.start(kills + 1);
    let deadline = Instant::now() + Duration::from_secs(600);
    while !readyz(&listen) {
        assert!(
            Instant::now() < deadline,
            "the first start was not ready in 600 s:\n{}",
            operator.log_tail(kills + 1)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    kill(warm_up);

    let mut sprung: BTreeMap<KillAt, (usize, usize)> = BTreeMap::new();
    let mut ours_at_peak = 0;
    for cycle in 0..kills {
        // The nodes join over the first four cycles.
        join((NODES * (cycle + 1) / 4).min(NODES));
        let (wanted, at) = plan(cycle, kills);
        pods.store(wanted, Ordering::SeqCst);
        let trap = at.trap().map(|(action, moment)| proxy.trap(action, moment));
        let child = operator.start(cycle);
        let fired = match trap {
            Some(heard) => tokio::time::timeout(TRAP_WAIT, heard).await.is_ok(),
            None => {
                // Random times from the seed (printed, so a run can be
                // replayed), with the pure core's own generator.
                let spread = jitter(seed.wrapping_add(cycle as u64));
                let millis = 300 + (spread * 4_000.0) as u64;
                tokio::time::sleep(Duration::from_millis(millis)).await;
                true
            }
        };
        kill(child);
        proxy.disarm();
        agents_alive();
        if cycle + 1 == kills / 2 {
            // At the peak of the growth: the GC's and the end's checks of
            // "ours" mean something only if the tag is recognised at all.
            ours_at_peak = cloud_interfaces(&moto).iter().filter(|i| i.ours).count();
        }
        let tally = sprung.entry(at).or_default();
        if fired {
            tally.0 += 1;
        } else {
            tally.1 += 1;
        }
    }
    println!(
        "soak: kills by moment (sprung, killed at the {TRAP_WAIT:?} limit instead): {sprung:?}"
    );
    for (at, (fired, _)) in &sprung {
        assert!(*fired > 0, "no kill at {at:?} sprang: {sprung:?}");
    }
    assert!(
        ours_at_peak > 0,
        "no interface in moto was recognised as this operator's at the peak"
    );

    // The last start: the pods settle on a level that keeps every kind of
    // work done, and the operator runs to the end.
    join(NODES);
    pods.store(SETTLED_PODS, Ordering::SeqCst);
    let last = kills;
    let last_started = Instant::now();
    let mut child = operator.start(last);
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut ready = false;
    let settled_at = loop {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the operator exited ({status}):\n{}",
                operator.log_tail(last)
            );
        }
        // Settled counts only once this start is ready (its first resync
        // done and every node had a pass).
        ready = ready || readyz(&listen);
        if !ready {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        agents_alive();
        let all = nodes(&server, NODES);
        if all.iter().all(settled) {
            break Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "not settled in 180 s: {:#?}\n{}",
            all.iter()
                .filter(|n| !settled(n))
                .map(|n| (
                    &n.name,
                    n.spec.ipam.pool.clone(),
                    n.status.ipam.used.keys().collect::<Vec<_>>(),
                    &n.status.ipam.release_ips
                ))
                .collect::<Vec<_>>(),
            operator.log_tail(last)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Whatever the last kill leaked detached goes within two GC rounds past
    // its grace: polled until then.
    let gc_deadline = Instant::now() + Duration::from_secs(GC_GRACE + 2 * GC_INTERVAL + 10);
    let interfaces = loop {
        let interfaces = cloud_interfaces(&moto);
        let detached: Vec<&CloudInterface> = interfaces
            .iter()
            .filter(|i| i.ours && i.status != "in-use")
            .collect();
        if detached.is_empty() {
            break interfaces;
        }
        assert!(
            Instant::now() < gc_deadline,
            "left detached past the GC's grace: {detached:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let all = nodes(&server, NODES);
    kill(child);

    // Every node settled, no address in two pools, and each node and the
    // cloud agree both ways.
    let mut pooled: BTreeSet<&String> = BTreeSet::new();
    for node in &all {
        assert!(settled(node), "{} is not settled", node.name);
        for address in node.spec.ipam.pool.keys() {
            assert!(pooled.insert(address), "{address} is in two pools");
        }
        let found = disagreements(node, &interfaces);
        assert!(found.is_empty(), "{}: {found:#?}", node.name);
    }

    let mutating: BTreeMap<String, usize> = proxy
        .requests()
        .into_iter()
        .filter(|r| {
            [
                "CreateNetworkInterface",
                "AttachNetworkInterface",
                "DetachNetworkInterface",
                "DeleteNetworkInterface",
                "AssignPrivateIpAddresses",
                "UnassignPrivateIpAddresses",
                "ModifyNetworkInterfaceAttribute",
                "CreateTags",
            ]
            .contains(&r.action.as_str())
        })
        .fold(BTreeMap::new(), |mut counts, r| {
            *counts.entry(r.action).or_default() += 1;
            counts
        });
    let total: usize = mutating.values().sum();
    println!(
        "soak: settled {:.1} s after the last start; {total} mutating EC2 calls, {:.1} per node: {mutating:?}; {:.0} s in all",
        settled_at.duration_since(last_started).as_secs_f64(),
        total as f64 / NODES as f64,
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn the_end_state_check_finds_disagreements_both_ways() {
    use ipam_ciliumnode::{AllocationIp, EniInterface};

    let interface = |id: &str, secondaries: &[&str]| CloudInterface {
        id: id.into(),
        status: "in-use".into(),
        instance: Some("i-1".into()),
        secondaries: secondaries.iter().map(|a| a.to_string()).collect(),
        ours: false,
    };
    let mut node = go_agent::eni_node("n", "i-1");
    let on = |id: &str| AllocationIp {
        owner: None,
        resource: Some(id.into()),
    };
    node.spec.ipam.pool.insert("10.0.0.10".into(), on("eni-a"));
    node.status.eni.enis.insert(
        "eni-a".into(),
        EniInterface {
            id: "eni-a".into(),
            addresses: vec!["10.0.0.10".into()],
            ..Default::default()
        },
    );
    assert_eq!(
        disagreements(&node, &[interface("eni-a", &["10.0.0.10"])]),
        Vec::<String>::new()
    );
    // In the cloud, not in the pool.
    assert_eq!(
        disagreements(&node, &[interface("eni-a", &["10.0.0.10", "10.0.0.11"])]).len(),
        2,
        "missing from the pool and from status.eni.enis"
    );
    // In the pool on the wrong interface.
    let moved = [interface("eni-a", &[]), interface("eni-b", &["10.0.0.10"])];
    let found = disagreements(&node, &moved);
    assert!(
        found.iter().any(|f| f.contains("pooled on eni-a")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|f| f.contains("eni-b is not in status")),
        "{found:?}"
    );
}
