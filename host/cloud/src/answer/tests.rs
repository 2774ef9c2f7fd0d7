use super::*;

fn ip(text: &str) -> Ipv4Addr {
    text.parse().unwrap()
}

fn net(text: &str) -> Ipv4Net {
    text.parse().unwrap()
}

fn interface(id: &str, index: u32, primary: &str, addresses: &[&str]) -> NetworkInterface {
    NetworkInterface {
        id: id.into(),
        mac: "02:00:00:00:00:01".into(),
        index,
        subnet_id: "subnet-1".into(),
        vpc_id: "vpc-1".into(),
        primary_ip: ip(primary),
        addresses: addresses.iter().map(|a| ip(a)).collect(),
        prefixes: vec![],
        security_groups: vec![],
        tags: vec![],
        instance_id: Some("i-1".into()),
    }
}

fn instance(id: &str, interfaces: Vec<NetworkInterface>) -> Instance {
    let interfaces = interfaces
        .into_iter()
        .map(|mut i| {
            i.instance_id = Some(id.into());
            i
        })
        .collect();
    Instance {
        id: id.into(),
        instance_type: "m5.large".into(),
        availability_zone: "z".into(),
        vpc_id: "vpc-1".into(),
        interfaces,
    }
}

/// Subnet 10.0.1.0/24 in VPC 10.0.0.0/16.
fn known() -> KnownNetworks {
    let mut known = KnownNetworks::default();
    known.learn_vpcs(&[Vpc {
        id: "vpc-1".into(),
        primary_cidr: net("10.0.0.0/16"),
        cidrs: vec![net("10.0.0.0/16")],
    }]);
    known.learn_subnets(&[Subnet {
        id: "subnet-1".into(),
        cidr: net("10.0.1.0/24"),
        availability_zone: "z".into(),
        vpc_id: "vpc-1".into(),
        available_addresses: 100,
        tags: vec![],
    }]);
    known
}

fn problem(result: Result<(), BadField>) -> (Problem, String) {
    let bad = result.expect_err("refused");
    (bad.problem, bad.field)
}

#[test]
fn texts_and_networks_parse_only_when_well_formed() {
    assert_eq!(parse_address(|| "f".into(), "10.0.1.7"), Ok(ip("10.0.1.7")));
    assert_eq!(
        parse_address(|| "f".into(), "10.0.1.300")
            .unwrap_err()
            .problem,
        Problem::Unparsable
    );
    assert_eq!(
        parse_network(|| "f".into(), "10.0.1.16/28"),
        Ok(net("10.0.1.16/28"))
    );
    for bad in ["10.0.1.17/28", "10.0.1.0/33", "10.0.1.0", "x"] {
        let error = parse_network(|| "vpcs[v].cidrs[0]".into(), bad).unwrap_err();
        assert_eq!(error.problem, Problem::Unparsable, "{bad}");
        assert_eq!(error.field, "vpcs[v].cidrs[0]");
    }
    assert_eq!(
        network(|| "f".into(), ip("10.0.1.16"), 28),
        Ok(net("10.0.1.16/28"))
    );
    assert!(network(|| "f".into(), ip("10.0.1.1"), 28)
        .unwrap_err()
        .detail
        .contains("bits set past its length (the network is 10.0.1.0/28)"));
    assert!(network(|| "f".into(), ip("10.0.1.0"), 40).is_err());
}

#[test]
fn a_believable_instance_passes() {
    let good = instance(
        "i-1",
        vec![
            interface("eni-0", 0, "10.0.1.10", &["10.0.1.11"]),
            interface("eni-1", 1, "10.0.1.20", &["10.0.1.21", "10.0.1.22"]),
        ],
    );
    assert_eq!(check_instance(&good, &known()), Ok(()));
    assert!(check_instances(&[good], &known()).is_empty());
}

