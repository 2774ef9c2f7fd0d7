use super::*;

/// A table of two buckets: create-interface makes a create then an attach
/// call; every other operation one read.
fn small(create_burst: u32, attach_burst: u32) -> String {
    let reads: Vec<String> = Operation::ALL
        .into_iter()
        .filter(|op| *op != Operation::CreateInterface)
        .map(|op| format!("  {}: [Read]\n", op.wit_name()))
        .collect();
    format!(
        "name: small\n\
         buckets:\n  create: {{burst: {create_burst}, per-second: 1}}\n  attach: {{burst: {attach_burst}, per-second: 4}}\n  read: {{burst: 10, per-second: 1}}\n\
         apis:\n  Create: {{bucket: create, mutates: true}}\n  Attach: {{bucket: attach, mutates: true}}\n  Read: {{bucket: read}}\n\
         operations:\n  create-interface: [Create, Attach]\n{}",
        reads.concat()
    )
}

fn names(table: &CloudTable, operation: Operation) -> Vec<&str> {
    table.calls(operation).map(|a| a.name.as_str()).collect()
}

#[test]
fn the_embedded_tables_parse() {
    let ec2 = CloudTable::ec2().unwrap();
    assert_eq!(ec2.name(), "EC2");
    assert_eq!(ec2.buckets().len(), 13, "one bucket per API");
    assert_eq!(
        names(&ec2, Operation::CreateInterface),
        [
            "DescribeNetworkInterfaces",
            "CreateNetworkInterface",
            "AttachNetworkInterface",
            "ModifyNetworkInterfaceAttribute"
        ]
    );
    assert_eq!(
        names(&ec2, Operation::GetInstances),
        ["DescribeInstances", "DescribeNetworkInterfaces"]
    );
    let attach = ec2.api("AttachNetworkInterface").unwrap();
    assert!(attach.mutates);
    assert_eq!(
        ec2.buckets()[attach.bucket].1,
        BucketConfig {
            burst: 50.0,
            per_second: 5.0
        }
    );
    assert!(!ec2.api("DescribeVpcs").unwrap().mutates);
    assert!(Operation::ALL.into_iter().all(|op| ec2.supports(op)));

    let arm = CloudTable::arm().unwrap();
    assert_eq!(arm.name(), "ARM");
    assert_eq!(
        names(&arm, Operation::AssignIps),
        [
            "NetworkInterfaces_Get",
            "NetworkInterfaces_CreateOrUpdate",
            "AzureAsyncOperation_Get"
        ]
    );
    assert_eq!(names(&arm, Operation::GetInstances).len(), 2);
    for unsupported in [Operation::CreateInterface, Operation::DeleteInterface] {
        assert!(!arm.supports(unsupported));
        assert_eq!(names(&arm, unsupported), Vec::<&str>::new());
    }
}

