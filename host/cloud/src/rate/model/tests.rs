use super::*;

fn bucket(name: &str, burst: u32, per_second: f64) -> DeclaredBucket {
    DeclaredBucket {
        name: name.into(),
        burst,
        per_second,
    }
}

fn cost(operation: Operation, calls: &[(&str, &str)]) -> OperationCost {
    OperationCost {
        operation,
        calls: calls
            .iter()
            .map(|(name, bucket)| ApiCall {
                name: (*name).into(),
                bucket: (*bucket).into(),
            })
            .collect(),
    }
}

/// An EC2-shaped model: a bucket per API; every read one Describe.
fn ec2_like() -> RateModel {
    let mut costs = vec![
        cost(
            Operation::CreateInterface,
            &[
                ("CreateNetworkInterface", "CreateNetworkInterface"),
                ("AttachNetworkInterface", "AttachNetworkInterface"),
                (
                    "ModifyNetworkInterfaceAttribute",
                    "ModifyNetworkInterfaceAttribute",
                ),
            ],
        ),
        cost(
            Operation::AssignIps,
            &[("AssignPrivateIpAddresses", "AssignPrivateIpAddresses")],
        ),
    ];
    costs.extend(
        Operation::ALL
            .into_iter()
            .filter(|op| !op.is_mutating())
            .map(|op| cost(op, &[("Describe", "Describe")])),
    );
    RateModel {
        buckets: vec![
            bucket("Describe", 100, 20.0),
            bucket("CreateNetworkInterface", 100, 5.0),
            bucket("AttachNetworkInterface", 50, 5.0),
            bucket("ModifyNetworkInterfaceAttribute", 100, 5.0),
            bucket("AssignPrivateIpAddresses", 100, 5.0),
        ],
        costs,
    }
}

const CREATE_ONLY: Capabilities = Capabilities {
    create_interface: true,
    release: false,
    prefixes: false,
    delete_interface: false,
};

fn figures(limits: &RateLimits, name: &str) -> BucketConfig {
    let index = limits.bucket_index(name).expect("bucket exists");
    limits.buckets()[index].1
}

#[test]
fn a_declared_model_builds_a_bucket_each_and_charges_each_call() {
    let limits = RateLimits::from_model(&ec2_like(), CREATE_ONLY, &RateSettings::default())
        .expect("a whole model");
    assert_eq!(limits.buckets().len(), 5);
    assert_eq!(
        figures(&limits, "AttachNetworkInterface"),
        BucketConfig {
            burst: 50.0,
            per_second: 5.0
        }
    );
    assert_eq!(
        limits.cost(Operation::CreateInterface),
        &[(1, 1.0), (2, 1.0), (3, 1.0)]
    );
    assert_eq!(limits.cost(Operation::AssignIps), &[(4, 1.0)]);
    assert_eq!(limits.cost(Operation::GetInstances), &[(0, 1.0)]);
    // Capabilities off: delete-interface and unassign-ips need no cost.
    assert_eq!(limits.cost(Operation::DeleteInterface), &[]);
}

#[test]
fn two_calls_in_one_bucket_take_two_tokens() {
    let mut model = ec2_like();
    model.costs[1] = cost(
        Operation::AssignIps,
        &[
            ("Get", "Describe"),
            ("Put", "AssignPrivateIpAddresses"),
            ("Poll", "Describe"),
        ],
    );
    let limits = RateLimits::from_model(&model, CREATE_ONLY, &RateSettings::default()).unwrap();
    assert_eq!(limits.cost(Operation::AssignIps), &[(0, 2.0), (4, 1.0)]);
}

#[test]
fn an_override_wins_and_the_global_cap_takes_a_token_per_api_call() {
    let settings = RateSettings {
        overrides: [(
            "AttachNetworkInterface".to_string(),
            BucketConfig {
                burst: 200.0,
                per_second: 20.0,
            },
        )]
        .into(),
        global_cap: Some(BucketConfig {
            burst: 20.0,
            per_second: 4.0,
        }),
    };
    let limits = RateLimits::from_model(&ec2_like(), CREATE_ONLY, &settings).unwrap();
    assert_eq!(figures(&limits, "AttachNetworkInterface").burst, 200.0);
    assert_eq!(limits.buckets()[5].0, GLOBAL_CAP);
    assert_eq!(
        limits.cost(Operation::CreateInterface),
        &[(1, 1.0), (2, 1.0), (3, 1.0), (5, 3.0)]
    );
    assert_eq!(limits.cost(Operation::GetVpcs), &[(0, 1.0), (5, 1.0)]);
    // An operation the provider makes no call for takes nothing of the cap.
    assert_eq!(limits.cost(Operation::UnassignIps), &[]);
}

