//! The migration page (docs/migration.md) followed against moto and the
//! fake API server: a cluster whose CiliumNode and ENIs Cilium wrote
//! (Cilium's operator's ENI tags and description; the node as Cilium's
//! operator leaves it, `go_agent::ENI_OPERATOR_WRITTEN`) -> `plan` (the
//! node adopted as it is, the leaked Cilium ENI found; nothing changed in
//! EC2 or the cluster) -> `run` (no mutating EC2 call while the node is
//! satisfied) -> the node grows on Cilium's ENI -> rollback (the operator
//! stopped) leaves a CiliumNode Cilium's agent and operator read as theirs.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ipam_ciliumnode::crd_schema::{self, Nulls};
use ipam_ciliumnode::go_agent;
use ipam_tests::fake_apiserver::{FakeApiServer, CILIUMNODES};
use ipam_tests::moto::Moto;
use serde_json::{json, Value};

use crate::support::{free_port, http_get, terminate, write_kubeconfig};

const NODE: &str = "ip-10-0-0-10.ec2.internal";

/// What the test made in EC2 as Cilium's operator would have.
#[derive(Debug, serde::Deserialize)]
struct CiliumMade {
    /// Attached at device index 1, four secondary addresses.
    eni: String,
    mac: String,
    primary_ip: String,
    secondaries: Vec<String>,
    subnet: String,
    subnet_cidr: String,
    /// The instance's own interface at index 0.
    primary_eni: String,
    primary_eni_ip: String,
    primary_eni_mac: String,
    node_subnet_cidr: String,
    /// Detached: left behind by Cilium's operator.
    leaked: String,
}

/// Cilium's operator's tags on the ENIs it creates (its ENI GC tags with
/// --cluster-name=test), and its description.
fn make_cilium_enis(moto: &Moto, instance: &str, subnet: &str, group: &str) -> CiliumMade {
    let printed = moto.boto3(&format!(
        "tags = [{{'ResourceType': 'network-interface', 'Tags': [\n\
         \x20   {{'Key': 'io.cilium/cilium-managed', 'Value': 'true'}},\n\
         \x20   {{'Key': 'io.cilium/cluster-name', 'Value': 'test'}}]}}]\n\
         def made():\n\
         \x20   return ec2.create_network_interface(SubnetId='{subnet}', Groups=['{group}'],\n\
         \x20       Description='Cilium-CNI ({instance})', TagSpecifications=tags)['NetworkInterface']\n\
         eni = made()\n\
         ec2.attach_network_interface(NetworkInterfaceId=eni['NetworkInterfaceId'],\n\
         \x20   InstanceId='{instance}', DeviceIndex=1)\n\
         ec2.assign_private_ip_addresses(NetworkInterfaceId=eni['NetworkInterfaceId'],\n\
         \x20   SecondaryPrivateIpAddressCount=4)\n\
         leaked = made()\n\
         eni = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni['NetworkInterfaceId']])['NetworkInterfaces'][0]\n\
         primary = [e for e in ec2.describe_network_interfaces()['NetworkInterfaces']\n\
         \x20   if e.get('Attachment', {{}}).get('InstanceId') == '{instance}'\n\
         \x20   and e['Attachment']['DeviceIndex'] == 0][0]\n\
         cidr = lambda s: ec2.describe_subnets(SubnetIds=[s])['Subnets'][0]['CidrBlock']\n\
         print(json.dumps({{'eni': eni['NetworkInterfaceId'], 'mac': eni['MacAddress'],\n\
         \x20   'primary_ip': eni['PrivateIpAddress'],\n\
         \x20   'secondaries': sorted(a['PrivateIpAddress'] for a in eni['PrivateIpAddresses'] if not a['Primary']),\n\
         \x20   'subnet': '{subnet}', 'subnet_cidr': cidr('{subnet}'),\n\
         \x20   'primary_eni': primary['NetworkInterfaceId'], 'primary_eni_ip': primary['PrivateIpAddress'],\n\
         \x20   'primary_eni_mac': primary['MacAddress'], 'node_subnet_cidr': cidr(primary['SubnetId']),\n\
         \x20   'leaked': leaked['NetworkInterfaceId']}}))\n"
    ));
    serde_json::from_str(&printed).expect("boto3 printed what it made")
}