#[test]
fn a_bad_table_is_refused_naming_what_is_wrong() {
    let good = small(2, 1);
    CloudTable::parse(&good).unwrap();
    type Row = (&'static str, String, fn(&TableError) -> bool);
    let rows: Vec<Row> = vec![
        (
            "a call's API names an unknown bucket",
            good.replace("{bucket: attach,", "{bucket: atach,"),
            |e| matches!(e, TableError::UnknownBucket { api, bucket } if api == "Attach" && bucket == "atach"),
        ),
        (
            "burst 0",
            good.replace("attach: {burst: 1,", "attach: {burst: 0,"),
            |e| matches!(e, TableError::ZeroBurst { bucket } if bucket == "attach"),
        ),
        (
            "no refill",
            good.replace("per-second: 4", "per-second: 0"),
            |e| matches!(e, TableError::BadRefill { bucket, .. } if bucket == "attach"),
        ),
        (
            "a negative refill",
            good.replace("per-second: 4", "per-second: -4"),
            |e| matches!(e, TableError::BadRefill { bucket, .. } if bucket == "attach"),
        ),
        (
            "an infinite refill",
            good.replace("per-second: 4", "per-second: .inf"),
            |e| matches!(e, TableError::BadRefill { bucket, .. } if bucket == "attach"),
        ),
        (
            "a refill that is not a number",
            good.replace("per-second: 4", "per-second: .nan"),
            |e| matches!(e, TableError::BadRefill { bucket, .. } if bucket == "attach"),
        ),
        (
            "an unknown operation",
            good.replace("create-interface:", "create-interfaces:"),
            |e| matches!(e, TableError::UnknownOperation { name } if name == "create-interfaces"),
        ),
        (
            "an unknown unsupported operation",
            format!("{good}unsupported: [attach-interface]\n"),
            |e| matches!(e, TableError::UnknownOperation { name } if name == "attach-interface"),
        ),
        (
            "an operation left out",
            good.replace("  create-interface: [Create, Attach]\n", ""),
            |e| {
                matches!(
                    e,
                    TableError::MissingOperation {
                        operation: Operation::CreateInterface
                    }
                )
            },
        ),
        (
            "an operation both supported and not",
            format!("{good}unsupported: [create-interface]\n"),
            |e| {
                matches!(
                    e,
                    TableError::OperationTwice {
                        operation: Operation::CreateInterface
                    }
                )
            },
        ),
        (
            "an operation calls an undeclared API",
            good.replace("[Create, Attach]", "[Create, Atach]"),
            |e| matches!(e, TableError::UnknownApi { api, named_by } if api == "Atach" && named_by == "create-interface"),
        ),
        (
            "an unknown field",
            format!("{good}surprise: 1\n"),
            |e| matches!(e, TableError::Parse(p) if p.to_string().contains("unknown field")),
        ),
        (
            "a fractional burst",
            good.replace("attach: {burst: 1,", "attach: {burst: 1.5,"),
            |e| matches!(e, TableError::Parse(_)),
        ),
    ];
    for (what, text, expected) in rows {
        let error = CloudTable::parse(&text).expect_err(what);
        assert!(expected(&error), "{what}: {error:?}");
    }
    // The messages say what is wrong, in the table's own words.
    let error = CloudTable::parse(&good.replace("create-interface:", "create-interfaces:"))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("\"create-interfaces\"") && error.contains("create-interface,"),
        "{error}"
    );
    let error = CloudTable::parse(&good.replace("{bucket: attach,", "{bucket: atach,"))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("Attach") && error.contains("\"atach\""),
        "{error}"
    );
}

#[test]
fn calls_take_tokens_in_order_and_a_refusal_keeps_the_earlier_ones_spent() {
    let t0 = Instant::now();
    let table = CloudTable::parse(&small(2, 1)).unwrap();
    let mut buckets = TableBuckets::new(table, t0);
    assert_eq!(buckets.admit(Operation::CreateInterface, t0), Ok(()));
    assert_eq!(
        buckets.admit(Operation::CreateInterface, t0),
        Err(Refusal::Throttled {
            api: "Attach".into(),
            made: 1,
            retry_after: Duration::from_millis(250),
        }),
        "the attach bucket is empty: the create call happened, the attach did not"
    );
    assert_eq!(
        buckets.admit(Operation::CreateInterface, t0),
        Err(Refusal::Throttled {
            api: "Create".into(),
            made: 0,
            retry_after: Duration::from_secs(1),
        }),
        "the refused operation's create token stays spent"
    );
    // Other buckets are untouched.
    assert_eq!(buckets.admit(Operation::GetVpcs, t0), Ok(()));
    let later = t0 + Duration::from_secs(1);
    assert_eq!(buckets.admit(Operation::CreateInterface, later), Ok(()));
}

#[test]
fn an_unsupported_operation_is_refused_and_costs_nothing() {
    let t0 = Instant::now();
    let mut buckets = TableBuckets::new(CloudTable::arm().unwrap(), t0);
    assert_eq!(
        buckets.admit(Operation::CreateInterface, t0),
        Err(Refusal::Unsupported)
    );
    assert_eq!(buckets.admit(Operation::AssignIps, t0), Ok(()));
}

