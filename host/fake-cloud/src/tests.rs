//! The mock's rules, run natively through the fake's conversions and the
//! `CloudApi` trait as the engine meets them, and what the fake adds: call
//! counts, injected faults, capabilities, the standard cloud.

use std::time::Duration;

use ipam_cloud::{
    Capabilities, CloudApi, CloudError, CreateInterfaceRequest, InstanceLimits, IpRequest,
    Operation, ProviderError, Tag,
};

use crate::{FakeCloud, FakeCloudBuilder, InstanceSpec, SubnetSpec};

const SMALL: InstanceLimits = InstanceLimits {
    max_interfaces: 2,
    ipv4_per_interface: 3,
    ipv6_per_interface: 0,
    prefix_delegation: false,
};
const DELEGATING: InstanceLimits = InstanceLimits {
    max_interfaces: 3,
    ipv4_per_interface: 4,
    ipv6_per_interface: 4,
    prefix_delegation: true,
};

/// Zone a: a roomy subnet, a subnet with one free address left, a subnet
/// with addresses but no free /28. Zone b: a subnet no instance is in.
/// `i-small` (no delegation, 2 x 3) and `i-pd` (delegation, 3 x 4), both
/// with their primary interface in `subnet-big` (10.0.0.4 and 10.0.0.5).
fn builder() -> FakeCloudBuilder {
    let mut tiny = SubnetSpec::new("subnet-tiny", "vpc-1", "zone-a", "10.0.1.0/28");
    for last in 4..14 {
        tiny = tiny.occupied(&format!("10.0.1.{last}"));
    }
    FakeCloud::builder()
        .vpc("vpc-1", &["10.0.0.0/16"])
        .subnet(SubnetSpec::new("subnet-big", "vpc-1", "zone-a", "10.0.0.0/24").tag("tier", "pods"))
        .subnet(tiny)
        .subnet(
            SubnetSpec::new("subnet-frag", "vpc-1", "zone-a", "10.0.2.0/26")
                .occupied("10.0.2.20")
                .occupied("10.0.2.40"),
        )
        .subnet(SubnetSpec::new(
            "subnet-b",
            "vpc-1",
            "zone-b",
            "10.0.3.0/24",
        ))
        .security_group("sg-1", "vpc-1", &[])
        .instance_type("small", SMALL)
        .instance_type("pd", DELEGATING)
        .instance(InstanceSpec::new("i-small", "small", "subnet-big").security_group("sg-1"))
        .instance(InstanceSpec::new("i-pd", "pd", "subnet-big"))
}

fn cloud() -> FakeCloud {
    builder().build().expect("the test cloud is valid")
}

fn tag(key: &str, value: &str) -> Tag {
    Tag {
        key: key.into(),
        value: value.into(),
    }
}

fn create(instance: &str, index: u32, subnet: &str, count: u32) -> CreateInterfaceRequest {
    CreateInterfaceRequest {
        instance_id: instance.into(),
        index,
        subnet_id: subnet.into(),
        security_groups: Vec::new(),
        description: "test".into(),
        tags: vec![tag("cluster", "test")],
        delete_on_termination: true,
        ipv4_count: count,
        use_prefixes: false,
    }
}

fn prefixed(request: CreateInterfaceRequest) -> CreateInterfaceRequest {
    CreateInterfaceRequest {
        use_prefixes: true,
        ..request
    }
}

/// The WIT error case, as metrics label it.
fn code<T: std::fmt::Debug>(result: Result<T, CloudError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(error) => error.response_code(),
    }
}

/// Interfaces attached per instance, and free addresses per subnet.
fn footprint(cloud: &FakeCloud) -> (Vec<usize>, Vec<u32>) {
    let interfaces = ["i-small", "i-pd"]
        .map(|id| cloud.instance(id).unwrap().interfaces.len())
        .to_vec();
    let free = ["subnet-big", "subnet-tiny", "subnet-frag", "subnet-b"]
        .map(|id| cloud.subnet(id).unwrap().available_addresses)
        .to_vec();
    (interfaces, free)
}

fn primary_of(cloud: &FakeCloud, instance: &str) -> String {
    cloud.instance(instance).unwrap().interfaces[0].id.clone()
}

