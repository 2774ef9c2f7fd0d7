//! The Azure component through the host against the ARM stub
//! (`tests/src/arm_stub.rs`): every operation, a scale-set VM and a
//! standalone VM each getting addresses and giving them back (the release
//! Cilium's Azure mode lacks), ARM's errors as WIT variants, the
//! conformance suite, the engine converging Azure-mode nodes and releasing
//! their excess through the handshake, the host's Entra token and default
//! egress, settings (the deploy overlay's among them) and credentials, and
//! the requests it sends against the custom roles of `deploy/azure/`.

use ipam_tests as common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::arm_stub::{self, ArmStub, Fault};
use http::Method;
use ipam_cloud::credentials::{Credentials, StaticCredentials};
use ipam_cloud::{CloudApi, CreateInterfaceRequest, IpRequest, ProviderError};
use ipam_provider_runtime::WasmProvider;

/// The component with `settings`, allowed to reach `endpoint` only, given
/// `credentials` by the host.
async fn load(
    settings: serde_json::Value,
    endpoint: &str,
    credentials: Credentials,
) -> WasmProvider {
    let mut config = common::config(&settings.to_string());
    config.limits.timeout = Duration::from_secs(30);
    config.egress = vec![endpoint.to_string()];
    config.credentials = std::sync::Arc::new(StaticCredentials(credentials));
    common::runtime()
        .load(&common::component("azure"), config)
        .await
        .expect("the azure component loads")
}

fn token(value: &str) -> Credentials {
    Credentials {
        values: [("access-token".to_string(), value.to_string())]
            .into_iter()
            .collect(),
        // An hour from now, as Entra's tokens last.
        expires_at: Some(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_secs()
                + 3600,
        ),
    }
}

async fn azure(arm: &ArmStub) -> WasmProvider {
    load(arm.settings(), &arm.endpoint, token(arm_stub::TOKEN)).await
}

fn lower(id: &str) -> String {
    id.to_ascii_lowercase()
}

