//! Instance facts read over HTTP from local stubs of the metadata services,
//! each written from its cloud's reference documentation:
//! - EC2 IMDSv2: a PUT to `/latest/api/token` with a TTL header yields a
//!   token; a GET under `/latest/meta-data/` without that token is refused
//!   with 401; an unknown path is 404.
//! - Azure IMDS: `GET /metadata/instance?api-version=…` needs `Metadata:
//!   true` (400 without it) and is refused when it carries
//!   `X-Forwarded-For`; an unsupported api-version is 400.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use ipam_clouds::aws::imds::{Imds, ImdsError};
use ipam_clouds::aws::instance_facts::{self, AwsInstanceFactsError};
use ipam_clouds::azure::{AzureImds, AzureImdsError, AzureInstanceFactsError};
use ipam_clouds::{InstanceFacts, MacAddress, TrustRoots};
use support::{Handler, StubRequest};

const TOKEN: &str = "AQAEAFTWkqjZ0A1y4u0Xd3vJmB8tL6KHq2rs5hnO-stub==";
const MAC: &str = "0a:1b:2c:3d:4e:5f";

/// EC2's metadata for one instance, by path under `/latest/meta-data/`.
fn ec2_metadata() -> BTreeMap<String, String> {
    let interface = format!("network/interfaces/macs/{MAC}");
    [
        ("instance-id", "i-0123456789abcdef0"),
        ("instance-type", "m5.large"),
        ("placement/availability-zone", "eu-west-1a"),
        ("mac", MAC),
        (&format!("{interface}/vpc-id"), "vpc-0a1b2c3d4e5f60718"),
        (
            &format!("{interface}/subnet-id"),
            "subnet-0123456789abcdef0",
        ),
        (
            &format!("{interface}/interface-id"),
            "eni-0f1e2d3c4b5a69788",
        ),
        (&format!("{interface}/device-number"), "0"),
    ]
    .into_iter()
    .map(|(path, value)| (path.to_string(), value.to_string()))
    .collect()
}

/// IMDSv2 as AWS documents it, serving `metadata`.
fn imdsv2(metadata: BTreeMap<String, String>) -> Arc<Handler> {
    Arc::new(move |request: &StubRequest| {
        if request.header("x-forwarded-for").is_some() {
            return (403, "Forbidden".into());
        }
        match (request.method.as_str(), request.target.as_str()) {
            ("PUT", "/latest/api/token") => {
                let ttl = request
                    .header("x-aws-ec2-metadata-token-ttl-seconds")
                    .and_then(|ttl| ttl.parse::<u32>().ok());
                match ttl {
                    Some(1..=21600) => (200, TOKEN.into()),
                    _ => (400, "Bad Request".into()),
                }
            }
            ("GET", target) => {
                if request.header("x-aws-ec2-metadata-token") != Some(TOKEN) {
                    return (401, "Unauthorized".into());
                }
                match target
                    .strip_prefix("/latest/meta-data/")
                    .and_then(|path| metadata.get(path))
                {
                    Some(value) => (200, value.clone()),
                    None => (404, "Not Found".into()),
                }
            }
            _ => (405, "Method Not Allowed".into()),
        }
    })
}

#[tokio::test]
async fn aws_facts_are_read_over_one_imdsv2_session() {
    let stub = support::serve(imdsv2(ec2_metadata())).await;
    let facts = instance_facts::read(&Imds::new(&stub.url, TrustRoots::webpki()))
        .await
        .unwrap();
    assert_eq!(facts.instance_id, "i-0123456789abcdef0");
    assert_eq!(facts.instance_type, "m5.large");
    assert_eq!(facts.availability_zone, "eu-west-1a");
    assert_eq!(facts.primary_mac.to_string(), MAC);
    assert_eq!(facts.vpc_id, "vpc-0a1b2c3d4e5f60718");
    assert_eq!(facts.subnet_id, "subnet-0123456789abcdef0");
    assert_eq!(facts.interface_id, "eni-0f1e2d3c4b5a69788");
    assert_eq!(facts.device_number, 0);

    let requests = stub.requests();
    let methods: Vec<&str> = requests.iter().map(|r| r.method.as_str()).collect();
    assert_eq!(
        methods,
        ["PUT", "GET", "GET", "GET", "GET", "GET", "GET", "GET", "GET"],
        "one token, then every read with it"
    );

    let neutral = InstanceFacts::from(facts);
    assert_eq!(neutral.instance_id, "i-0123456789abcdef0");
    assert_eq!(neutral.zone.as_deref(), Some("eu-west-1a"));
    assert_eq!(neutral.vpc_id.as_deref(), Some("vpc-0a1b2c3d4e5f60718"));
    assert_eq!(
        neutral.node_subnet_id.as_deref(),
        Some("subnet-0123456789abcdef0")
    );
    assert!(neutral.azure_interfaces.is_empty());
}

