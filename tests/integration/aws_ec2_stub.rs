//! The AWS component against a local EC2 stub that answers in EC2's own
//! query-protocol XML: every error code the engine acts on becomes the right
//! WIT variant, create-interface's multi-call paths (an index taken, an
//! attach or modify failing) end as the WIT contract says, and successful
//! assigns of addresses and /28 prefixes return what EC2 assigned.

use ipam_tests as common;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use ipam_cloud::{CloudApi, CreateInterfaceRequest, IpRequest};

const XMLNS: &str = "http://ec2.amazonaws.com/doc/2016-11-15/";

/// One EC2 request as the stub saw it: the Action and its form parameters.
#[derive(Debug, Clone)]
struct Call {
    action: String,
    params: Vec<(String, String)>,
}

impl Call {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

type Answer = dyn Fn(&Call, usize) -> (StatusCode, String) + Send + Sync;

/// An EC2 stub on 127.0.0.1 answering with `answer` (given the call and how
/// many calls of that action came before); its URL and the calls it saw.
async fn ec2_stub(answer: Arc<Answer>) -> (String, Arc<Mutex<Vec<Call>>>) {
    let calls = Arc::new(Mutex::new(Vec::<Call>::new()));
    let seen = calls.clone();
    let address = common::stub_server(move |request| {
        let params = common::form_params(&request.body);
        let action = params
            .iter()
            .find(|(k, _)| k == "Action")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let call = Call { action, params };
        let before = {
            let mut calls = seen.lock().unwrap();
            let before = calls.iter().filter(|c| c.action == call.action).count();
            calls.push(call.clone());
            before
        };
        let (status, body) = answer(&call, before);
        Response::builder()
            .status(status)
            .header("content-type", "text/xml;charset=UTF-8")
            .body(Full::new(Bytes::from(body)))
            .expect("stub response")
    })
    .await;
    (format!("http://{address}"), calls)
}

/// An EC2 error response, as EC2 sends it.
fn ec2_error(code: &str, message: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
         <Message>{message}</Message></Error></Errors><RequestID>ea966190-f9aa-478e-9ede-example</RequestID></Response>"
    )
}

/// The answer to a call the test does not expect.
fn unexpected() -> (StatusCode, String) {
    (
        StatusCode::BAD_REQUEST,
        ec2_error("InvalidAction", "unexpected"),
    )
}

/// EC2's answer to an action that returns only success.
fn done(action: &str) -> (StatusCode, String) {
    ok(action, "<return>true</return>")
}

fn ok(action: &str, inner: &str) -> (StatusCode, String) {
    (
        StatusCode::OK,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<{action}Response xmlns=\"{XMLNS}\">\
             <requestId>59dbff89-35bd-4eac-99ed-example</requestId>{inner}</{action}Response>"
        ),
    )
}

const ATTACHED: &str =
    "<attachmentId>eni-attach-1</attachmentId><networkCardIndex>0</networkCardIndex>";

const CREATED: &str = "<networkInterface><networkInterfaceId>eni-0new</networkInterfaceId>\
    <subnetId>subnet-1</subnetId><vpcId>vpc-1</vpcId><availabilityZone>us-east-1a</availabilityZone>\
    <description>test</description><macAddress>02:00:00:00:00:01</macAddress>\
    <status>pending</status><privateIpAddress>10.0.1.5</privateIpAddress>\
    <sourceDestCheck>true</sourceDestCheck>\
    <groupSet><item><groupId>sg-1</groupId><groupName>pods</groupName></item></groupSet>\
    <privateIpAddressesSet>\
    <item><privateIpAddress>10.0.1.5</privateIpAddress><primary>true</primary></item>\
    <item><privateIpAddress>10.0.1.6</privateIpAddress><primary>false</primary></item>\
    </privateIpAddressesSet>\
    <tagSet><item><key>ipam-operator/cluster</key><value>test</value></item></tagSet>\
    </networkInterface>";