/// In the stub's subnet, 10.0.0.0/24.
fn subnet_contains(address: Ipv4Addr) -> bool {
    address.octets()[..3] == [10, 0, 0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_operation_answers_from_arm() {
    let arm = ArmStub::start().await;
    let azure = azure(&arm).await;

    let vpcs = azure.get_vpcs().await.expect("vpcs");
    assert_eq!(vpcs.len(), 1);
    // Ids as ARM spells them, as Cilium's operator keeps them.
    assert_eq!(vpcs[0].id, arm_stub::vnet_id());
    assert_eq!(vpcs[0].primary_cidr.to_string(), "10.0.0.0/16");

    let subnets = azure.get_subnets().await.expect("subnets");
    assert_eq!(subnets.len(), 1);
    assert_eq!(subnets[0].id, arm_stub::subnet_id());
    assert_eq!(subnets[0].vpc_id, vpcs[0].id);
    assert_eq!(subnets[0].availability_zone, arm_stub::LOCATION);
    // 256 less Azure's 5 less the two NICs' configurations.
    assert_eq!(subnets[0].available_addresses, 249);

    let groups = azure.get_security_groups().await.expect("NSGs");
    assert_eq!(groups.len(), 1);
    assert!(
        groups[0].id.ends_with("/networkSecurityGroups/nodes-nsg"),
        "{}",
        groups[0].id
    );
    assert_eq!(groups[0].vpc_id, vpcs[0].id);

    let mut instances = azure.get_instances(&[]).await.expect("instances");
    instances.sort_by(|a, b| a.id.cmp(&b.id));
    let ids: Vec<&str> = instances.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            lower(&arm_stub::vm_id()),
            lower(&arm_stub::scale_set_vm_id())
        ]
    );
    let (vm, scale_set_vm) = (&instances[0], &instances[1]);
    assert_eq!(vm.instance_type, arm_stub::VM_SIZE);
    assert_eq!(scale_set_vm.instance_type, arm_stub::SCALE_SET_VM_SIZE);
    assert_eq!(scale_set_vm.availability_zone, arm_stub::LOCATION);
    let nic = &scale_set_vm.interfaces[0];
    assert_eq!(nic.id, arm_stub::scale_set_nic_id());
    assert_eq!(nic.index, 0);
    // ARM's case, with ':' for '-', as Cilium writes it.
    assert_eq!(nic.mac, "00:0D:3A:00:00:01");
    assert_eq!(nic.primary_ip, Ipv4Addr::new(10, 0, 0, 4));
    assert!(nic.addresses.is_empty());
    assert_eq!(nic.subnet_id, subnets[0].id);
    assert_eq!(nic.instance_id.as_deref(), Some(scale_set_vm.id.as_str()));
    assert_eq!(vm.interfaces[0].id, arm_stub::vm_nic_id());
    assert_eq!(vm.interfaces[0].primary_ip, Ipv4Addr::new(10, 0, 0, 5));

    // Named instances, whatever the case of the id; unknown ones left out.
    let named = azure
        .get_instances(&[arm_stub::vm_id(), "/subscriptions/x/nothing".into()])
        .await
        .expect("named instances");
    assert_eq!(named.len(), 1);
    assert_eq!(named[0].id, lower(&arm_stub::vm_id()));

    let limits = azure
        .get_instance_limits(arm_stub::SCALE_SET_VM_SIZE)
        .await
        .expect("limits");
    assert_eq!(
        (
            limits.max_interfaces,
            limits.ipv4_per_interface,
            limits.prefix_delegation
        ),
        (2, 256, false)
    );
    let unknown = azure
        .get_instance_limits("Standard_Nope")
        .await
        .expect_err("unknown size");
    assert_eq!(unknown.response_code(), "not-found", "{unknown}");
    assert!(azure
        .get_detached_interfaces(&[])
        .await
        .expect("none")
        .is_empty());

    // get-vpcs' listing of the virtual networks served the get-subnets
    // right after it: one listing, not two.
    let vnet_listings = arm
        .seen()
        .iter()
        .filter(|s| s.method == Method::GET && s.path.ends_with("/virtualNetworks"))
        .count();
    assert_eq!(vnet_listings, 1, "get-vpcs then get-subnets list once");

    // Every request carried the host's token; scale-set NICs were listed at
    // the api-version ARM serves them at.
    let seen = arm.seen();
    assert!(seen
        .iter()
        .all(|s| s.authorization.as_deref() == Some(&format!("Bearer {}", arm_stub::TOKEN))));
    let scale_set_nics = seen
        .iter()
        .find(|s| {
            s.path
                .ends_with("/virtualMachineScaleSets/pool/networkInterfaces")
        })
        .expect("the scale set's NICs were listed");
    assert!(
        scale_set_nics.query.contains("api-version=2018-10-01"),
        "{}",
        scale_set_nics.query
    );
    // The standalone NICs came a page at a time.
    let pages = seen
        .iter()
        .filter(|s| s.path.ends_with("/Microsoft.Network/networkInterfaces"))
        .count();
    assert!(pages >= 2, "{pages} pages");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interfaces_are_neither_created_nor_deleted() {
    let arm = ArmStub::start().await;
    let azure = azure(&arm).await;
    let caps = azure.info().capabilities;
    assert!(!caps.create_interface && !caps.delete_interface && !caps.prefixes);
    assert!(caps.release);
    let request = CreateInterfaceRequest {
        instance_id: lower(&arm_stub::vm_id()),
        index: 1,
        subnet_id: lower(&arm_stub::subnet_id()),
        security_groups: vec![],
        description: "test".into(),
        tags: vec![],
        delete_on_termination: true,
        ipv4_count: 1,
        use_prefixes: false,
    };
    let refused = azure
        .create_interface(&request)
        .await
        .expect_err("no create-interface");
    assert_eq!(refused.response_code(), "invalid-argument", "{refused}");
    let refused = azure
        .delete_interface(&arm_stub::vm_nic_id())
        .await
        .expect_err("no delete-interface");
    assert_eq!(refused.response_code(), "invalid-argument", "{refused}");
    let refused = azure
        .assign_ips(&arm_stub::vm_nic_id(), IpRequest::Prefixes(1))
        .await
        .expect_err("no prefixes");
    assert_eq!(refused.response_code(), "invalid-argument", "{refused}");
    assert!(
        arm.seen().iter().all(|s| s.method == Method::GET),
        "nothing was written"
    );
}

async fn secondaries(azure: &WasmProvider, nic_id: &str) -> Vec<Ipv4Addr> {
    let instances = azure.get_instances(&[]).await.expect("instances");
    instances
        .iter()
        .flat_map(|i| &i.interfaces)
        .find(|n| n.id == nic_id)
        .map(|n| n.addresses.clone())
        .unwrap_or_else(|| panic!("{nic_id} is listed"))
}

fn puts(arm: &ArmStub) -> Vec<arm_stub::Seen> {
    arm.seen()
        .into_iter()
        .filter(|s| s.method == Method::PUT)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_set_vm_gets_addresses_and_gives_them_back() {
    let arm = ArmStub::start().await;
    let azure = azure(&arm).await;
    let nic = arm_stub::scale_set_nic_id();

    let assigned = azure
        .assign_ips(&nic, IpRequest::Addresses(2))
        .await
        .expect("assigned");
    assert_eq!(assigned.addresses.len(), 2);
    assert!(assigned.prefixes.is_empty());
    assert!(
        assigned.addresses.iter().all(|a| subnet_contains(*a)),
        "{:?}",
        assigned.addresses
    );
    let mut listed = secondaries(&azure, &nic).await;
    listed.sort();
    let mut want = assigned.addresses.clone();
    want.sort();
    assert_eq!(listed, want);

    // One PUT of the VM's model, under the etag it was read with, without
    // the gallery image reference (the stub refuses it, as ARM does).
    let written = puts(&arm);
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].path, arm_stub::scale_set_vm_id());
    assert_eq!(written[0].if_match.as_deref(), Some("\"1\""));
    let model = arm.scale_set_vm();
    let configs = &model["properties"]["networkProfileConfiguration"]
        ["networkInterfaceConfigurations"][0]["properties"]["ipConfigurations"];
    let names: Vec<&str> = configs
        .as_array()
        .expect("configs")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names.len(), 3);
    assert!(
        names[1].starts_with("Cilium-") && names[2].starts_with("Cilium-"),
        "{names:?}"
    );
    assert_eq!(
        configs[1]["properties"]["subnet"]["id"],
        arm_stub::subnet_id()
    );
    assert_eq!(
        configs[1]["properties"]["applicationSecurityGroups"],
        configs[0]["properties"]["applicationSecurityGroups"]
    );

    // Give one back; again is a no-op that writes nothing.
    let released = assigned.addresses[0];
    azure
        .unassign_ips(&nic, &[released], &[])
        .await
        .expect("released");
    assert_eq!(secondaries(&azure, &nic).await, [assigned.addresses[1]]);
    arm.forget_seen();
    azure
        .unassign_ips(&nic, &[released], &[])
        .await
        .expect("released again");
    assert!(puts(&arm).is_empty(), "nothing left to write");
    let primary = azure
        .unassign_ips(&nic, &[Ipv4Addr::new(10, 0, 0, 4)], &[])
        .await
        .expect_err("the primary address stays");
    assert_eq!(primary.response_code(), "invalid-argument", "{primary}");
    azure
        .unassign_ips(&nic, &[assigned.addresses[1]], &[])
        .await
        .expect("released");
    assert!(secondaries(&azure, &nic).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_vm_gets_addresses_and_gives_them_back() {
    let arm = ArmStub::start().await;
    let azure = azure(&arm).await;
    let nic = arm_stub::vm_nic_id();

    let assigned = azure
        .assign_ips(&nic, IpRequest::Addresses(3))
        .await
        .expect("assigned");
    assert_eq!(assigned.addresses.len(), 3);
    let mut held = arm.nic_addresses(&nic);
    held.sort();
    let mut want = assigned.addresses.clone();
    want.push(Ipv4Addr::new(10, 0, 0, 5));
    want.sort();
    assert_eq!(
        held, want,
        "what ARM holds is what was answered, and the primary"
    );
    let written = puts(&arm);
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].path, nic);
    assert_eq!(written[0].if_match.as_deref(), Some("W/\"1\""));
    // The operation was polled to completion before the answer.
    assert!(arm.seen().iter().any(|s| s.path.contains("/operations/")));

    azure
        .unassign_ips(&nic, &assigned.addresses[..2], &[])
        .await
        .expect("released");
    assert_eq!(secondaries(&azure, &nic).await, [assigned.addresses[2]]);
    azure
        .unassign_ips(&nic, &assigned.addresses[..2], &[])
        .await
        .expect("released again: idempotent");
    assert_eq!(puts(&arm).len(), 2, "the repeat wrote nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arms_errors_become_the_wit_variants() {
    let arm = ArmStub::start().await;
    let azure = azure(&arm).await;
    let vm_nic = arm_stub::vm_nic_id();
    let scale_set_nic = arm_stub::scale_set_nic_id();

    arm.fault(Fault::Status {
        method: Method::GET,
        status: 429,
        code: "TooManyRequests",
        retry_after: Some(7),
    });
    let error = azure.get_vpcs().await.expect_err("throttled");
    assert_eq!(
        error.provider_error(),
        Some(&ProviderError::Throttled(Duration::from_secs(7))),
        "{error}"
    );

    arm.fault(Fault::Status {
        method: Method::PUT,
        status: 409,
        code: "AnotherOperationInProgress",
        retry_after: Some(2),
    });
    let error = azure
        .assign_ips(&vm_nic, IpRequest::Addresses(1))
        .await
        .expect_err("busy");
    assert_eq!(
        error.provider_error(),
        Some(&ProviderError::Throttled(Duration::from_secs(2))),
        "{error}"
    );

    // Another writer changed the NIC between the read and the write: the
    // etag no longer matches, and nothing is lost.
    arm.fault(Fault::ChangedBeforePut);
    let error = azure
        .assign_ips(&vm_nic, IpRequest::Addresses(1))
        .await
        .expect_err("changed");
    assert_eq!(error.response_code(), "conflict", "{error}");
    assert_eq!(
        arm.nic_addresses(&vm_nic).len(),
        1,
        "the conflicting write changed nothing"
    );
    arm.fault(Fault::ChangedBeforePut);
    let error = azure
        .assign_ips(&scale_set_nic, IpRequest::Addresses(1))
        .await
        .expect_err("changed");
    assert_eq!(error.response_code(), "conflict", "{error}");

    for (status, code, want) in [
        (401, "InvalidAuthenticationToken", "unauthorized"),
        (403, "AuthorizationFailed", "unauthorized"),
        (500, "InternalServerError", "transient"),
        (503, "ServiceUnavailable", "transient"),
    ] {
        arm.fault(Fault::Status {
            method: Method::GET,
            status,
            code,
            retry_after: None,
        });
        let error = azure.get_subnets().await.expect_err(code);
        assert_eq!(error.response_code(), want, "{status} {code}: {error}");
    }

    let missing = vm_nic.replace(arm_stub::VM_NIC, "gone-nic");
    let error = azure
        .assign_ips(&missing, IpRequest::Addresses(1))
        .await
        .expect_err("no NIC");
    assert_eq!(error.response_code(), "not-found", "{error}");
    let error = azure
        .assign_ips("eni-123", IpRequest::Addresses(1))
        .await
        .expect_err("not an ARM id");
    assert_eq!(error.response_code(), "not-found", "{error}");

    // Past 256 configurations: refused before anything is written.
    arm.forget_seen();
    let error = azure
        .assign_ips(&vm_nic, IpRequest::Addresses(256))
        .await
        .expect_err("too many");
    assert_eq!(error.response_code(), "address-limit", "{error}");
    assert!(puts(&arm).is_empty());

    // A full subnet: ARM refuses the NIC's PUT, and fails the scale-set
    // VM's operation.
    arm.fill_subnet(0);
    let error = azure
        .assign_ips(&vm_nic, IpRequest::Addresses(1))
        .await
        .expect_err("full");
    assert_eq!(error.response_code(), "subnet-full", "{error}");
    arm.fail_next_operation("SubnetIsFull");
    let error = azure
        .assign_ips(&scale_set_nic, IpRequest::Addresses(1))
        .await
        .expect_err("full");
    assert_eq!(error.response_code(), "subnet-full", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_passes() {
    let arm = ArmStub::start().await;
    let azure = azure(&arm).await;
    let report = ipam_cloud::conformance::run(&azure, &mut |_| {}).await;
    for check in &report.checks {
        println!("{check}");
    }
    let failures: Vec<_> = report.failures().collect();
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(report.not_run(), 0, "none was left unrun");
    assert!(report.passed() >= 10, "{} passed", report.passed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_access_token_every_call_is_unauthorized_before_any_request() {
    let arm = ArmStub::start().await;
    let aws_keys = Credentials {
        values: [("access-key-id".to_string(), "AKID".to_string())]
            .into_iter()
            .collect(),
        expires_at: None,
    };
    let expired = Credentials {
        expires_at: Some(1),
        ..token(arm_stub::TOKEN)
    };
    for credentials in [Credentials::default(), aws_keys, expired] {
        let azure = load(arm.settings(), &arm.endpoint, credentials.clone()).await;
        let error = azure.get_vpcs().await.expect_err("no token");
        assert_eq!(
            error.response_code(),
            "unauthorized",
            "{credentials:?}: {error}"
        );
    }
    assert!(arm.seen().is_empty(), "nothing was sent");
    // A token ARM does not accept is ARM's 401.
    let azure = load(arm.settings(), &arm.endpoint, token("not-the-token")).await;
    let error = azure.get_vpcs().await.expect_err("refused token");
    assert_eq!(error.response_code(), "unauthorized", "{error}");
    assert_eq!(arm.seen().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_off_the_allow_list_is_refused_by_the_host() {
    let arm = ArmStub::start().await;
    let azure = load(arm.settings(), "http://127.0.0.2:9", token(arm_stub::TOKEN)).await;
    let error = azure.get_vpcs().await.expect_err("egress refused");
    assert_eq!(error.response_code(), "egress-denied", "{error}");
    assert!(arm.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_refused_with_what_is_wrong() {
    let good = serde_json::json!({
        "subscription-id": arm_stub::SUBSCRIPTION,
        "resource-group": "rg",
    });
    let with = |key: &str, value: serde_json::Value| {
        let mut settings = good.clone();
        settings[key] = value;
        settings
    };
    let cases = [
        (serde_json::json!({}), "subscription-id"),
        (
            with("subscription-id", "not-a-guid".into()),
            "subscription-id",
        ),
        (
            with("resource-groups", serde_json::json!(["rg"])),
            "resource-groups",
        ),
        (with("location", "East US".into()), "location"),
        (
            with("arm-endpoint", "management.azure.com".into()),
            "arm-endpoint",
        ),
        (
            with("api-versions", serde_json::json!({"network": "latest"})),
            "api-versions.network",
        ),
        (
            with("api-versions", serde_json::json!({"storage": "2024-01-01"})),
            "api-versions.storage",
        ),
    ];
    common::assert_settings_refused("azure", &cases).await;
}

/// The host's side end to end: a client-secret token from an Entra ID stub
/// (`ipam_clouds::azure::credentials`) and the Azure cloud's default egress
/// (the settings' `arm-endpoint`) are what the component works with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_entra_token_and_default_egress_serve_the_component() {
    use ipam_clouds::azure::credentials::{self, AzureCredentialConfig};
    let arm = ArmStub::start().await;
    let entra = common::stub_server(|request| {
        let secret = String::from_utf8_lossy(&request.body).contains("client_secret=s3cret");
        let (status, body) = if secret {
            (
                200,
                serde_json::json!({"token_type": "Bearer", "expires_in": 3599,
                    "access_token": arm_stub::TOKEN}),
            )
        } else {
            (401, serde_json::json!({"error": "invalid_client"}))
        };
        http::Response::builder()
            .status(status)
            .body(http_body_util::Full::new(bytes::Bytes::from(
                body.to_string(),
            )))
            .expect("stub response")
    })
    .await;
    let vars = [
        ("AZURE_TENANT_ID", "72f988bf-86f1-41af-91ab-2d7cd011db47"),
        ("AZURE_CLIENT_ID", "6a8b9c0d-1111-2222-3333-444455556666"),
        ("AZURE_CLIENT_SECRET", "s3cret"),
        ("AZURE_AUTHORITY_HOST", &format!("http://{entra}")),
    ];
    let source = credentials::start(AzureCredentialConfig::from_vars(
        vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
    ))
    .await
    .expect("Entra ID answered");
    let settings = arm.settings();
    let egress = ipam_clouds::Cloud::Azure
        .default_egress(&settings.to_string())
        .expect("the default egress");
    assert_eq!(egress, std::slice::from_ref(&arm.endpoint));
    let mut config = common::config(&settings.to_string());
    config.limits.timeout = Duration::from_secs(30);
    config.egress = egress;
    config.credentials = source;
    let azure = common::runtime()
        .load(&common::component("azure"), config)
        .await
        .expect("the azure component loads");
    assert_eq!(azure.get_vpcs().await.expect("vpcs").len(), 1);
    let assigned = azure
        .assign_ips(&arm_stub::vm_nic_id(), IpRequest::Addresses(1))
        .await
        .expect("assigned");
    azure
        .unassign_ips(&arm_stub::vm_nic_id(), &assigned.addresses, &[])
        .await
        .expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_azure_overlay_settings_configure_the_component() {
    // The chart's azure example renders the same settings (tests/deploy.rs).
    let yaml = include_str!("../../deploy/kustomize/overlays/azure/settings.yaml");
    let mut config = common::config(&common::json(yaml));
    config.limits.timeout = Duration::from_secs(30);
    common::runtime()
        .load(&common::component("azure"), config)
        .await
        .expect("the overlay's settings configure the azure component");
}

/// The engine in Azure mode over the component, with `nodes` stored.
fn azure_engine(
    azure: WasmProvider,
    nodes: Vec<ipam_ciliumnode::CiliumNode>,
    release_delay: Duration,
) -> (
    ipam_engine::Maintainer,
    std::sync::Arc<ipam_engine::MemoryNodeStore>,
) {
    use ipam_engine::{InstanceCache, IpamMode, LimitedCloud, MemoryNodeStore};

    let limits = common::declared_limits(&azure);
    let cloud: std::sync::Arc<dyn CloudApi> = std::sync::Arc::new(LimitedCloud::new(azure, limits));
    let store = std::sync::Arc::new(MemoryNodeStore::new());
    for node in nodes {
        store.upsert(node).expect("stored");
    }
    let mut settings = common::engine_settings(false);
    settings.release_delay = release_delay;
    settings.ipam_mode = IpamMode::Azure;
    let engine = common::maintainer(
        cloud,
        std::sync::Arc::new(InstanceCache::new()),
        store.clone(),
        settings,
    );
    (engine, store)
}

/// The engine over the component: Azure-mode nodes on the scale-set VM and
/// the standalone VM, as Cilium's Go agent writes them (`"eni": {}` and
/// all), get their pool from ARM and publish status.azure, and the excess
/// goes back to ARM through the release handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_converges_azure_mode_nodes_and_releases_their_excess() {
    use ipam_ciliumnode::ReleaseState;
    use ipam_engine::NodeStore;

    let arm = ArmStub::start().await;
    let nodes = [
        (
            "aks-pool-0",
            arm_stub::scale_set_vm_id(),
            arm_stub::scale_set_nic_id(),
        ),
        ("vm1", arm_stub::vm_id(), arm_stub::vm_nic_id()),
    ];
    let release_delay = Duration::from_secs(30);
    let (engine, store) = azure_engine(
        azure(&arm).await,
        nodes
            .iter()
            .map(|(name, vm, _)| common::azure_node(name, &lower(vm), 4))
            .collect(),
        release_delay,
    );

    for (name, _, nic) in &nodes {
        engine.allocate(name, 0).await.expect("allocated");
        let node = store.get(name).await.expect("read").expect("the node");
        assert!(
            node.spec.ipam.pool.len() >= 4,
            "{name}: {:?}",
            node.spec.ipam.pool
        );
        let held: Vec<String> = arm
            .nic_addresses(nic)
            .iter()
            .map(ToString::to_string)
            .collect();
        for address in node.spec.ipam.pool.keys() {
            assert!(
                held.contains(address),
                "{name}: {address} is pooled but not on {nic} in ARM"
            );
        }
        let published = &node.status.azure.interfaces;
        assert_eq!(published.len(), 1, "{name}: {published:?}");
        assert_eq!(published[0].id, *nic);
        assert_eq!(published[0].cidr, arm_stub::SUBNET_CIDR);
        assert_eq!(published[0].gateway_ip, "10.0.0.1");
        assert!(
            node.status.eni.enis.is_empty(),
            "{name}: no status.eni though the node carries spec.eni"
        );
        // Cilium's forms: ARM's MAC case and subnet id, secondaries only.
        assert!(published[0].mac.starts_with("00:0D:3A:"), "{published:?}");
        let listed: Vec<&str> = published[0]
            .addresses
            .iter()
            .map(|a| a.ip.as_str())
            .collect();
        let pooled: Vec<&str> = node.spec.ipam.pool.keys().map(String::as_str).collect();
        assert_eq!(listed.len(), pooled.len(), "{listed:?} {pooled:?}");
        assert!(published[0]
            .addresses
            .iter()
            .all(|a| a.subnet == arm_stub::subnet_id() && a.state == "succeeded"));
    }

    // Demand drops to nothing: the excess is marked after the delay, the
    // agent declares it ready, and it leaves ARM.
    let (name, _, nic) = &nodes[0];
    let before = arm.nic_addresses(nic);
    store
        .agent_update(name, |n| n.spec.ipam.pre_allocate = Some(0))
        .expect("agent update");
    let t0 = tokio::time::Instant::now();
    engine.release(name, t0).await.expect("first round");
    let round = engine
        .release(name, t0 + release_delay)
        .await
        .expect("marking round");
    let marked = round.marked.len();
    assert!(marked > 0, "excess marked");
    store
        .agent_update(name, |n| {
            for state in n.status.ipam.release_ips.values_mut() {
                *state = ReleaseState::ReadyForRelease;
            }
        })
        .expect("agent update");
    let round = engine
        .release(name, t0 + release_delay * 2)
        .await
        .expect("releasing round");
    assert_eq!(
        round.released.len(),
        marked,
        "every marked address was ready"
    );
    let mut left: Vec<String> = arm
        .nic_addresses(nic)
        .iter()
        .map(ToString::to_string)
        .collect();
    let mut want: Vec<String> = before
        .iter()
        .map(ToString::to_string)
        .filter(|a| !round.released.contains(a))
        .collect();
    left.sort();
    want.sort();
    assert_eq!(
        left, want,
        "exactly the released addresses left the scale-set VM's NIC in ARM"
    );
}

/// A VM with two NICs and `spec.azure.interface-name` naming the second:
/// every address goes on that one, as in Cilium's Azure mode; without the
/// name, on the first with room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interface_name_picks_the_nic_addresses_go_on() {
    use ipam_engine::NodeStore;

    let arm = ArmStub::start().await;
    let second = arm.add_vm_nic("vm1-nic2");
    let mut node = common::azure_node("vm1", &lower(&arm_stub::vm_id()), 6);
    node.spec.azure.interface_name = "vm1-nic2".into();
    let (engine, store) = azure_engine(azure(&arm).await, vec![node], Duration::from_secs(30));
    let first_before = arm.nic_addresses(&arm_stub::vm_nic_id());

    engine.allocate("vm1", 0).await.expect("allocated");
    let node = store.get("vm1").await.expect("read").expect("the node");
    assert!(node.spec.ipam.pool.len() >= 6, "{:?}", node.spec.ipam.pool);
    assert_eq!(
        arm.nic_addresses(&arm_stub::vm_nic_id()),
        first_before,
        "nothing went on the first NIC"
    );
    let on_second = arm.nic_addresses(&second);
    for (address, entry) in &node.spec.ipam.pool {
        assert_eq!(
            entry.resource.as_deref(),
            Some(second.as_str()),
            "{address}"
        );
        assert!(
            on_second.iter().any(|a| a.to_string() == *address),
            "{address} is pooled but not on {second} in ARM"
        );
    }
    let ids: Vec<&str> = node
        .status
        .azure
        .interfaces
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(ids, ["vm1-nic", "vm1-nic2"], "both NICs are published");
}

/// An assign whose operation ends Failed leaves ARM without the
/// configurations it added (the provider takes them off again), and a
/// Failed configuration already on a NIC is gone after the next write to
/// it: none stays on the NIC for ever, outside the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_ip_configurations_are_cleaned_up() {
    let arm = ArmStub::start().await;
    let azure = azure(&arm).await;
    let nic = arm_stub::vm_nic_id();
    let failed = |arm: &ArmStub| -> Vec<String> {
        arm.nic_configurations(&nic)
            .into_iter()
            .filter(|(_, state)| state == "Failed")
            .map(|(name, _)| name)
            .collect()
    };

    arm.fail_next_nic_operation("InternalServerError");
    let error = azure
        .assign_ips(&nic, IpRequest::Addresses(2))
        .await
        .expect_err("the operation failed");
    assert!(
        error.to_string().contains("InternalServerError"),
        "the original failure: {error}"
    );
    assert_eq!(
        failed(&arm),
        Vec::<String>::new(),
        "the failed assign was undone"
    );
    assert_eq!(arm.nic_addresses(&nic), [Ipv4Addr::new(10, 0, 0, 5)]);

    let stranded = arm.add_failed_configuration(&nic, "Cilium-stranded");
    assert_eq!(failed(&arm), ["Cilium-stranded"]);
    assert!(
        !secondaries(&azure, &nic).await.contains(&stranded),
        "a Failed configuration is not in the pool"
    );
    let assigned = azure
        .assign_ips(&nic, IpRequest::Addresses(1))
        .await
        .expect("assigned");
    assert_eq!(
        failed(&arm),
        Vec::<String>::new(),
        "cleaned by the next write"
    );
    assert!(
        !arm.nic_configurations(&nic)
            .iter()
            .any(|(name, _)| name == "Cilium-stranded"),
        "the Failed configuration left the NIC"
    );
    // Its address was free again for ARM to hand out (the stub gives the
    // lowest free one, so the new configuration may hold it).
    assert_eq!(secondaries(&azure, &nic).await, assigned.addresses);
}

/// The settings that narrow what the component reads, each against the
/// stub (scale set `pool` and standalone VM `vm1`, both tagged
/// `cluster: test`; NSG `nodes-nsg` tagged `cluster: test`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_and_security_group_filters_narrow_the_listings() {
    let arm = ArmStub::start().await;
    let instances_with = |overrides: serde_json::Value| {
        let mut settings = arm.settings();
        for (key, value) in overrides.as_object().expect("a map") {
            settings[key] = value.clone();
        }
        let endpoint = arm.endpoint.clone();
        async move {
            let azure = load(settings, &endpoint, token(arm_stub::TOKEN)).await;
            let mut ids: Vec<String> = azure
                .get_instances(&[])
                .await
                .expect("instances")
                .into_iter()
                .map(|i| i.id)
                .collect();
            ids.sort();
            let groups = azure.get_security_groups().await.expect("NSGs").len();
            (ids, groups)
        }
    };
    let vm = lower(&arm_stub::vm_id());
    let scale_set_vm = lower(&arm_stub::scale_set_vm_id());
    let table = [
        (
            serde_json::json!({}),
            vec![vm.clone(), scale_set_vm.clone()],
            1,
        ),
        (
            serde_json::json!({"scale-sets": ["another"]}),
            vec![vm.clone()],
            1,
        ),
        (
            serde_json::json!({"scale-sets": ["POOL"]}),
            vec![vm.clone(), scale_set_vm.clone()],
            1,
        ),
        (
            serde_json::json!({"standalone-vms": false}),
            vec![scale_set_vm.clone()],
            1,
        ),
        (
            serde_json::json!({"instance-tags": {"cluster": "test"}}),
            vec![vm.clone(), scale_set_vm.clone()],
            1,
        ),
        (
            serde_json::json!({"instance-tags": {"cluster": "other"}}),
            vec![],
            1,
        ),
        (
            serde_json::json!({"security-group-tags": {"cluster": "other"}}),
            vec![vm.clone(), scale_set_vm.clone()],
            0,
        ),
    ];
    for (overrides, want_instances, want_groups) in table {
        let (instances, groups) = instances_with(overrides.clone()).await;
        assert_eq!(instances, want_instances, "{overrides}");
        assert_eq!(groups, want_groups, "{overrides}: NSGs");
    }
}

/// The permission ARM checks for a request, by its naming rule: the
/// resource type the path names (its provider namespace and the type
/// segments after it), then `read` for a GET and `write` for a PUT.
fn permission_of(seen: &arm_stub::Seen) -> String {
    let segments: Vec<&str> = seen.path.trim_start_matches('/').split('/').collect();
    let at = segments
        .iter()
        .position(|s| s.eq_ignore_ascii_case("providers"))
        .unwrap_or_else(|| panic!("{} names no resource provider", seen.path));
    let namespace = segments[at + 1];
    let types: Vec<&str> = segments[at + 2..].iter().step_by(2).copied().collect();
    let verb = match seen.method {
        Method::GET => "read",
        Method::PUT => "write",
        ref other => panic!("{other} {}", seen.path),
    };
    format!("{namespace}/{}/{verb}", types.join("/"))
}

/// The Actions of both custom roles in `deploy/azure/`.
fn actions_the_roles_grant() -> std::collections::BTreeSet<String> {
    let mut actions = std::collections::BTreeSet::new();
    for role in [
        include_str!("../../deploy/azure/role.json"),
        include_str!("../../deploy/azure/sku-reader-role.json"),
    ] {
        let role: serde_json::Value = serde_json::from_str(role).expect("a role is JSON");
        for action in role["Actions"].as_array().expect("Actions") {
            actions.insert(action.as_str().expect("an action").to_string());
        }
    }
    actions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_the_component_sends_is_one_the_custom_roles_grant() {
    let arm = ArmStub::start().await;
    let azure = azure(&arm).await;
    // Every operation, on a scale-set VM's NIC and a standalone VM's.
    let report = ipam_cloud::conformance::run(&azure, &mut |_| {}).await;
    assert!(report.passed() >= 10, "{} passed", report.passed());
    azure.get_vpcs().await.expect("get-vpcs");
    azure.get_subnets().await.expect("get-subnets");
    azure
        .get_security_groups()
        .await
        .expect("get-security-groups");
    azure.get_instances(&[]).await.expect("get-instances");
    azure
        .get_instance_limits(arm_stub::VM_SIZE)
        .await
        .expect("get-instance-limits");
    for nic in [arm_stub::scale_set_nic_id(), arm_stub::vm_nic_id()] {
        let assigned = azure
            .assign_ips(&nic, IpRequest::Addresses(1))
            .await
            .expect("assign-ips");
        azure
            .unassign_ips(&nic, &assigned.addresses, &[])
            .await
            .expect("unassign-ips");
    }

    let sent: std::collections::BTreeSet<String> = arm.seen().iter().map(permission_of).collect();
    let granted = actions_the_roles_grant();
    let not_granted: Vec<&String> = sent.difference(&granted).collect();
    assert!(
        not_granted.is_empty(),
        "the component sent requests needing {not_granted:?}, which deploy/azure's roles do not grant"
    );
    // The joins (`.../action`) are checked by ARM on what a write
    // references, not requested; every read and write granted is one the
    // component needed here.
    let unused: Vec<&String> = granted
        .iter()
        .filter(|a| !a.ends_with("/action") && !sent.contains(*a))
        .collect();
    assert!(
        unused.is_empty(),
        "deploy/azure's roles grant {unused:?}, which no request needed"
    );
}
