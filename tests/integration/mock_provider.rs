//! The mock provider through the real runtime: it passes the conformance
//! suite, enforces what a real cloud enforces, is deterministic, and fails
//! chosen operations on request.

use ipam_tests as common;

use common::{mock, MOCK_SETTINGS};
use ipam_cloud::conformance;
use ipam_cloud::{CloudApi, CreateInterfaceRequest, IpRequest, ProviderError, Tag};

fn request(
    instance: &str,
    index: u32,
    subnet: &str,
    count: u32,
    prefixes: bool,
) -> CreateInterfaceRequest {
    CreateInterfaceRequest {
        instance_id: instance.into(),
        index,
        subnet_id: subnet.into(),
        security_groups: vec!["sg-pods".into()],
        description: "test".into(),
        tags: vec![Tag {
            key: "cluster".into(),
            value: "test".into(),
        }],
        delete_on_termination: true,
        ipv4_count: count,
        use_prefixes: prefixes,
    }
}

fn provider_error<T: std::fmt::Debug>(result: Result<T, ipam_cloud::CloudError>) -> ProviderError {
    result
        .expect_err("expected an error")
        .provider_error()
        .cloned()
        .expect("a provider error")
}

#[tokio::test]
async fn the_mock_passes_the_conformance_suite() {
    let provider = mock(MOCK_SETTINGS).await;
    let report = conformance::run(&provider, &mut |_| {}).await;
    let failures: Vec<_> = report.failures().collect();
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(
        report.not_applicable(),
        0,
        "the mock declares every capability"
    );
    assert_eq!(
        report.not_run(),
        0,
        "every declared capability was exercised"
    );
    assert!(report.passed() >= 25);
}

#[tokio::test]
async fn the_same_calls_give_the_same_answers() {
    let (a, b) = (mock(MOCK_SETTINGS).await, mock(MOCK_SETTINGS).await);
    for provider in [&a, &b] {
        provider
            .create_interface(&request("i-0001", 1, "subnet-a2", 3, false))
            .await
            .unwrap();
        provider
            .assign_ips("eni-00000001", IpRequest::Addresses(2))
            .await
            .unwrap();
    }
    assert_eq!(
        a.get_instances(&[]).await.unwrap(),
        b.get_instances(&[]).await.unwrap()
    );
    assert_eq!(
        a.get_subnets().await.unwrap(),
        b.get_subnets().await.unwrap()
    );
}

#[tokio::test]
async fn addresses_per_interface_are_limited_and_all_or_nothing() {
    let provider = mock(MOCK_SETTINGS).await;
    // t3.small: 4 slots per interface, the primary included.
    let eni = provider
        .create_interface(&request("i-0003", 1, "subnet-b1", 2, false))
        .await
        .unwrap();
    assert!(matches!(
        provider_error(provider.assign_ips(&eni.id, IpRequest::Addresses(2)).await),
        ProviderError::AddressLimit(_)
    ));
    let listed = provider.get_instances(&["i-0003".into()]).await.unwrap();
    assert_eq!(
        listed[0].interfaces[1].addresses.len(),
        2,
        "a refused assignment assigns nothing"
    );
    assert_eq!(
        provider
            .assign_ips(&eni.id, IpRequest::Addresses(1))
            .await
            .unwrap()
            .addresses
            .len(),
        1
    );
}

#[tokio::test]
async fn interfaces_per_instance_and_device_indices_are_enforced() {
    let provider = mock(MOCK_SETTINGS).await;
    provider
        .create_interface(&request("i-0001", 1, "subnet-a2", 0, false))
        .await
        .unwrap();
    assert!(matches!(
        provider_error(
            provider
                .create_interface(&request("i-0001", 1, "subnet-a2", 0, false))
                .await
        ),
        ProviderError::Conflict(_)
    ));
    provider
        .create_interface(&request("i-0001", 2, "subnet-a2", 0, false))
        .await
        .unwrap();
    assert!(matches!(
        provider_error(
            provider
                .create_interface(&request("i-0001", 3, "subnet-a2", 0, false))
                .await
        ),
        ProviderError::InterfaceLimit(_)
    ));
    assert!(
        matches!(
            provider_error(
                provider
                    .create_interface(&request("i-0003", 1, "subnet-a2", 0, false))
                    .await
            ),
            ProviderError::InvalidArgument(_)
        ),
        "a subnet in another zone is refused"
    );
}