#[tokio::test]
async fn create_interface_refuses_what_a_cloud_refuses_and_changes_nothing() {
    let unknown_group = CreateInterfaceRequest {
        security_groups: vec!["sg-nope".into()],
        ..create("i-pd", 1, "subnet-big", 0)
    };
    let rows: Vec<(
        &str,
        Vec<CreateInterfaceRequest>,
        CreateInterfaceRequest,
        &str,
    )> = vec![
        (
            "index taken",
            vec![],
            create("i-pd", 0, "subnet-big", 0),
            "conflict",
        ),
        (
            "instance full",
            vec![create("i-small", 1, "subnet-big", 0)],
            create("i-small", 1, "subnet-big", 0),
            "interface-limit",
        ),
        (
            "index beyond the type",
            vec![],
            create("i-small", 2, "subnet-big", 0),
            "invalid-argument",
        ),
        (
            "more than the slots",
            vec![],
            create("i-small", 1, "subnet-big", 3),
            "address-limit",
        ),
        (
            "subnet full",
            vec![],
            create("i-pd", 1, "subnet-tiny", 1),
            "subnet-full",
        ),
        (
            "no free /28",
            vec![],
            prefixed(create("i-pd", 1, "subnet-frag", 1)),
            "insufficient-prefixes",
        ),
        (
            "prefixes without delegation",
            vec![],
            prefixed(create("i-small", 1, "subnet-big", 1)),
            "invalid-argument",
        ),
        (
            "subnet in another zone",
            vec![],
            create("i-pd", 1, "subnet-b", 0),
            "invalid-argument",
        ),
        (
            "unknown instance",
            vec![],
            create("i-nope", 1, "subnet-big", 0),
            "not-found",
        ),
        (
            "unknown subnet",
            vec![],
            create("i-pd", 1, "subnet-nope", 0),
            "not-found",
        ),
        ("unknown security group", vec![], unknown_group, "not-found"),
    ];
    for (name, setup, request, want) in rows {
        let cloud = cloud();
        for earlier in &setup {
            cloud.create_interface(earlier).await.expect(name);
        }
        let before = footprint(&cloud);
        assert_eq!(code(cloud.create_interface(&request).await), want, "{name}");
        assert_eq!(footprint(&cloud), before, "{name}: nothing changed");
    }
}