#[tokio::test]
async fn the_imdsv2_stub_refuses_a_read_without_the_token() {
    // What makes the test above able to fail: IMDSv2 answers 401 to a GET
    // without a session token (as when the hop limit drops the PUT).
    let stub = support::serve(imdsv2(ec2_metadata())).await;
    let answer = ipam_http_client::request(
        &TrustRoots::webpki(),
        Method::GET,
        &format!("{}/latest/meta-data/instance-id", stub.url),
        &[],
        Bytes::new(),
    )
    .await
    .unwrap();
    assert_eq!(answer.status.as_u16(), 401);
}

#[tokio::test]
async fn a_refused_token_is_an_imds_error() {
    let stub = support::serve(Arc::new(|_: &StubRequest| (403, "Forbidden".into()))).await;
    assert_eq!(
        instance_facts::read(&Imds::new(&stub.url, TrustRoots::webpki())).await,
        Err(AwsInstanceFactsError::Imds(ImdsError::Status {
            what: "token".into(),
            status: 403
        }))
    );
}

#[tokio::test]
async fn a_missing_path_names_it() {
    let mut metadata = ec2_metadata();
    metadata.remove(&format!("network/interfaces/macs/{MAC}/subnet-id"));
    let stub = support::serve(imdsv2(metadata)).await;
    assert_eq!(
        instance_facts::read(&Imds::new(&stub.url, TrustRoots::webpki())).await,
        Err(AwsInstanceFactsError::Imds(ImdsError::Status {
            what: format!("network/interfaces/macs/{MAC}/subnet-id"),
            status: 404
        }))
    );
}

#[tokio::test]
async fn bad_aws_answers_name_their_field() {
    let interface = format!("network/interfaces/macs/{MAC}");
    let cases = [
        ("instance-id".to_string(), "i-NOPE", "instance-id"),
        (
            "placement/availability-zone".into(),
            "",
            "availability-zone",
        ),
        (format!("{interface}/vpc-id"), "vpc-zzzzzzzz", "vpc-id"),
        (format!("{interface}/subnet-id"), "sg-12345678", "subnet-id"),
        // A MAC that is no MAC is refused before it goes into a path.
        ("mac".into(), "../../iam", "mac"),
    ];
    for (path, value, field) in cases {
        let mut metadata = ec2_metadata();
        metadata.insert(path.clone(), value.to_string());
        let stub = support::serve(imdsv2(metadata)).await;
        match instance_facts::read(&Imds::new(&stub.url, TrustRoots::webpki())).await {
            Err(AwsInstanceFactsError::Invalid { field: named, .. }) => {
                assert_eq!(named, field, "{path}")
            }
            other => panic!("{path}={value:?} gave {other:?}"),
        }
    }
}

const SCALE_SET_VM: &str = include_str!("fixtures/azure_scale_set_vm.json");
const STANDALONE_VM: &str = include_str!("fixtures/azure_standalone_vm.json");