#[tokio::test]
async fn a_full_subnet_says_so_and_another_subnet_still_works() {
    // A /28 has 11 usable addresses: two instances' primaries take 2.
    let settings = r#"
vpcs: [{id: vpc-1, cidrs: [10.0.0.0/16]}]
subnets:
  - {id: small, vpc-id: vpc-1, cidr: 10.0.0.0/28, availability-zone: z}
  - {id: big, vpc-id: vpc-1, cidr: 10.0.1.0/24, availability-zone: z}
security-groups: [{id: sg-pods, vpc-id: vpc-1}]
instance-types: {big: {max-interfaces: 4, ipv4-per-interface: 30}}
instances:
  - {id: i-1, instance-type: big, subnet-id: small}
  - {id: i-2, instance-type: big, subnet-id: small}
"#;
    let provider = mock(settings).await;
    let eni = provider
        .create_interface(&request("i-1", 1, "small", 8, false))
        .await
        .unwrap();
    let subnets = provider.get_subnets().await.unwrap();
    assert_eq!(
        subnets
            .iter()
            .find(|s| s.id == "small")
            .unwrap()
            .available_addresses,
        0
    );
    assert!(matches!(
        provider_error(provider.assign_ips(&eni.id, IpRequest::Addresses(1)).await),
        ProviderError::SubnetFull(_)
    ));
    assert!(matches!(
        provider_error(
            provider
                .create_interface(&request("i-2", 1, "small", 0, false))
                .await
        ),
        ProviderError::SubnetFull(_)
    ));
    let other = provider
        .create_interface(&request("i-2", 1, "big", 5, false))
        .await
        .unwrap();
    assert_eq!(other.addresses.len(), 5);
}

#[tokio::test]
async fn a_fragmented_subnet_runs_out_of_prefixes_before_addresses() {
    let provider = mock(MOCK_SETTINGS).await;
    // subnet-a3 is a /26 with .20 and .40 taken: no aligned /28 is free.
    let settings_subnet = "subnet-a3";
    let eni = provider
        .create_interface(&request("i-0001", 1, settings_subnet, 0, false))
        .await
        .unwrap();
    assert!(matches!(
        provider_error(provider.assign_ips(&eni.id, IpRequest::Prefixes(1)).await),
        ProviderError::InsufficientPrefixes(_)
    ));
    let fallback = provider
        .assign_ips(&eni.id, IpRequest::Addresses(2))
        .await
        .unwrap();
    assert_eq!(
        fallback.addresses.len(),
        2,
        "/32s still work where no /28 is free"
    );
    // In an unfragmented subnet the /28 is granted.
    let eni = provider
        .create_interface(&request("i-0002", 1, "subnet-a2", 0, false))
        .await
        .unwrap();
    let prefix = provider
        .assign_ips(&eni.id, IpRequest::Prefixes(1))
        .await
        .unwrap();
    assert_eq!(
        ipam_tests::texts(&prefix.prefixes),
        vec!["10.0.1.16/28".to_string()]
    );
    // t3.small has no prefix delegation.
    let eni = provider
        .create_interface(&request("i-0003", 1, "subnet-b1", 0, false))
        .await
        .unwrap();
    assert!(matches!(
        provider_error(provider.assign_ips(&eni.id, IpRequest::Prefixes(1)).await),
        ProviderError::InvalidArgument(_)
    ));
}

#[tokio::test]
async fn injected_faults_fail_the_chosen_calls_then_stop() {
    let settings = format!(
        "{MOCK_SETTINGS}\nfaults:\n  - {{operation: assign-ips, error: throttled, times: 2, after: 1, retry-after-ms: 1500}}\n"
    );
    let provider = mock(&settings).await;
    let eni = provider
        .create_interface(&request("i-0001", 1, "subnet-a2", 0, false))
        .await
        .unwrap();
    assert!(
        provider
            .assign_ips(&eni.id, IpRequest::Addresses(1))
            .await
            .is_ok(),
        "`after: 1` lets the first call through"
    );
    for _ in 0..2 {
        assert_eq!(
            provider_error(provider.assign_ips(&eni.id, IpRequest::Addresses(1)).await),
            ProviderError::Throttled(std::time::Duration::from_millis(1500))
        );
    }
    assert!(provider
        .assign_ips(&eni.id, IpRequest::Addresses(1))
        .await
        .is_ok());
    let listed = provider.get_instances(&["i-0001".into()]).await.unwrap();
    assert_eq!(
        listed[0].interfaces[1].addresses.len(),
        2,
        "failed calls assigned nothing"
    );
}