#[test]
fn impossible_instances_are_refused_naming_the_field() {
    let cases: Vec<(&str, Instance, Problem, &str)> = vec![
        (
            "address outside the subnet",
            instance(
                "i-1",
                vec![interface("eni-0", 0, "10.0.1.10", &["192.168.7.7"])],
            ),
            Problem::OutsideNetwork,
            "instances[i-1].interfaces[eni-0].addresses[0]",
        ),
        (
            "primary outside the subnet",
            instance("i-1", vec![interface("eni-0", 0, "10.0.2.10", &[])]),
            Problem::OutsideNetwork,
            "instances[i-1].interfaces[eni-0].primary-ip",
        ),
        (
            "one address twice on an interface",
            instance(
                "i-1",
                vec![interface("eni-0", 0, "10.0.1.10", &["10.0.1.10"])],
            ),
            Problem::DuplicateAddress,
            "instances[i-1].interfaces[eni-0].addresses[0]",
        ),
        (
            "one address on two interfaces",
            instance(
                "i-1",
                vec![
                    interface("eni-0", 0, "10.0.1.10", &["10.0.1.77"]),
                    interface("eni-1", 1, "10.0.1.20", &["10.0.1.77"]),
                ],
            ),
            Problem::DuplicateAddress,
            "instances[i-1].interfaces[eni-1].addresses[0]",
        ),
        (
            "two interfaces at one index",
            instance(
                "i-1",
                vec![
                    interface("eni-1", 1, "10.0.1.10", &[]),
                    interface("eni-2", 1, "10.0.1.20", &[]),
                ],
            ),
            Problem::DuplicateIndex,
            "instances[i-1].interfaces[eni-2].index",
        ),
    ];
    for (case, bad, expected, field) in cases {
        assert_eq!(
            problem(check_instance(&bad, &known())),
            (expected, field.to_string()),
            "{case}"
        );
    }
    let mut elsewhere = instance("i-1", vec![interface("eni-0", 0, "10.0.1.10", &[])]);
    elsewhere.interfaces[0].instance_id = Some("i-2".into());
    assert_eq!(
        problem(check_instance(&elsewhere, &known())).0,
        Problem::OtherInstance
    );
    let mut prefix = instance("i-1", vec![interface("eni-0", 0, "10.0.1.10", &[])]);
    prefix.interfaces[0].prefixes = vec![net("10.0.9.0/28")];
    assert_eq!(
        problem(check_instance(&prefix, &known())),
        (
            Problem::OutsideNetwork,
            "instances[i-1].interfaces[eni-0].prefixes[0]".to_string()
        )
    );
}

#[test]
fn an_unlisted_subnet_is_checked_against_its_vpc_and_an_unknown_vpc_not_at_all() {
    let mut in_vpc = instance("i-1", vec![interface("eni-0", 0, "10.0.9.10", &[])]);
    in_vpc.interfaces[0].subnet_id = "subnet-unlisted".into();
    assert_eq!(check_instance(&in_vpc, &known()), Ok(()));
    in_vpc.interfaces[0].addresses = vec![ip("172.16.0.1")];
    let bad = check_instance(&in_vpc, &known()).unwrap_err();
    assert!(
        bad.detail.contains("outside its VPC vpc-1 (10.0.0.0/16)"),
        "{bad}"
    );
    assert_eq!(check_instance(&in_vpc, &KnownNetworks::default()), Ok(()));
}

#[test]
fn an_address_on_two_instances_condemns_both_and_spares_the_rest() {
    let listing = [
        instance(
            "i-a",
            vec![interface("eni-a", 0, "10.0.1.10", &["10.0.1.50"])],
        ),
        instance("i-b", vec![interface("eni-b", 0, "10.0.1.20", &[])]),
        instance(
            "i-c",
            vec![interface("eni-c", 0, "10.0.1.30", &["10.0.1.50"])],
        ),
    ];
    let bad = check_instances(&listing, &known());
    let condemned: Vec<usize> = bad.iter().map(|(n, _)| *n).collect();
    assert_eq!(condemned, [0, 2]);
    assert!(bad
        .iter()
        .all(|(_, b)| b.problem == Problem::DuplicateAddress));
    assert_eq!(
        bad[0].1.field,
        "instances[i-a].interfaces[eni-a].addresses[0]"
    );
}

fn request(use_prefixes: bool) -> CreateInterfaceRequest {
    CreateInterfaceRequest {
        instance_id: "i-1".into(),
        index: 1,
        subnet_id: "subnet-1".into(),
        security_groups: vec![],
        description: String::new(),
        tags: vec![],
        delete_on_termination: true,
        ipv4_count: 2,
        use_prefixes,
    }
}