fn create_request(index: u32) -> CreateInterfaceRequest {
    CreateInterfaceRequest {
        instance_id: "i-1".into(),
        index,
        subnet_id: "subnet-1".into(),
        security_groups: vec!["sg-1".into()],
        description: "test".into(),
        tags: vec![],
        delete_on_termination: true,
        ipv4_count: 1,
        use_prefixes: false,
    }
}

async fn provider(endpoint: &str) -> ipam_provider_runtime::WasmProvider {
    let settings = serde_json::json!({
        "region": "us-east-1",
        "endpoint": endpoint,
        // The first answer is the one under test: no SDK retries.
        "max-attempts": 1,
    });
    common::aws(settings.to_string(), endpoint).await
}

fn actions(calls: &Mutex<Vec<Call>>) -> Vec<String> {
    calls
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.action.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ec2_error_code_becomes_the_right_wit_variant() {
    let table: &[(&str, u16, &str)] = &[
        ("RequestLimitExceeded", 503, "throttled"),
        ("InsufficientFreeAddressesInSubnet", 400, "subnet-full"),
        ("InsufficientCidrBlocks", 400, "insufficient-prefixes"),
        ("PrivateIpAddressLimitExceeded", 400, "address-limit"),
        ("AttachmentLimitExceeded", 400, "interface-limit"),
        ("UnauthorizedOperation", 403, "unauthorized"),
        ("AuthFailure", 401, "unauthorized"),
        ("InvalidClientTokenId", 401, "unauthorized"),
        ("InvalidNetworkInterfaceID.NotFound", 400, "not-found"),
        ("InvalidInstanceID.NotFound", 400, "not-found"),
        ("InvalidSubnetID.NotFound", 400, "not-found"),
        ("InvalidInstanceType", 400, "not-found"),
        ("InvalidNetworkInterface.InUse", 400, "conflict"),
        ("IncorrectState", 400, "conflict"),
        ("InvalidParameterValue", 400, "invalid-argument"),
        ("MissingParameter", 400, "invalid-argument"),
        (
            "InvalidNetworkInterfaceID.Malformed",
            400,
            "invalid-argument",
        ),
        ("InternalError", 500, "transient"),
        ("Unavailable", 503, "transient"),
        ("SomethingEc2AddsLater", 500, "transient"),
        ("SomethingEc2AddsLater", 400, "other"),
    ];
    let which = Arc::new(Mutex::new(0usize));
    let reading = which.clone();
    let (endpoint, calls) = ec2_stub(Arc::new(move |_, _| {
        let (code, status, _) = table[*reading.lock().unwrap()];
        (
            StatusCode::from_u16(status).unwrap(),
            ec2_error(code, "as EC2 words it"),
        )
    }))
    .await;
    let aws = provider(&endpoint).await;
    for (n, (code, status, want)) in table.iter().enumerate() {
        *which.lock().unwrap() = n;
        let result = aws.assign_ips("eni-1", IpRequest::Addresses(2)).await;
        let error = result.expect_err("the stub answers with an error");
        assert_eq!(
            error.response_code(),
            *want,
            "{code} ({status}) became {error}"
        );
        if *want != "throttled" {
            assert!(error.to_string().contains(code), "{error} names {code}");
        }
    }
    let last = calls.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last.action, "AssignPrivateIpAddresses");
    assert_eq!(last.param("NetworkInterfaceId"), Some("eni-1"));
    assert_eq!(last.param("SecondaryPrivateIpAddressCount"), Some("2"));
    assert_eq!(
        actions(&calls).len(),
        table.len(),
        "one request each: no retries"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_error_without_an_ec2_body_is_transient() {
    let (endpoint, _) = ec2_stub(Arc::new(|_, _| {
        (
            StatusCode::BAD_GATEWAY,
            "<html><body>502 Bad Gateway</body></html>".into(),
        )
    }))
    .await;
    let error = provider(&endpoint)
        .await
        .get_subnets()
        .await
        .expect_err("502");
    assert_eq!(error.response_code(), "transient", "{error}");
}

/// DescribeNetworkInterfaces by `attachment.instance-id` finding nothing at
/// the asked index (create-interface's check before it creates).
fn index_free() -> (StatusCode, String) {
    ok("DescribeNetworkInterfaces", "<networkInterfaceSet/>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_ec2_says_is_taken_is_a_conflict_and_the_created_interface_is_deleted() {
    // The instance read shows the index free, then someone else attaches
    // there before our attach: EC2's answer is the only sign of it.
    let (endpoint, calls) = ec2_stub(Arc::new(|call, _| match call.action.as_str() {
        "DescribeNetworkInterfaces" => index_free(),
        "CreateNetworkInterface" => ok("CreateNetworkInterface", CREATED),
        "AttachNetworkInterface" => (
            StatusCode::BAD_REQUEST,
            ec2_error(
                "InvalidParameterValue",
                "Instance 'i-1' already has an interface attached at device index '1'.",
            ),
        ),
        "DeleteNetworkInterface" => done("DeleteNetworkInterface"),
        _ => unexpected(),
    }))
    .await;
    let error = provider(&endpoint)
        .await
        .create_interface(&create_request(1))
        .await
        .expect_err("the index is taken");
    assert_eq!(error.response_code(), "conflict", "{error}");
    assert!(error.to_string().contains("device index '1'"), "{error}");
    assert_eq!(
        actions(&calls),
        [
            "DescribeNetworkInterfaces",
            "CreateNetworkInterface",
            "AttachNetworkInterface",
            "DeleteNetworkInterface"
        ],
        "one attach at the asked index, then the created interface deleted"
    );
    let calls = calls.lock().unwrap();
    assert_eq!(
        calls[0].param("Filter.1.Name"),
        Some("attachment.instance-id")
    );
    assert_eq!(calls[0].param("Filter.1.Value.1"), Some("i-1"));
    assert_eq!(calls[2].param("DeviceIndex"), Some("1"));
    assert_eq!(calls[2].param("NetworkCardIndex"), Some("0"));
    assert_eq!(calls[3].param("NetworkInterfaceId"), Some("eni-0new"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_the_instance_already_uses_is_a_conflict_before_anything_is_created() {
    // The instance has eni-0theirs at index 1, and an interface at index 2
    // that is detaching (EC2 keeps its index until it is detached).
    let described = "<networkInterfaceSet>\
        <item><networkInterfaceId>eni-0theirs</networkInterfaceId><privateIpAddress>10.0.1.9</privateIpAddress>\
        <attachment><attachmentId>eni-attach-9</attachmentId><instanceId>i-1</instanceId>\
        <deviceIndex>1</deviceIndex><networkCardIndex>0</networkCardIndex><status>attached</status></attachment></item>\
        <item><networkInterfaceId>eni-0leaving</networkInterfaceId><privateIpAddress>10.0.1.8</privateIpAddress>\
        <attachment><attachmentId>eni-attach-8</attachmentId><instanceId>i-1</instanceId>\
        <deviceIndex>2</deviceIndex><networkCardIndex>0</networkCardIndex><status>detaching</status></attachment></item>\
        <item><networkInterfaceId>eni-0card1</networkInterfaceId><privateIpAddress>10.0.1.7</privateIpAddress>\
        <attachment><attachmentId>eni-attach-7</attachmentId><instanceId>i-1</instanceId>\
        <deviceIndex>3</deviceIndex><networkCardIndex>1</networkCardIndex><status>attached</status></attachment></item>\
        </networkInterfaceSet>";
    let (endpoint, calls) = ec2_stub(Arc::new(move |call, _| match call.action.as_str() {
        "DescribeNetworkInterfaces" => ok("DescribeNetworkInterfaces", described),
        "CreateNetworkInterface" => ok("CreateNetworkInterface", CREATED),
        "AttachNetworkInterface" => ok("AttachNetworkInterface", ATTACHED),
        "ModifyNetworkInterfaceAttribute" => done("ModifyNetworkInterfaceAttribute"),
        _ => unexpected(),
    }))
    .await;
    let aws = provider(&endpoint).await;
    for (index, holder) in [(1, "eni-0theirs"), (2, "eni-0leaving")] {
        let error = aws
            .create_interface(&create_request(index))
            .await
            .expect_err("the index is taken");
        assert_eq!(error.response_code(), "conflict", "{error}");
        assert!(error.to_string().contains(holder), "{error} names {holder}");
    }
    assert_eq!(
        actions(&calls),
        ["DescribeNetworkInterfaces", "DescribeNetworkInterfaces"],
        "nothing created"
    );
    // Device indexes restart on every network card: index 3 of card 0 is free.
    let eni = aws
        .create_interface(&create_request(3))
        .await
        .expect("index 3 of card 0 is free");
    assert_eq!(eni.index, 3);
    assert_eq!(
        calls.lock().unwrap().last().map(|c| c.action.clone()),
        Some("ModifyNetworkInterfaceAttribute".to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_index_is_attached_and_delete_on_termination_set() {
    let (endpoint, calls) = ec2_stub(Arc::new(|call, _| match call.action.as_str() {
        "DescribeNetworkInterfaces" => index_free(),
        "CreateNetworkInterface" => ok("CreateNetworkInterface", CREATED),
        "AttachNetworkInterface" => ok("AttachNetworkInterface", ATTACHED),
        "ModifyNetworkInterfaceAttribute" => done("ModifyNetworkInterfaceAttribute"),
        _ => unexpected(),
    }))
    .await;
    let eni = provider(&endpoint)
        .await
        .create_interface(&create_request(1))
        .await
        .expect("created");
    assert_eq!(eni.index, 1);
    assert_eq!(eni.id, "eni-0new");
    assert_eq!(eni.instance_id.as_deref(), Some("i-1"));
    assert_eq!(ipam_tests::texts(&eni.addresses), ["10.0.1.6"]);
    assert_eq!(eni.primary_ip.to_string(), "10.0.1.5");
    assert_eq!(
        actions(&calls),
        [
            "DescribeNetworkInterfaces",
            "CreateNetworkInterface",
            "AttachNetworkInterface",
            "ModifyNetworkInterfaceAttribute"
        ]
    );
    let calls = calls.lock().unwrap();
    assert_eq!(calls[2].param("DeviceIndex"), Some("1"));
    assert_eq!(calls[2].param("NetworkCardIndex"), Some("0"));
    assert_eq!(
        calls[3].param("Attachment.DeleteOnTermination"),
        Some("true")
    );
    assert_eq!(
        calls[3].param("Attachment.AttachmentId"),
        Some("eni-attach-1")
    );
    assert_eq!(calls[1].param("SecondaryPrivateIpAddressCount"), Some("1"));
    assert_eq!(calls[1].param("Ipv4PrefixCount"), None);
    assert_eq!(
        calls[1].param("TagSpecification.1.ResourceType"),
        Some("network-interface")
    );
}

/// EC2's answer to AssignPrivateIpAddresses (API reference: the interface id,
/// assignedPrivateIpAddressesSet and assignedIpv4PrefixSet, each listing
/// only what this call assigned).
fn assigned(addresses: &[&str], prefixes: &[&str]) -> (StatusCode, String) {
    let addresses: String = addresses
        .iter()
        .map(|a| format!("<item><privateIpAddress>{a}</privateIpAddress></item>"))
        .collect();
    let prefixes: String = prefixes
        .iter()
        .map(|p| format!("<item><ipv4Prefix>{p}</ipv4Prefix></item>"))
        .collect();
    ok(
        "AssignPrivateIpAddresses",
        &format!(
            "<networkInterfaceId>eni-1</networkInterfaceId>\
             <assignedPrivateIpAddressesSet>{addresses}</assignedPrivateIpAddressesSet>\
             <assignedIpv4PrefixSet>{prefixes}</assignedIpv4PrefixSet>"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assigned_addresses_are_those_ec2_assigned() {
    let (endpoint, calls) = ec2_stub(Arc::new(|call, _| match call.action.as_str() {
        "AssignPrivateIpAddresses" => assigned(&["10.0.1.20", "10.0.1.21"], &[]),
        _ => unexpected(),
    }))
    .await;
    let got = provider(&endpoint)
        .await
        .assign_ips("eni-1", IpRequest::Addresses(2))
        .await
        .expect("assigned");
    assert_eq!(
        ipam_tests::texts(&got.addresses),
        ["10.0.1.20", "10.0.1.21"]
    );
    assert!(got.prefixes.is_empty(), "{got:?}");
    let calls = calls.lock().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].param("NetworkInterfaceId"), Some("eni-1"));
    assert_eq!(calls[0].param("SecondaryPrivateIpAddressCount"), Some("2"));
    assert_eq!(calls[0].param("Ipv4PrefixCount"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assigned_prefixes_are_the_28s_ec2_delegated() {
    let (endpoint, calls) = ec2_stub(Arc::new(|call, _| match call.action.as_str() {
        "AssignPrivateIpAddresses" => assigned(&[], &["10.0.1.32/28", "10.0.1.48/28"]),
        _ => unexpected(),
    }))
    .await;
    let got = provider(&endpoint)
        .await
        .assign_ips("eni-1", IpRequest::Prefixes(2))
        .await
        .expect("assigned");
    assert_eq!(
        ipam_tests::texts(&got.prefixes),
        ["10.0.1.32/28", "10.0.1.48/28"]
    );
    assert!(got.addresses.is_empty(), "{got:?}");
    let calls = calls.lock().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].param("NetworkInterfaceId"), Some("eni-1"));
    assert_eq!(calls[0].param("Ipv4PrefixCount"), Some("2"));
    assert_eq!(calls[0].param("SecondaryPrivateIpAddressCount"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interface_created_with_prefixes_asks_for_and_returns_them() {
    let created = CREATED
        .replace(
            "<item><privateIpAddress>10.0.1.6</privateIpAddress><primary>false</primary></item>",
            "",
        )
        .replace(
            "<tagSet>",
            "<ipv4PrefixSet><item><ipv4Prefix>10.0.1.64/28</ipv4Prefix></item></ipv4PrefixSet><tagSet>",
        );
    let (endpoint, calls) = ec2_stub(Arc::new(move |call, _| match call.action.as_str() {
        "DescribeNetworkInterfaces" => index_free(),
        "CreateNetworkInterface" => ok("CreateNetworkInterface", &created),
        "AttachNetworkInterface" => ok("AttachNetworkInterface", ATTACHED),
        "ModifyNetworkInterfaceAttribute" => done("ModifyNetworkInterfaceAttribute"),
        _ => unexpected(),
    }))
    .await;
    let request = CreateInterfaceRequest {
        use_prefixes: true,
        ..create_request(1)
    };
    let eni = provider(&endpoint)
        .await
        .create_interface(&request)
        .await
        .expect("created");
    assert_eq!(ipam_tests::texts(&eni.prefixes), ["10.0.1.64/28"]);
    let calls = calls.lock().unwrap();
    assert_eq!(calls[1].action, "CreateNetworkInterface");
    assert_eq!(calls[1].param("Ipv4PrefixCount"), Some("1"));
    assert_eq!(calls[1].param("SecondaryPrivateIpAddressCount"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attach_deletes_the_created_interface() {
    let (endpoint, calls) = ec2_stub(Arc::new(|call, _| match call.action.as_str() {
        "DescribeNetworkInterfaces" => index_free(),
        "CreateNetworkInterface" => ok("CreateNetworkInterface", CREATED),
        "AttachNetworkInterface" => (
            StatusCode::BAD_REQUEST,
            ec2_error(
                "AttachmentLimitExceeded",
                "Interface count 4 exceeds the limit for m5.large",
            ),
        ),
        "DeleteNetworkInterface" => done("DeleteNetworkInterface"),
        _ => unexpected(),
    }))
    .await;
    let error = provider(&endpoint)
        .await
        .create_interface(&create_request(3))
        .await
        .expect_err("attach fails");
    assert_eq!(error.response_code(), "interface-limit", "{error}");
    assert_eq!(
        actions(&calls),
        [
            "DescribeNetworkInterfaces",
            "CreateNetworkInterface",
            "AttachNetworkInterface",
            "DeleteNetworkInterface"
        ]
    );
    assert_eq!(
        calls.lock().unwrap()[3].param("NetworkInterfaceId"),
        Some("eni-0new")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_modify_detaches_and_deletes_the_created_interface() {
    let (endpoint, calls) = ec2_stub(Arc::new(|call, _| match call.action.as_str() {
        "DescribeNetworkInterfaces" => index_free(),
        "CreateNetworkInterface" => ok("CreateNetworkInterface", CREATED),
        "AttachNetworkInterface" => ok("AttachNetworkInterface", ATTACHED),
        "ModifyNetworkInterfaceAttribute" => (
            StatusCode::FORBIDDEN,
            ec2_error(
                "UnauthorizedOperation",
                "You are not authorized to perform this operation.",
            ),
        ),
        "DetachNetworkInterface" => done("DetachNetworkInterface"),
        "DeleteNetworkInterface" => done("DeleteNetworkInterface"),
        _ => unexpected(),
    }))
    .await;
    let error = provider(&endpoint)
        .await
        .create_interface(&create_request(1))
        .await
        .expect_err("modify fails");
    assert_eq!(error.response_code(), "unauthorized", "{error}");
    assert_eq!(
        actions(&calls),
        [
            "DescribeNetworkInterfaces",
            "CreateNetworkInterface",
            "AttachNetworkInterface",
            "ModifyNetworkInterfaceAttribute",
            "DetachNetworkInterface",
            "DeleteNetworkInterface"
        ]
    );
    let calls = calls.lock().unwrap();
    assert_eq!(calls[4].param("AttachmentId"), Some("eni-attach-1"));
    assert_eq!(calls[5].param("NetworkInterfaceId"), Some("eni-0new"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_short_is_an_error_not_an_empty_success() {
    // EC2's answer cut off mid-element, as a dropped connection leaves it:
    // the SDK's reader takes it as an answer listing nothing.
    let (endpoint, _) = ec2_stub(Arc::new(|_, _| {
        (
            StatusCode::OK,
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<AssignPrivateIpAddressesResponse \
                 xmlns=\"{XMLNS}\"><assignedPrivateIpAddressesSet><item><privateIp"
            ),
        )
    }))
    .await;
    let error = provider(&endpoint)
        .await
        .assign_ips("eni-1", IpRequest::Addresses(1))
        .await
        .expect_err("nothing was assigned");
    assert_eq!(error.response_code(), "other", "{error}");
    assert!(
        error
            .to_string()
            .contains("AssignPrivateIpAddresses answered with 0 of the 1 addresses asked"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_refused_with_what_is_wrong() {
    let cases = [
        (serde_json::json!({}), "region"),
        (serde_json::json!({"region": "US East"}), "region"),
        (
            serde_json::json!({"region": "us-east-1", "endpoint": "ec2.local"}),
            "endpoint",
        ),
        (
            serde_json::json!({"region": "us-east-1", "page-size": 2}),
            "page-size",
        ),
        (
            serde_json::json!({"region": "us-east-1", "subnet-tag": {"a": "b"}}),
            "subnet-tag",
        ),
    ];
    common::assert_settings_refused("aws", &cases).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_credentials_every_call_is_unauthorized_before_any_request() {
    let (endpoint, calls) = ec2_stub(Arc::new(|_, _| ok("DescribeVpcs", "<vpcSet/>"))).await;
    let settings = serde_json::json!({"region": "us-east-1", "endpoint": endpoint});
    let mut config = common::config(&settings.to_string());
    config.limits.timeout = std::time::Duration::from_secs(30);
    config.egress = vec![endpoint.clone()];
    let aws = common::runtime()
        .load(&common::component("aws"), config)
        .await
        .expect("loads");
    let error = aws.get_vpcs().await.expect_err("no credentials");
    assert_eq!(error.response_code(), "unauthorized", "{error}");
    assert!(calls.lock().unwrap().is_empty(), "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_overlay_settings_configure_the_component() {
    // The chart's aws example renders the same ConfigMap (tests/deploy.rs).
    let yaml = include_str!("../../deploy/kustomize/overlays/aws/settings.yaml");
    let settings = common::json(yaml);
    common::aws(settings.clone(), "https://ec2.us-east-1.amazonaws.com").await;
    assert_eq!(
        ipam_clouds::aws::egress::default_egress(&settings).unwrap(),
        ["https://ec2.us-east-1.amazonaws.com"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unassigning_addresses_already_gone_unassigns_the_rest() {
    let described = "<networkInterfaceSet><item><networkInterfaceId>eni-1</networkInterfaceId>\
        <subnetId>subnet-1</subnetId><vpcId>vpc-1</vpcId><macAddress>02:00:00:00:00:01</macAddress>\
        <status>in-use</status><privateIpAddress>10.0.1.5</privateIpAddress>\
        <attachment><attachmentId>eni-attach-1</attachmentId><instanceId>i-1</instanceId>\
        <deviceIndex>1</deviceIndex><networkCardIndex>0</networkCardIndex><status>attached</status></attachment>\
        <privateIpAddressesSet>\
        <item><privateIpAddress>10.0.1.5</privateIpAddress><primary>true</primary></item>\
        <item><privateIpAddress>10.0.1.7</privateIpAddress><primary>false</primary></item>\
        </privateIpAddressesSet></item></networkInterfaceSet>";
    let (endpoint, calls) = ec2_stub(Arc::new(move |call, before| match call.action.as_str() {
        "UnassignPrivateIpAddresses" if before == 0 => (
            StatusCode::BAD_REQUEST,
            ec2_error(
                "InvalidParameterValue",
                "Some of the specified addresses are not assigned to interface eni-1",
            ),
        ),
        "UnassignPrivateIpAddresses" => done("UnassignPrivateIpAddresses"),
        "DescribeNetworkInterfaces" => ok("DescribeNetworkInterfaces", described),
        _ => unexpected(),
    }))
    .await;
    provider(&endpoint)
        .await
        .unassign_ips(
            "eni-1",
            &["10.0.1.6".parse().unwrap(), "10.0.1.7".parse().unwrap()],
            &[],
        )
        .await
        .expect("what is still there is unassigned");
    assert_eq!(
        actions(&calls),
        [
            "UnassignPrivateIpAddresses",
            "DescribeNetworkInterfaces",
            "UnassignPrivateIpAddresses"
        ]
    );
    let calls = calls.lock().unwrap();
    assert_eq!(calls[0].param("PrivateIpAddress.1"), Some("10.0.1.6"));
    assert_eq!(calls[0].param("PrivateIpAddress.2"), Some("10.0.1.7"));
    assert_eq!(calls[2].param("PrivateIpAddress.1"), Some("10.0.1.7"));
    assert_eq!(calls[2].param("PrivateIpAddress.2"), None);
}