/// Every interface in EC2 with what a change would touch: attachment,
/// addresses, tags. Equal before and after means nothing was changed.
fn ec2_state(moto: &Moto) -> String {
    moto.boto3(
        "out = []\n\
         for eni in ec2.describe_network_interfaces()['NetworkInterfaces']:\n\
         \x20   out.append([eni['NetworkInterfaceId'], eni['Status'],\n\
         \x20       eni.get('Attachment', {}).get('InstanceId'), eni.get('Attachment', {}).get('DeviceIndex'),\n\
         \x20       sorted(a['PrivateIpAddress'] for a in eni['PrivateIpAddresses']),\n\
         \x20       sorted(p['Ipv4Prefix'] for p in eni.get('Ipv4Prefixes', [])),\n\
         \x20       sorted((t['Key'], t['Value']) for t in eni.get('TagSet', []))])\n\
         print(json.dumps(sorted(out)))\n",
    )
}

/// The node as Cilium's operator leaves it on `instance`: 4 addresses of
/// Cilium's ENI in the pool, 2 used, pre-allocate 2 (satisfied, nothing
/// excess), both ENIs in status.eni.enis.
fn cilium_written(instance: &str, made: &CiliumMade, seeded: &ipam_tests::moto::Seeded) -> Value {
    let mut object = go_agent::object(go_agent::ENI_OPERATOR_WRITTEN, NODE, instance);
    object["spec"]["eni"] = json!({
        "instance-type": "m5.large", "first-interface-index": 1,
        "node-subnet-id": seeded.node_subnet, "vpc-id": seeded.vpc,
        "availability-zone": "us-east-1a", "use-primary-address": false,
        "disable-prefix-delegation": false,
        "subnet-tags": {"ipam": "pods"}, "security-group-tags": {"ipam": "pods"}
    });
    object["spec"]["ipam"]["pre-allocate"] = json!(2);
    object["spec"]["ipam"]["pool"] = made
        .secondaries
        .iter()
        .map(|ip| (ip.clone(), json!({"resource": made.eni})))
        .collect::<serde_json::Map<_, _>>()
        .into();
    let vpc = json!({"id": seeded.vpc, "primary-cidr": "10.0.0.0/16", "cidrs": ["10.1.0.0/16"]});
    object["status"]["eni"]["enis"] = json!({
        made.primary_eni.clone(): {
            "id": made.primary_eni, "ip": made.primary_eni_ip, "mac": made.primary_eni_mac,
            "subnet": {"id": seeded.node_subnet, "cidr": made.node_subnet_cidr},
            "vpc": vpc, "security-groups": [seeded.security_group],
            "tags": {}
        },
        made.eni.clone(): {
            "id": made.eni, "ip": made.primary_ip, "mac": made.mac, "number": 1,
            "description": format!("Cilium-CNI ({instance})"),
            "subnet": {"id": made.subnet, "cidr": made.subnet_cidr},
            "vpc": vpc, "addresses": made.secondaries, "security-groups": [seeded.security_group],
            "tags": {"io.cilium/cilium-managed": "true", "io.cilium/cluster-name": "test"}
        }
    });
    object["status"]["ipam"]["used"] = json!({
        made.secondaries[0].clone(): {"owner": "kube-system/coredns-1", "resource": made.eni},
        made.secondaries[1].clone(): {"owner": "default/web-1", "resource": made.eni},
    });
    object
}