#[test]
fn engine_limits_are_the_table_bucket_for_bucket() {
    let ec2 = CloudTable::ec2().unwrap();
    let limits = ec2.engine_limits();
    assert_eq!(limits.buckets(), ec2.buckets());
    let bucket = |name: &str| ec2.api(name).unwrap().bucket;
    let mut create = limits.cost(Operation::CreateInterface).to_vec();
    create.sort_by_key(|(b, _)| *b);
    let mut expected = vec![
        (bucket("DescribeNetworkInterfaces"), 1.0),
        (bucket("CreateNetworkInterface"), 1.0),
        (bucket("AttachNetworkInterface"), 1.0),
        (bucket("ModifyNetworkInterfaceAttribute"), 1.0),
    ];
    expected.sort_by_key(|(b, _)| *b);
    assert_eq!(create, expected);

    // ARM: assign-ips reads twice and writes once.
    let arm = CloudTable::arm().unwrap();
    let limits = arm.engine_limits();
    let read = arm.buckets().iter().position(|(n, _)| n == "read").unwrap();
    let write = arm
        .buckets()
        .iter()
        .position(|(n, _)| n == "write")
        .unwrap();
    let mut assign = limits.cost(Operation::AssignIps).to_vec();
    assign.sort_by_key(|(b, _)| *b);
    let mut expected = vec![(read, 2.0), (write, 1.0)];
    expected.sort_by_key(|(b, _)| *b);
    assert_eq!(assign, expected);
    assert_eq!(limits.cost(Operation::CreateInterface), &[]);
}

#[test]
fn the_admission_bound_is_the_slowest_bucket_past_its_burst() {
    let ec2 = CloudTable::ec2().unwrap();
    let one = |api: &str, calls: u64| BTreeMap::from([(api.to_string(), calls)]);
    // Cilium's limit as a table: one bucket of 20, 4 a second.
    let cilium = CloudTable::parse(&format!(
        "name: cilium\nbuckets: {{all: {{burst: 20, per-second: 4}}}}\napis: {{Call: {{bucket: all}}}}\noperations:\n{}",
        Operation::ALL
            .map(|op| format!("  {}: [Call]\n", op.wit_name()))
            .concat()
    ))
    .unwrap();
    /// What, the table, nodes, calls per node, the bound, its bucket.
    type Row<'a> = (
        &'static str,
        &'a CloudTable,
        u64,
        BTreeMap<String, u64>,
        f64,
        Option<&'static str>,
    );
    let rows: Vec<Row> = vec![
        (
            "1,000 attaches: burst 50, then 5 a second",
            &ec2,
            1000,
            one("AttachNetworkInterface", 1),
            190.0,
            Some("AttachNetworkInterface"),
        ),
        (
            "one bucket of 20 at 4/s, 3 calls per node",
            &cilium,
            1000,
            one("Call", 3),
            745.0,
            Some("all"),
        ),
        (
            "within the burst: no wait",
            &ec2,
            50,
            one("AttachNetworkInterface", 1),
            0.0,
            None,
        ),
        ("nothing needed", &ec2, 1000, BTreeMap::new(), 0.0, None),
        (
            "S1 on m5.large: a create-interface and an assign per node; attach decides",
            &ec2,
            1000,
            ec2.calls_of(&[(Operation::CreateInterface, 1), (Operation::AssignIps, 1)]),
            190.0,
            Some("AttachNetworkInterface"),
        ),
        (
            "two calls in one bucket add up",
            &ec2,
            100,
            one("DescribeNetworkInterfaces", 2),
            5.0,
            Some("DescribeNetworkInterfaces"),
        ),
    ];
    for (what, table, nodes, per_node, seconds, bucket) in rows {
        let bound = admission_bound(table, nodes, &per_node).unwrap();
        assert!((bound.seconds - seconds).abs() < 1e-9, "{what}: {bound:?}");
        assert_eq!(bound.bucket.as_deref(), bucket, "{what}");
    }
    let error = admission_bound(&ec2, 1, &one("AttachInterface", 1)).unwrap_err();
    assert!(
        matches!(&error, TableError::UnknownApi { api, .. } if api == "AttachInterface"),
        "{error:?}"
    );
}

#[test]
fn calls_of_counts_api_calls_of_operations() {
    let ec2 = CloudTable::ec2().unwrap();
    let calls = ec2.calls_of(&[
        (Operation::GetInstances, 2),
        (Operation::GetDetachedInterfaces, 1),
    ]);
    assert_eq!(
        calls,
        BTreeMap::from([
            ("DescribeInstances".to_string(), 2),
            ("DescribeNetworkInterfaces".to_string(), 3),
        ])
    );
    let arm = CloudTable::arm().unwrap();
    assert!(arm.calls_of(&[(Operation::CreateInterface, 1)]).is_empty());
}