#[tokio::test]
async fn a_created_interface_is_attached_tagged_and_addressed_from_its_subnet() {
    let cloud = cloud();
    let request = CreateInterfaceRequest {
        security_groups: vec!["sg-1".into()],
        ..create("i-small", 1, "subnet-big", 2)
    };
    let created = cloud.create_interface(&request).await.unwrap();
    assert_eq!(created.instance_id.as_deref(), Some("i-small"));
    assert_eq!(created.index, 1);
    assert_eq!(created.tags, request.tags);
    assert_eq!(created.security_groups, ["sg-1"]);
    assert_eq!(
        (created.subnet_id.as_str(), created.vpc_id.as_str()),
        ("subnet-big", "vpc-1")
    );
    assert_eq!(created.mac, "02:00:00:00:00:03", "the third interface made");
    assert_eq!(
        created.primary_ip.to_string(),
        "10.0.0.6",
        "lowest free after the two primaries"
    );
    assert_eq!(texts(&created.addresses), ["10.0.0.7", "10.0.0.8"]);
    let listed = cloud.instance("i-small").unwrap().interfaces;
    assert_eq!(listed.iter().map(|i| i.index).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(listed[1], created);
    assert_eq!(
        cloud.subnet("subnet-big").unwrap().available_addresses,
        251 - 5
    );

    let with_prefix = cloud
        .create_interface(&prefixed(create("i-pd", 1, "subnet-big", 1)))
        .await
        .unwrap();
    assert_eq!(with_prefix.primary_ip.to_string(), "10.0.0.9");
    assert_eq!(
        texts(&with_prefix.prefixes),
        ["10.0.0.16/28"],
        "the lowest aligned free block"
    );
}

#[tokio::test]
async fn assign_ips_answers_what_it_assigned_or_refuses_all_of_it() {
    let cloud = cloud();
    let primary = primary_of(&cloud, "i-pd");
    let assigned = cloud
        .assign_ips(&primary, IpRequest::Addresses(2))
        .await
        .unwrap();
    assert_eq!(texts(&assigned.addresses), ["10.0.0.6", "10.0.0.7"]);
    assert!(assigned.prefixes.is_empty());
    let assigned = cloud
        .assign_ips(&primary, IpRequest::Prefixes(1))
        .await
        .unwrap();
    assert_eq!(texts(&assigned.prefixes), ["10.0.0.16/28"]);
    assert!(assigned.addresses.is_empty());
    // Primary, two addresses and a prefix: the four slots are taken.
    let on_tiny = cloud
        .create_interface(&create("i-pd", 1, "subnet-tiny", 0))
        .await
        .unwrap();
    let on_frag = cloud
        .create_interface(&create("i-pd", 2, "subnet-frag", 0))
        .await
        .unwrap();
    let small = primary_of(&cloud, "i-small");
    let rows = [
        (
            "slot limit",
            primary.as_str(),
            IpRequest::Addresses(1),
            "address-limit",
        ),
        (
            "more than the slots",
            small.as_str(),
            IpRequest::Addresses(3),
            "address-limit",
        ),
        (
            "zero",
            small.as_str(),
            IpRequest::Addresses(0),
            "invalid-argument",
        ),
        (
            "no delegation",
            small.as_str(),
            IpRequest::Prefixes(1),
            "invalid-argument",
        ),
        (
            "subnet full",
            on_tiny.id.as_str(),
            IpRequest::Addresses(1),
            "subnet-full",
        ),
        (
            "no free /28",
            on_frag.id.as_str(),
            IpRequest::Prefixes(1),
            "insufficient-prefixes",
        ),
        (
            "unknown interface",
            "eni-nope",
            IpRequest::Addresses(1),
            "not-found",
        ),
    ];
    for (name, interface, request, want) in rows {
        let before = footprint(&cloud);
        assert_eq!(
            code(cloud.assign_ips(interface, request).await),
            want,
            "{name}"
        );
        assert_eq!(footprint(&cloud), before, "{name}: nothing changed");
    }
    assert_eq!(
        code(cloud.assign_ips(&on_frag.id, IpRequest::Addresses(2)).await),
        "ok",
        "a fragmented subnet still has single addresses"
    );
}

#[tokio::test]
async fn delete_and_unassign_are_idempotent_and_spare_the_primary() {
    let cloud = cloud();
    let free_before = cloud.subnet("subnet-big").unwrap().available_addresses;
    let created = cloud
        .create_interface(&create("i-pd", 1, "subnet-big", 3))
        .await
        .unwrap();
    let gone = created.addresses[..2].to_vec();
    for _ in 0..2 {
        cloud.unassign_ips(&created.id, &gone, &[]).await.unwrap();
    }
    let listed = cloud.instance("i-pd").unwrap().interfaces[1].clone();
    assert_eq!(listed.addresses, created.addresses[2..]);
    let primary = primary_of(&cloud, "i-pd");
    let rows = [
        (
            "the primary address",
            created.id.as_str(),
            vec![created.primary_ip],
            "invalid-argument",
        ),
        (
            "not on the interface",
            created.id.as_str(),
            vec!["10.0.0.200".parse().unwrap()],
            "ok",
        ),
        ("unknown interface", "eni-nope", vec![], "not-found"),
    ];
    for (name, interface, addresses, want) in rows {
        assert_eq!(
            code(cloud.unassign_ips(interface, &addresses, &[]).await),
            want,
            "{name}"
        );
    }
    assert_eq!(
        code(cloud.delete_interface(&primary).await),
        "invalid-argument",
        "the primary interface stays"
    );
    for _ in 0..2 {
        cloud.delete_interface(&created.id).await.unwrap();
    }
    cloud.delete_interface("eni-nope").await.unwrap();
    assert_eq!(cloud.instance("i-pd").unwrap().interfaces.len(), 1);
    assert_eq!(
        cloud.subnet("subnet-big").unwrap().available_addresses,
        free_before,
        "every address went back"
    );
}

#[tokio::test]
async fn listings_leave_out_unknown_instances_and_attached_interfaces() {
    let cloud = cloud();
    let all = cloud.get_instances(&[]).await.unwrap();
    assert_eq!(
        all.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        ["i-pd", "i-small"]
    );
    let named = cloud
        .get_instances(&["i-small".into(), "i-nope".into()])
        .await
        .unwrap();
    assert_eq!(named.len(), 1);
    assert_eq!(
        (
            named[0].availability_zone.as_str(),
            named[0].vpc_id.as_str()
        ),
        ("zone-a", "vpc-1")
    );
    assert_eq!(code(cloud.get_instance_limits("pd").await), "ok");
    assert_eq!(code(cloud.get_instance_limits("huge").await), "not-found");

    cloud.leak_next_creates(2, ProviderError::Transient("attach failed".into()));
    // The mock's attach-interface fault: the case is kept, the message is
    // the mock's.
    let transient = ProviderError::Transient("injected fault on attach-interface".into());
    let mut ours = create("i-pd", 1, "subnet-big", 2);
    ours.tags.push(tag("node", "n1"));
    let theirs = CreateInterfaceRequest {
        tags: vec![tag("cluster", "other")],
        ..create("i-small", 1, "subnet-big", 0)
    };
    for request in [&ours, &theirs] {
        let error = cloud.create_interface(request).await.unwrap_err();
        assert_eq!(error.provider_error(), Some(&transient));
    }
    cloud
        .create_interface(&ours)
        .await
        .expect("the leaks are spent");

    let rows: [(&[Tag], usize); 5] = [
        (&[], 2),
        (&[tag("cluster", "test")], 1),
        (&[tag("cluster", "test"), tag("node", "n1")], 1),
        (&[tag("cluster", "test"), tag("node", "n2")], 0),
        (&[tag("cluster", "other")], 1),
    ];
    for (tags, want) in rows {
        let found = cloud.get_detached_interfaces(tags).await.unwrap();
        assert_eq!(found.len(), want, "{tags:?}");
        assert!(found.iter().all(|i| i.instance_id.is_none()));
    }
    let leaked = cloud
        .get_detached_interfaces(&[tag("node", "n1")])
        .await
        .unwrap();
    assert_eq!(
        (leaked[0].index, leaked[0].addresses.len()),
        (1, 0),
        "created, never attached"
    );
    assert_eq!(cloud.detached().len(), 2);
    cloud.delete_interface(&leaked[0].id).await.unwrap();
    assert_eq!(
        cloud.detached().len(),
        1,
        "a detached interface can be deleted"
    );
}

#[tokio::test]
async fn injected_failures_capabilities_and_call_counts() {
    let cloud = cloud();
    cloud.fail_next(
        Operation::GetVpcs,
        2,
        ProviderError::Throttled(Duration::from_secs(1)),
    );
    let error = cloud.get_vpcs().await.unwrap_err();
    assert_eq!(
        error,
        CloudError::Provider {
            provider: "fake".into(),
            error: ProviderError::Throttled(Duration::from_secs(1)),
        }
    );
    assert_eq!(code(cloud.get_vpcs().await), "throttled");
    assert_eq!(
        cloud.get_vpcs().await.unwrap()[0].primary_cidr.to_string(),
        "10.0.0.0/16"
    );
    assert_eq!(cloud.calls(Operation::GetVpcs), 3, "failed calls count too");
    assert_eq!(cloud.mutating_calls(), 0, "reads are not mutations");

    let primary = primary_of(&cloud, "i-pd");
    cloud.fail_next(
        Operation::AssignIps,
        1,
        ProviderError::Conflict("busy".into()),
    );
    cloud.fail_next(Operation::AssignIps, 0, ProviderError::Other("x".into()));
    assert_eq!(
        cloud
            .assign_ips(&primary, IpRequest::Addresses(1))
            .await
            .unwrap_err()
            .provider_error(),
        Some(&ProviderError::Conflict(
            "injected fault on assign-ips".into()
        )),
        "the case armed, the mock's message"
    );
    assert_eq!(
        cloud.instance("i-pd").unwrap().interfaces[0]
            .addresses
            .len(),
        0
    );
    assert_eq!(
        code(cloud.assign_ips(&primary, IpRequest::Addresses(1)).await),
        "ok"
    );
    assert_eq!(
        (cloud.calls(Operation::AssignIps), cloud.mutating_calls()),
        (2, 2)
    );

    let no_delete = builder()
        .capabilities(Capabilities {
            delete_interface: false,
            ..cloud.info().capabilities
        })
        .build()
        .unwrap();
    let created = no_delete
        .create_interface(&create("i-pd", 1, "subnet-big", 0))
        .await
        .unwrap();
    assert_eq!(
        code(no_delete.delete_interface(&created.id).await),
        "invalid-argument"
    );
    assert_eq!(
        no_delete.instance("i-pd").unwrap().interfaces.len(),
        2,
        "not deleted"
    );
    let read_only = builder()
        .build()
        .unwrap()
        .with_capabilities(Capabilities::default());
    assert_eq!(
        code(
            read_only
                .create_interface(&create("i-pd", 1, "subnet-big", 0))
                .await
        ),
        "invalid-argument"
    );
    assert_eq!(
        code(read_only.unassign_ips("eni-nope", &[], &[]).await),
        "invalid-argument"
    );
    assert_eq!(read_only.calls(Operation::CreateInterface), 1);
}

#[test]
fn the_info_and_the_standard_cloud() {
    let cloud = FakeCloud::standard(3);
    let info = cloud.info();
    assert_eq!((info.name.as_str(), info.max_concurrency), ("fake", 16));
    assert_eq!(
        info.capabilities,
        Capabilities {
            create_interface: true,
            release: true,
            prefixes: true,
            delete_interface: true,
        }
    );
    let ids: Vec<_> = (0..3).map(crate::standard_instance).collect();
    assert_eq!(ids, ["i-0000", "i-0001", "i-0002"]);
    for (n, id) in ids.iter().enumerate() {
        let instance = cloud.instance(id).unwrap();
        assert_eq!(instance.instance_type, "m5.large");
        assert_eq!(instance.availability_zone, "zone-a");
        assert_eq!(instance.interfaces.len(), 1);
        assert_eq!(instance.interfaces[0].index, 0);
        assert_eq!(
            instance.interfaces[0].primary_ip.to_string(),
            format!("10.0.0.{}", 4 + n)
        );
        assert_eq!(instance.interfaces[0].security_groups, ["sg-nodes"]);
    }
    let subnet = cloud.subnet("subnet-a").unwrap();
    assert_eq!(
        (subnet.cidr.to_string().as_str(), subnet.available_addresses),
        ("10.0.0.0/16", 65531 - 3)
    );
    assert!(
        cloud.subnet("subnet-b").is_none(),
        "three nodes fit in one zone"
    );
    let many = FakeCloud::standard(151);
    assert_eq!(many.instance("i-0149").unwrap().availability_zone, "zone-a");
    assert_eq!(many.instance("i-0150").unwrap().availability_zone, "zone-b");
    assert_eq!(
        many.subnet("subnet-b").unwrap().cidr.to_string(),
        "10.1.0.0/16"
    );
}

#[test]
fn bad_declarations_are_invalid_arguments() {
    let small = |limits| FakeCloud::builder().instance_type("t", limits);
    let rows: Vec<(&str, FakeCloudBuilder)> = vec![
        ("vpc without cidrs", FakeCloud::builder().vpc("v", &[])),
        (
            "vpc twice",
            FakeCloud::builder()
                .vpc("v", &["10.0.0.0/16"])
                .vpc("v", &["10.1.0.0/16"]),
        ),
        (
            "subnet of no vpc",
            FakeCloud::builder().subnet(SubnetSpec::new("s", "v", "z", "10.0.0.0/24")),
        ),
        (
            "subnet too large",
            builder().subnet(SubnetSpec::new("s", "vpc-1", "z", "10.0.0.0/8")),
        ),
        (
            "occupied outside",
            builder()
                .subnet(SubnetSpec::new("s", "vpc-1", "z", "10.9.0.0/24").occupied("10.8.0.9")),
        ),
        (
            "zero limits",
            small(InstanceLimits {
                ipv4_per_interface: 0,
                ..SMALL
            }),
        ),
        ("type twice", builder().instance_type("pd", SMALL)),
        (
            "unknown type",
            builder().instance(InstanceSpec::new("i-x", "huge", "subnet-big")),
        ),
        (
            "unknown subnet",
            builder().instance(InstanceSpec::new("i-x", "small", "subnet-nope")),
        ),
        (
            "instance twice",
            builder().instance(InstanceSpec::new("i-pd", "pd", "subnet-big")),
        ),
        (
            "unknown group",
            builder().instance(InstanceSpec::new("i-x", "pd", "subnet-big").security_group("sg-x")),
        ),
    ];
    for (name, declaration) in rows {
        assert!(
            matches!(declaration.build(), Err(ProviderError::InvalidArgument(_))),
            "{name}"
        );
    }
}

#[tokio::test]
async fn the_fake_passes_the_conformance_suite() {
    for cloud in [FakeCloud::standard(2), cloud()] {
        let report = ipam_cloud::conformance::run(&cloud, &mut |_| {}).await;
        let failures: Vec<_> = report.failures().collect();
        assert!(failures.is_empty(), "{failures:#?}");
        assert_eq!(report.not_applicable(), 0, "every capability checked");
        assert_eq!(report.passed(), report.checks.len());
        assert!(cloud.detached().is_empty(), "the suite undid what it made");
    }
}

#[tokio::test]
async fn conformance_creates_in_a_roomy_subnet_of_the_zone_when_the_primary_one_is_full() {
    // The instance's primary interface takes the last free address of its
    // /28; another subnet of its zone has room, one of another zone too.
    let mut full = SubnetSpec::new("subnet-full", "vpc-1", "zone-a", "10.0.1.0/28");
    for last in 4..14 {
        full = full.occupied(&format!("10.0.1.{last}"));
    }
    let cloud = FakeCloud::builder()
        .vpc("vpc-1", &["10.0.0.0/16"])
        .subnet(full)
        .subnet(SubnetSpec::new(
            "subnet-room",
            "vpc-1",
            "zone-a",
            "10.0.2.0/24",
        ))
        .subnet(SubnetSpec::new(
            "subnet-far",
            "vpc-1",
            "zone-b",
            "10.0.3.0/24",
        ))
        .instance_type("pd", DELEGATING)
        .instance(InstanceSpec::new("i-1", "pd", "subnet-full"))
        .build()
        .expect("the test cloud is valid");
    assert_eq!(cloud.subnet("subnet-full").unwrap().available_addresses, 0);
    let report = ipam_cloud::conformance::run(&cloud, &mut |_| {}).await;
    let failures: Vec<_> = report.failures().collect();
    assert!(failures.is_empty(), "{failures:#?}");
    let created = report
        .checks
        .iter()
        .find(|c| c.name.starts_with("create-interface: attached"))
        .expect("the create check ran");
    assert_eq!(created.outcome, ipam_cloud::conformance::Outcome::Pass);
    assert!(cloud.detached().is_empty(), "the suite undid what it made");
}

#[tokio::test]
async fn conformance_lists_every_check_it_could_not_run_with_the_reason() {
    use ipam_cloud::conformance::Outcome;
    // Every capability declared: fifteen mutating checks.
    const MUTATING: usize = 15;

    // No instance has room for another interface.
    let full = FakeCloud::builder()
        .vpc("vpc-1", &["10.0.0.0/16"])
        .subnet(SubnetSpec::new(
            "subnet-a",
            "vpc-1",
            "zone-a",
            "10.0.0.0/24",
        ))
        .instance_type(
            "one",
            InstanceLimits {
                max_interfaces: 1,
                ..DELEGATING
            },
        )
        .instance(InstanceSpec::new("i-1", "one", "subnet-a"))
        .build()
        .expect("the test cloud is valid");
    let report = ipam_cloud::conformance::run(&full, &mut |_| {}).await;
    assert_eq!(report.failed(), 0);
    assert_eq!(report.not_run(), MUTATING, "{:#?}", report.checks);
    assert!(report.checks.iter().all(|c| match &c.outcome {
        Outcome::NotRun(why) => why.contains("no listed instance has room"),
        _ => true,
    }));

    // The create fails: it is a failure, and the checks after it are listed.
    let cloud = FakeCloud::standard(1);
    cloud.fail_next(
        Operation::CreateInterface,
        1,
        ProviderError::Transient("the cloud hiccupped".into()),
    );
    let report = ipam_cloud::conformance::run(&cloud, &mut |_| {}).await;
    assert_eq!(report.failed(), 1);
    assert_eq!(report.not_run(), MUTATING - 1, "{:#?}", report.checks);
    let printed: Vec<String> = report.checks.iter().map(ToString::to_string).collect();
    assert!(
        printed
            .iter()
            .any(|line| line.contains("NOT RUN nothing the checks created is left detached")),
        "{printed:#?}"
    );
}

/// Addresses or networks as text, to compare with literals.
fn texts<T: ToString>(items: &[T]) -> Vec<String> {
    items.iter().map(ToString::to_string).collect()
}