#[test]
fn a_created_interface_is_the_one_asked_for() {
    let created = interface("eni-9", 1, "10.0.1.40", &["10.0.1.41", "10.0.1.42"]);
    assert_eq!(check_created(&request(false), &created, &known()), Ok(()));
    type Edit = fn(&mut NetworkInterface);
    let cases: Vec<(Edit, Problem, &str)> = vec![
        (
            |i| i.instance_id = Some("i-2".into()),
            Problem::OtherInstance,
            "interface[eni-9].instance-id",
        ),
        (
            |i| i.instance_id = None,
            Problem::OtherInstance,
            "interface[eni-9].instance-id",
        ),
        (
            |i| i.index = 2,
            Problem::OtherIndex,
            "interface[eni-9].index",
        ),
        (
            |i| i.subnet_id = "subnet-2".into(),
            Problem::NotAsked,
            "interface[eni-9].subnet-id",
        ),
        (
            |i| i.addresses.pop().map(drop).unwrap_or(()),
            Problem::NotAsked,
            "interface[eni-9].addresses",
        ),
        (
            |i| i.prefixes.push("10.0.1.48/28".parse().unwrap()),
            Problem::NotAsked,
            "interface[eni-9].prefixes",
        ),
    ];
    for (edit, expected, field) in cases {
        let mut bad = created.clone();
        edit(&mut bad);
        assert_eq!(
            problem(check_created(&request(false), &bad, &known())),
            (expected, field.to_string())
        );
    }
    let mut with_prefixes = interface("eni-9", 1, "10.0.1.40", &[]);
    with_prefixes.prefixes = vec![net("10.0.1.48/28"), net("10.0.1.64/28")];
    assert_eq!(
        check_created(&request(true), &with_prefixes, &known()),
        Ok(())
    );
}

#[test]
fn an_assignment_is_exactly_what_was_asked() {
    let mut known = known();
    known.learn_interfaces([&interface("eni-0", 0, "10.0.1.10", &[])]);
    let assigned = |addresses: &[&str], prefixes: &[&str]| Assigned {
        addresses: addresses.iter().map(|a| ip(a)).collect(),
        prefixes: prefixes.iter().map(|p| net(p)).collect(),
    };
    let two = IpRequest::Addresses(2);
    assert_eq!(
        check_assigned(
            "eni-0",
            two,
            &assigned(&["10.0.1.11", "10.0.1.12"], &[]),
            &known
        ),
        Ok(())
    );
    let cases = [
        (
            two,
            assigned(&["10.0.1.11", "10.0.1.12", "10.0.1.13"], &[]),
            Problem::NotAsked,
            "assigned.addresses",
        ),
        (
            two,
            assigned(&["10.0.1.11"], &[]),
            Problem::NotAsked,
            "assigned.addresses",
        ),
        (
            two,
            assigned(&["10.0.1.11", "10.0.1.12"], &["10.0.1.16/28"]),
            Problem::NotAsked,
            "assigned.prefixes",
        ),
        (
            two,
            assigned(&["10.0.1.11", "10.0.1.11"], &[]),
            Problem::DuplicateAddress,
            "assigned.addresses[1]",
        ),
        (
            two,
            assigned(&["10.0.1.11", "10.9.1.12"], &[]),
            Problem::OutsideNetwork,
            "assigned.addresses[1]",
        ),
        (
            IpRequest::Prefixes(1),
            assigned(&["10.0.1.11"], &["10.0.1.16/28"]),
            Problem::NotAsked,
            "assigned.addresses",
        ),
    ];
    for (request, answer, expected, field) in cases {
        assert_eq!(
            problem(check_assigned("eni-0", request, &answer, &known)),
            (expected, field.to_string()),
            "{answer:?}"
        );
    }
    // An interface never listed: counted, not placed.
    assert_eq!(
        check_assigned(
            "eni-x",
            two,
            &assigned(&["10.9.0.1", "10.9.0.2"], &[]),
            &known
        ),
        Ok(())
    );
}

#[test]
fn limits_allow_at_least_one_interface_with_one_address() {
    let limits = InstanceLimits {
        max_interfaces: 3,
        ipv4_per_interface: 10,
        ipv6_per_interface: 10,
        prefix_delegation: true,
    };
    assert_eq!(check_limits(&limits), Ok(()));
    let none = InstanceLimits {
        max_interfaces: 0,
        ..limits
    };
    assert_eq!(problem(check_limits(&none)).1, "limits.max-interfaces");
    let no_address = InstanceLimits {
        ipv4_per_interface: 0,
        ..limits
    };
    assert_eq!(problem(check_limits(&no_address)).0, Problem::ZeroLimit);
}

#[test]
fn a_full_listing_replaces_what_was_known() {
    let mut known = known();
    known.learn_interfaces([&interface("eni-0", 0, "10.0.1.10", &[])]);
    assert!(known.interface_bounds("eni-0").is_some());
    known.forget_interfaces();
    assert!(
        known.interface_bounds("eni-0").is_none(),
        "a gone interface is forgotten"
    );
    known.learn_subnets(&[]);
    let mut elsewhere = instance("i-1", vec![interface("eni-0", 0, "10.0.9.10", &[])]);
    elsewhere.interfaces[0].subnet_id = "subnet-1".into();
    // subnet-1 is gone from the listing: its VPC's networks bound it now.
    assert_eq!(check_instance(&elsewhere, &known), Ok(()));
}