#[test]
fn an_override_of_a_bucket_the_provider_does_not_declare_is_refused() {
    let settings = RateSettings {
        overrides: [(
            "AttachNetworkInterfaces".to_string(),
            BucketConfig {
                burst: 1.0,
                per_second: 1.0,
            },
        )]
        .into(),
        global_cap: None,
    };
    let error = RateLimits::from_model(&ec2_like(), CREATE_ONLY, &settings).unwrap_err();
    assert!(
        matches!(&error, RateModelError::UnknownOverride { bucket, declared }
            if bucket == "AttachNetworkInterfaces" && declared.contains("AttachNetworkInterface,")),
        "{error}"
    );
}

#[test]
fn an_operation_the_capabilities_enable_without_a_cost_is_an_error() {
    let with_release = Capabilities {
        release: true,
        ..CREATE_ONLY
    };
    assert_eq!(
        RateLimits::from_model(&ec2_like(), with_release, &RateSettings::default()),
        Err(RateModelError::MissingCost(Operation::UnassignIps))
    );
    let mut model = ec2_like();
    model.costs.retain(|c| c.operation != Operation::GetSubnets);
    assert_eq!(
        RateLimits::from_model(&model, Capabilities::default(), &RateSettings::default()),
        Err(RateModelError::MissingCost(Operation::GetSubnets))
    );
}

#[test]
fn declarations_that_cannot_be_kept_to_are_refused_naming_what_is_wrong() {
    let refused = |edit: fn(&mut RateModel)| {
        let mut model = ec2_like();
        edit(&mut model);
        RateLimits::from_model(&model, CREATE_ONLY, &RateSettings::default())
            .expect_err("refused")
            .to_string()
    };
    let unknown = refused(|m| m.costs[0].calls[1].bucket = "Attach".into());
    assert!(
        unknown.contains("create-interface calls AttachNetworkInterface from bucket \"Attach\""),
        "{unknown}"
    );
    let twice = refused(|m| m.buckets.push(bucket("Describe", 1, 1.0)));
    assert!(twice.contains("\"Describe\" is declared twice"), "{twice}");
    let reserved = refused(|m| m.buckets.push(bucket(GLOBAL_CAP, 1, 1.0)));
    assert!(reserved.contains("declared twice"), "{reserved}");
    let zero_burst = refused(|m| m.buckets[0].burst = 0);
    assert!(
        zero_burst.contains("burst must be at least 1"),
        "{zero_burst}"
    );
    let no_refill = refused(|m| m.buckets[0].per_second = f64::NAN);
    assert!(no_refill.contains("refill"), "{no_refill}");
    let two_costs = refused(|m| m.costs.push(m.costs[0].clone()));
    assert!(
        two_costs.contains("create-interface has two declared costs"),
        "{two_costs}"
    );
}

#[test]
fn a_provider_without_a_model_gets_one_bucket_the_operator_may_set() {
    let limits = RateLimits::undeclared(&RateSettings::default()).unwrap();
    assert_eq!(limits.buckets().len(), 1);
    assert_eq!(limits.buckets()[0].0, UNDECLARED);
    assert_eq!(limits.cost(Operation::CreateInterface), &[(0, 1.0)]);
    let settings = RateSettings {
        overrides: [(UNDECLARED.to_string(), "50:10".parse().unwrap())].into(),
        global_cap: None,
    };
    let raised = RateLimits::undeclared(&settings).unwrap();
    assert_eq!(raised.buckets()[0].1.per_second, 10.0);
}

#[test]
fn buckets_are_written_burst_colon_refill() {
    assert_eq!(
        "100:2.5".parse::<BucketConfig>(),
        Ok(BucketConfig {
            burst: 100.0,
            per_second: 2.5
        })
    );
    for (text, problem) in [
        ("100", "no ':'"),
        ("x:1", "the burst is not a number"),
        ("1:y", "the refill is not a number"),
        ("0:1", "the burst must be at least 1"),
        (
            "10:0",
            "the refill must be a number of tokens per second above 0",
        ),
        (
            "10:inf",
            "the refill must be a number of tokens per second above 0",
        ),
    ] {
        let error = text.parse::<BucketConfig>().unwrap_err();
        assert_eq!(error.problem, problem, "{text}");
    }
}