/// The operator's command with the flags the migration page gives: the
/// AWS component against moto, Cilium's ENIs adopted by their cluster tag.
fn operator(
    dir: &std::path::Path,
    kubeconfig: &std::path::Path,
    moto: &Moto,
    command: &str,
) -> Command {
    let settings = dir.join("aws.json");
    std::fs::write(
        &settings,
        moto.settings(
            json!({"subnet-tags": {"ipam": "pods"}, "security-group-tags": {"ipam": "pods"}}),
        ),
    )
    .unwrap();
    let credentials = dir.join("credentials.yaml");
    std::fs::write(
        &credentials,
        "access-key-id: AKIDTEST\nsecret-access-key: secret\n",
    )
    .unwrap();
    let mut operator = Command::new(env!("CARGO_BIN_EXE_ipam-operator"));
    operator
        .arg(command)
        .args([
            "--provider=aws",
            "--cloud=aws",
            "--cluster-name=test",
            "--adopt-interface-tags=io.cilium/cluster-name=test",
            "--leader-elect=false",
            "--resync-seconds=2",
        ])
        .arg(format!("--provider-settings={}", settings.display()))
        .arg(format!("--provider-credentials={}", credentials.display()))
        .arg(format!("--allow-egress={}", moto.endpoint))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .env("IPAM_CACHE_DIR", dir.join("cache"))
        .env("IPAM_COMPONENTS_DIR", ipam_tests::components_dir())
        .env("IPAM_LOG", "info")
        .stdin(Stdio::null());
    operator
}

/// The operator's mutating EC2 calls so far, from its /metrics.
fn mutating_calls(listen: &str) -> Vec<String> {
    let (_, text) = http_get(listen, "/metrics").expect("/metrics answers");
    text.lines()
        .filter(|l| l.starts_with("cilium_operator_ipam_api_calls_total{"))
        .filter(|l| {
            [
                "create-interface",
                "assign-ips",
                "unassign-ips",
                "delete-interface",
            ]
            .iter()
            .any(|op| l.contains(&format!("operation=\"{op}\"")))
        })
        .map(String::from)
        .collect()
}

fn resyncs(listen: &str) -> u64 {
    http_get(listen, "/metrics")
        .and_then(|(_, text)| {
            text.lines()
                .find(|l| l.starts_with("cilium_operator_ipam_resync_total "))
                .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        })
        .unwrap_or(0)
}