/// Azure IMDS as Microsoft documents it, answering `document`.
fn azure_imds(document: &'static str) -> Arc<Handler> {
    Arc::new(move |request: &StubRequest| {
        if request.header("x-forwarded-for").is_some() {
            return (
                400,
                r#"{"error": "Bad request. X-Forwarded-For header is not allowed"}"#.into(),
            );
        }
        if request.header("metadata") != Some("true") {
            return (
                400,
                r#"{"error": "Bad request. Required metadata header not specified"}"#.into(),
            );
        }
        match (request.method.as_str(), request.target.as_str()) {
            ("GET", "/metadata/instance?api-version=2021-02-01") => (200, document.into()),
            ("GET", target) if target.starts_with("/metadata/instance") => (
                400,
                r#"{"error": "Bad request. api-version is invalid or was not specified in the request."}"#.into(),
            ),
            _ => (404, r#"{"error": "Not found"}"#.into()),
        }
    })
}

#[tokio::test]
async fn the_azure_stub_wants_the_metadata_header() {
    // What makes the Azure tests able to fail: without `Metadata: true`
    // IMDS answers 400.
    let stub = support::serve(azure_imds(SCALE_SET_VM)).await;
    let url = format!("{}/metadata/instance?api-version=2021-02-01", stub.url);
    let bare =
        ipam_http_client::request(&TrustRoots::webpki(), Method::GET, &url, &[], Bytes::new())
            .await
            .unwrap();
    assert_eq!(bare.status.as_u16(), 400);
    let forwarded = ipam_http_client::request(
        &TrustRoots::webpki(),
        Method::GET,
        &url,
        &[
            ("Metadata", "true".into()),
            ("X-Forwarded-For", "10.0.0.1".into()),
        ],
        Bytes::new(),
    )
    .await
    .unwrap();
    assert_eq!(forwarded.status.as_u16(), 400);
}

#[tokio::test]
async fn a_scale_set_vm_s_facts_are_read() {
    let stub = support::serve(azure_imds(SCALE_SET_VM)).await;
    let facts = AzureImds::new(&stub.url, TrustRoots::webpki())
        .instance_facts()
        .await
        .unwrap();
    assert_eq!(
        facts.instance_id,
        "/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourcegroups/mc_rg-aks_aks-prod_westeurope/providers/microsoft.compute/virtualmachinescalesets/aks-nodepool1-10706209-vmss/virtualmachines/3"
    );
    assert_eq!(facts.vm_size, "Standard_D4s_v3");
    assert_eq!(facts.zone.as_deref(), Some("2"));
    assert_eq!(
        facts.vm_scale_set_name.as_deref(),
        Some("aks-nodepool1-10706209-vmss")
    );
    let requests = stub.requests();
    assert_eq!(requests.len(), 1, "one request");
    assert_eq!(requests[0].header("metadata"), Some("true"));

    let neutral = InstanceFacts::from(facts);
    assert_eq!(neutral.instance_type, "Standard_D4s_v3");
    assert_eq!(neutral.vpc_id, None);
    assert_eq!(neutral.primary_mac.to_string(), "00:0d:3a:1b:2c:3d");
    let macs: Vec<MacAddress> = neutral.azure_interfaces.iter().map(|i| i.mac).collect();
    assert_eq!(
        macs,
        [
            MacAddress::new([0x00, 0x0d, 0x3a, 0x1b, 0x2c, 0x3d]),
            MacAddress::new([0x00, 0x0d, 0x3a, 0xf0, 0xe1, 0xd2])
        ]
    );
}

#[tokio::test]
async fn a_standalone_vm_s_facts_are_read() {
    let stub = support::serve(azure_imds(STANDALONE_VM)).await;
    let facts = AzureImds::new(&format!("{}/", stub.url), TrustRoots::webpki())
        .instance_facts()
        .await
        .unwrap();
    assert_eq!(
        facts.instance_id,
        "/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourcegroups/prod-rg/providers/microsoft.compute/virtualmachines/worker-1"
    );
    assert_eq!(facts.zone, None);
    assert_eq!(facts.primary_interface.mac.to_string(), "60:45:bd:8a:0b:1c");
    assert_eq!(
        facts.primary_interface.subnets,
        vec!["10.1.0.0/24".parse::<ipnet::Ipv4Net>().unwrap()]
    );
}

#[tokio::test]
async fn an_error_status_is_typed_with_its_body() {
    let stub = support::serve(Arc::new(|_: &StubRequest| {
        (
            400,
            r#"{"error": "Bad request. api-version is invalid or was not specified in the request."}"#
                .into(),
        )
    }))
    .await;
    match AzureImds::new(&stub.url, TrustRoots::webpki())
        .instance_facts()
        .await
    {
        Err(AzureImdsError::Status { status, body, .. }) => {
            assert_eq!(status, 400);
            assert!(body.contains("api-version is invalid"), "{body}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_answer_that_is_not_json_is_typed() {
    let stub = support::serve(Arc::new(|_: &StubRequest| {
        (200, "<html>captive portal</html>".into())
    }))
    .await;
    assert!(matches!(
        AzureImds::new(&stub.url, TrustRoots::webpki())
            .instance_facts()
            .await,
        Err(AzureImdsError::Facts(AzureInstanceFactsError::Document(_)))
    ));
}

#[tokio::test]
async fn a_silent_endpoint_times_out() {
    let url = support::silent().await;
    let imds = AzureImds::new(&url, TrustRoots::webpki()).with_timeout(Duration::from_millis(200));
    match imds.instance_facts().await {
        Err(AzureImdsError::Timeout { timeout, .. }) => {
            assert_eq!(timeout, Duration::from_millis(200))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_unreachable_endpoint_is_a_request_error() {
    let url = support::closed().await;
    assert!(matches!(
        AzureImds::new(&url, TrustRoots::webpki())
            .instance_facts()
            .await,
        Err(AzureImdsError::Request { .. })
    ));
}