#[tokio::test]
async fn a_failed_attach_deletes_the_interface_unless_told_to_leak() {
    let tags = [Tag {
        key: "cluster".into(),
        value: "test".into(),
    }];
    for (leak, detached) in [(false, 0), (true, 1)] {
        let settings = format!("{MOCK_SETTINGS}\nfaults:\n  - {{operation: attach-interface, error: transient, leak: {leak}}}\n");
        let provider = mock(&settings).await;
        let before = provider.get_subnets().await.unwrap();
        let error = provider_error(
            provider
                .create_interface(&request("i-0001", 1, "subnet-a2", 2, false))
                .await,
        );
        assert!(matches!(error, ProviderError::Transient(_)));
        assert_eq!(
            provider.get_detached_interfaces(&tags).await.unwrap().len(),
            detached
        );
        if !leak {
            assert_eq!(
                provider.get_subnets().await.unwrap(),
                before,
                "the undone interface's address is free again"
            );
        }
        assert_eq!(
            provider.get_instances(&["i-0001".into()]).await.unwrap()[0]
                .interfaces
                .len(),
            1
        );
        assert!(
            provider
                .create_interface(&request("i-0001", 1, "subnet-a2", 2, false))
                .await
                .is_ok(),
            "the fault fired once"
        );
    }
}

#[tokio::test]
async fn concurrent_calls_on_a_stateful_provider_never_hand_out_an_address_twice() {
    let provider = std::sync::Arc::new(mock(MOCK_SETTINGS).await);
    assert_eq!(provider.info().max_concurrency, 1);
    let eni = provider
        .create_interface(&request("i-0001", 1, "subnet-a2", 0, false))
        .await
        .unwrap();
    let calls = (0..9).map(|_| {
        let provider = provider.clone();
        let id = eni.id.clone();
        tokio::spawn(async move { provider.assign_ips(&id, IpRequest::Addresses(1)).await })
    });
    let mut addresses = Vec::new();
    for call in calls {
        addresses.extend(call.await.unwrap().unwrap().addresses);
    }
    addresses.sort();
    addresses.dedup();
    assert_eq!(addresses.len(), 9);
}

#[tokio::test]
async fn invalid_settings_are_refused_with_the_reason() {
    let bad = [
        (
            "vpcs: [{id: v, cidrs: [10.0.0.1/16]}]",
            "bits set past its length",
        ),
        (
            "subnets: [{id: s, vpc-id: nope, cidr: 10.0.0.0/24, availability-zone: z}]",
            "unknown vpc",
        ),
        (
            "instances: [{id: i, instance-type: x, subnet-id: s}]",
            "unknown type",
        ),
        (
            "faults: [{operation: fly, error: transient}]",
            "unknown operation",
        ),
        ("colour: blue", "unknown field"),
    ];
    for (settings, reason) in bad {
        let error = common::runtime()
            .load(
                &common::component("mock"),
                common::config(&common::json(settings)),
            )
            .await
            .unwrap_err();
        assert!(error.to_string().contains(reason), "{settings}: {error}");
    }
}

#[tokio::test]
async fn prewarm_never_makes_more_instances_than_declared() {
    let provider = mock(MOCK_SETTINGS).await;
    let eni = provider
        .create_interface(&request("i-0001", 1, "subnet-a2", 0, false))
        .await
        .unwrap();
    provider.prewarm().await.unwrap();
    provider.prewarm().await.unwrap();
    assert_eq!(
        provider.instances_created(),
        1,
        "the mock declares one instance and has it"
    );
    // The one instance still holds the cloud state.
    provider
        .assign_ips(&eni.id, IpRequest::Addresses(1))
        .await
        .unwrap();
    assert_eq!(provider.drain_idle(), 1);
    provider.prewarm().await.unwrap();
    assert_eq!(provider.instances_created(), 2);
    let fresh = provider.get_instances(&["i-0001".into()]).await.unwrap();
    assert_eq!(
        fresh[0].interfaces.len(),
        1,
        "a fresh mock instance starts from its settings"
    );
}