async fn until(child: &mut Child, log: &std::path::Path, what: &str, done: impl Fn() -> bool) {
    for _ in 0..600 {
        if done() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the operator exited ({status}) before {what}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    panic!(
        "not within 60 s: {what}\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

fn pool(object: &Value) -> Vec<(String, String)> {
    object["spec"]["ipam"]["pool"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(ip, entry)| {
            (
                ip.clone(),
                entry["resource"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cilium_written_cluster_is_planned_taken_over_grown_and_handed_back() {
    let moto = Moto::start();
    let seeded = moto.seed_with(1);
    let instance = seeded.instances[0].clone();
    let made = make_cilium_enis(
        &moto,
        &instance,
        &seeded.pod_subnets[0],
        &seeded.security_group,
    );
    assert_eq!(made.secondaries.len(), 4);
    let server = FakeApiServer::default();
    let api = server.serve_http().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(&kubeconfig, api);
    let written = cilium_written(&instance, &made, &seeded);
    server.put(CILIUMNODES, written.clone());
    let as_written = server.get(CILIUMNODES, NODE).expect("the node");
    let ec2_before = ec2_state(&moto);

    // 1. plan: the node adopted as it is, Cilium's leaked ENI found; nothing
    // changed anywhere.
    let output = operator(dir.path(), &kubeconfig, &moto, "plan")
        .arg("--output=json")
        .output()
        .expect("plan runs");
    assert!(
        output.status.success(),
        "plan failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let plan: Value = serde_json::from_slice(&output.stdout).expect("plan prints JSON");
    assert_eq!(plan["nodes"][0]["name"], json!(NODE));
    assert_eq!(
        plan["nodes"][0]["verdict"],
        json!("adopted-as-is"),
        "{plan:#}"
    );
    assert_eq!(plan["nodes"][0]["calls"], json!([]));
    assert_eq!(
        plan["gc"]["leaked"],
        json!([{"interface": made.leaked, "subnet": made.subnet}])
    );
    assert_eq!(
        plan["changes"],
        json!({"delete-interface": 1}),
        "only the GC's delete"
    );
    assert_eq!(ec2_state(&moto), ec2_before, "plan changed EC2");
    assert_eq!(
        server.get(CILIUMNODES, NODE),
        Some(as_written.clone()),
        "plan wrote the node"
    );
    let text = operator(dir.path(), &kubeconfig, &moto, "plan")
        .output()
        .expect("plan runs");
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("adopted as it is, nothing to do"), "{text}");
    assert_eq!(ec2_state(&moto), ec2_before);

    // 2. run: no mutating call while the node is satisfied. The GC's first
    // round only suspects the leaked ENI; an hour passes before its second.
    let listen = format!("127.0.0.1:{}", free_port());
    let log = dir.path().join("operator.log");
    let mut child = operator(dir.path(), &kubeconfig, &moto, "run")
        .arg(format!("--listen={listen}"))
        .arg("--gc-interval-seconds=3600")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("run starts");
    until(&mut child, &log, "three resyncs", || resyncs(&listen) >= 3).await;
    assert_eq!(
        mutating_calls(&listen),
        Vec::<String>::new(),
        "run changed EC2 for a satisfied node"
    );
    assert_eq!(ec2_state(&moto), ec2_before);
    let taken_over = server.get(CILIUMNODES, NODE).expect("the node");
    assert_eq!(
        pool(&taken_over),
        pool(&as_written),
        "the pool is kept as Cilium wrote it"
    );

    // 3. The node grows: all four addresses in use, two more wanted; they
    // come on Cilium's ENI, which has room.
    let mut grown = taken_over.clone();
    for ip in &made.secondaries[2..] {
        grown["status"]["ipam"]["used"][ip] =
            json!({"owner": format!("default/{ip}"), "resource": made.eni});
    }
    server.put(CILIUMNODES, grown);
    until(&mut child, &log, "two more addresses in the pool", || {
        server
            .get(CILIUMNODES, NODE)
            .is_some_and(|n| pool(&n).len() == 6)
    })
    .await;
    let after = server.get(CILIUMNODES, NODE).expect("the node");
    assert!(
        pool(&after).iter().all(|(_, eni)| *eni == made.eni),
        "every address on Cilium's ENI: {:?}",
        pool(&after)
    );
    assert_eq!(
        mutating_calls(&listen).len(),
        1,
        "one assign: {:?}",
        mutating_calls(&listen)
    );

    // 4. Rollback: the operator stops; Cilium's operator takes the node back
    // as it finds it: every pool entry on an ENI of status.eni.enis, both
    // with the fields Cilium writes, and nothing the CRD would refuse.
    assert!(terminate(&mut child).await.success());
    let handed_back = server.get(CILIUMNODES, NODE).expect("the node");
    let enis = handed_back["status"]["eni"]["enis"]
        .as_object()
        .expect("status.eni.enis");
    for (ip, eni) in pool(&handed_back) {
        let entry = &enis
            .get(&eni)
            .unwrap_or_else(|| panic!("{ip}'s {eni} not in status.eni.enis"));
        assert!(
            entry["addresses"].as_array().unwrap().contains(&json!(ip)),
            "{ip} not on {eni}"
        );
        for field in [
            "id",
            "ip",
            "mac",
            "subnet",
            "vpc",
            "security-groups",
            "tags",
        ] {
            assert!(!entry[field].is_null(), "{eni} lacks {field}: {entry:#}");
        }
    }
    assert_eq!(
        enis[&made.eni]["tags"]["io.cilium/cluster-name"],
        json!("test"),
        "Cilium's ENI keeps its tags"
    );
    // What this crate's model reads of the node (the fields the operator
    // owns among them) holds nothing the CRD would prune or refuse.
    let model = crd_schema::object_of(&go_agent::node_of(&handed_back));
    let findings = crd_schema::check(&crd_schema::ciliumnode(), &model, Nulls::Refused);
    assert!(findings.is_empty(), "{findings:#?}");
    assert_eq!(
        handed_back["status"]["ipam"]["used"],
        after["status"]["ipam"]["used"]
    );
}
