//! AWS credentials resolved by the host: web identity against a local STS
//! stub, the instance profile against a local IMDSv2 stub, static keys from
//! the environment; each reaches a guest through the credentials import (and
//! signs the AWS component's EC2 requests), and temporary ones are refreshed
//! before they expire.

use ipam_tests as common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use ipam_cloud::credentials::CredentialSource;
use ipam_cloud::CloudApi;
use ipam_clouds::aws::credentials::{AwsCredentialConfig, ACCESS_KEY_ID, SESSION_TOKEN};
use ipam_clouds::TrustRoots;
use tokio::sync::mpsc;

type Handler =
    dyn Fn(&Method, &str, &http::HeaderMap, &str, usize) -> (StatusCode, String) + Send + Sync;

/// A stub server on 127.0.0.1 answering with `handler` (given the request
/// number); its base URL and request counter.
async fn stub(handler: Arc<Handler>) -> (String, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let counting = count.clone();
    let address = common::stub_server(move |request| {
        let n = counting.fetch_add(1, Ordering::SeqCst);
        let (status, text) = handler(
            &request.method,
            &request.path,
            &request.headers,
            &String::from_utf8_lossy(&request.body),
            n,
        );
        Response::builder()
            .status(status)
            .body(Full::new(Bytes::from(text)))
            .expect("stub response")
    })
    .await;
    (format!("http://{address}"), count)
}

fn rfc3339_in(seconds: i64) -> String {
    k8s_openapi::jiff::Timestamp::now()
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds))
        .unwrap()
        .to_string()
}

fn config(env: &[(&str, &str)], sts: Option<String>, imds: &str) -> AwsCredentialConfig {
    AwsCredentialConfig {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        sts_endpoint: sts,
        imds_endpoint: imds.into(),
        trust: TrustRoots::webpki(),
    }
}

/// The access key id the AWS component signed an EC2 request with, as a stub
/// EC2 endpoint saw it in the SigV4 Authorization header.
async fn signed_by_aws_guest(source: Arc<dyn CredentialSource>) -> String {
    let seen = Arc::new(std::sync::Mutex::new(String::new()));
    let record = seen.clone();
    let handler: Arc<Handler> = Arc::new(move |_, _, headers, _, _| {
        if let Some(authorization) = headers.get("authorization") {
            *record.lock().unwrap() = authorization.to_str().unwrap_or_default().to_string();
        }
        (
            StatusCode::OK,
            "<DescribeVpcsResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
             <requestId>r-1</requestId><vpcSet/></DescribeVpcsResponse>"
                .into(),
        )
    });
    let (ec2, _) = stub(handler).await;
    let settings =
        serde_json::json!({"region": "us-east-1", "endpoint": ec2, "max-attempts": 1}).to_string();
    let mut config = common::config(&settings);
    config.limits.timeout = Duration::from_secs(30);
    config.egress = vec![ec2];
    config.credentials = source;
    let provider = common::runtime()
        .load(&common::component("aws"), config)
        .await
        .expect("the aws component loads");
    provider
        .get_vpcs()
        .await
        .expect("DescribeVpcs through the stub");
    let authorization = seen.lock().unwrap().clone();
    // AWS4-HMAC-SHA256 Credential=AKID/20261121/us-east-1/ec2/aws4_request, ...
    assert!(
        authorization.contains("/us-east-1/ec2/aws4_request"),
        "{authorization}"
    );
    authorization
        .split("Credential=")
        .nth(1)
        .and_then(|c| c.split('/').next())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn web_identity_is_exchanged_with_sts_and_reaches_the_guest() {
    let expiration = rfc3339_in(3600);
    let handler: Arc<Handler> = Arc::new(move |method, path, headers, body, _| {
        let form: BTreeMap<String, String> = body
            .split('&')
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let ok = method == Method::POST
            && path == "/"
            && headers
                .get("content-type")
                .is_some_and(|c| c == "application/x-www-form-urlencoded")
            && form.get("Action").map(String::as_str) == Some("AssumeRoleWithWebIdentity")
            && form.get("RoleArn").map(String::as_str)
                == Some("arn%3Aaws%3Aiam%3A%3A111122223333%3Arole%2Fipam")
            && form.get("WebIdentityToken").map(String::as_str) == Some("eyJ.token.sig");
        if !ok {
            return (
                StatusCode::BAD_REQUEST,
                "<ErrorResponse><Error><Code>InvalidParameterValue</Code></Error></ErrorResponse>"
                    .into(),
            );
        }
        (
            StatusCode::OK,
            format!(
                "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
             <AccessKeyId>ASIAWEBIDENTITY</AccessKeyId><SecretAccessKey>secret</SecretAccessKey>\
             <SessionToken>session</SessionToken><Expiration>{expiration}</Expiration>\
             </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
            ),
        )
    });
    let (sts, _) = stub(handler).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "eyJ.token.sig\n").unwrap();
    let token = token.display().to_string();
    let source = ipam_clouds::aws::credentials::start(config(
        &[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", &token),
            ("AWS_ROLE_ARN", "arn:aws:iam::111122223333:role/ipam"),
        ],
        Some(sts),
        "http://127.0.0.1:9",
    ))
    .await
    .expect("STS answered");
    let now = source.current().unwrap();
    assert_eq!(now.values[SESSION_TOKEN], "session");
    assert!(now.expires_at.is_some());
    assert_eq!(
        common::credential_seen_by_guest(source.clone(), ACCESS_KEY_ID).await,
        "ASIAWEBIDENTITY"
    );
    assert_eq!(signed_by_aws_guest(source).await, "ASIAWEBIDENTITY");
}

/// Long enough for a fetch over 127.0.0.1 on the slowest machine; only a
/// failing test waits it out.
const AT_MOST: Duration = Duration::from_secs(60);

/// An IMDSv2 stub. Its credentials documents are `ASIAINSTANCE<n>`, the
/// first two expiring in 300 s (the refresh runs that far ahead, so each is
/// refreshed at once); from the third on it answers 500. Each request for a
/// document is told on `asked` with its number.
fn imds_handler(asked: mpsc::UnboundedSender<usize>) -> Arc<Handler> {
    let documents = Arc::new(AtomicUsize::new(0));
    Arc::new(move |method, path, headers, _, _| {
        let token_ok = headers
            .get("x-aws-ec2-metadata-token")
            .is_some_and(|t| t == "imds-token");
        match (method.as_str(), path) {
            ("PUT", "/latest/api/token")
                if headers.contains_key("x-aws-ec2-metadata-token-ttl-seconds") =>
            {
                (StatusCode::OK, "imds-token".into())
            }
            // IMDSv1 (no token) is refused, as on a hardened instance.
            ("GET", _) if !token_ok => (StatusCode::UNAUTHORIZED, String::new()),
            ("GET", "/latest/meta-data/iam/security-credentials/") => {
                (StatusCode::OK, "node-role\n".into())
            }
            ("GET", "/latest/meta-data/iam/security-credentials/node-role") => {
                let n = documents.fetch_add(1, Ordering::SeqCst);
                let _ = asked.send(n);
                if n >= 2 {
                    return (StatusCode::INTERNAL_SERVER_ERROR, String::new());
                }
                (
                    StatusCode::OK,
                    serde_json::json!({"Code": "Success", "AccessKeyId": format!("ASIAINSTANCE{n}"),
                        "SecretAccessKey": "secret", "Token": "token",
                        "Expiration": rfc3339_in(300)})
                    .to_string(),
                )
            }
            _ => (StatusCode::NOT_FOUND, String::new()),
        }
    })
}

/// The next request number told on `asked`, failing after [`AT_MOST`].
async fn next_asked<T>(asked: &mut mpsc::UnboundedReceiver<T>, what: &str) -> T {
    tokio::time::timeout(AT_MOST, asked.recv())
        .await
        .unwrap_or_else(|_| panic!("no {what} within {AT_MOST:?}"))
        .expect("the stub is running")
}

#[tokio::test]
async fn the_instance_profile_comes_from_imdsv2_and_is_refreshed_before_expiry() {
    let (asked_tx, mut asked) = mpsc::unbounded_channel();
    let (imds, requests) = stub(imds_handler(asked_tx)).await;
    let source = ipam_clouds::aws::credentials::start(config(&[], None, &imds))
        .await
        .expect("IMDS answered");
    assert_eq!(next_asked(&mut asked, "first fetch").await, 0);
    // The refresher fetches, stores, then waits for the next refresh: once
    // document 2 is asked for, document 1 (fetched as 0 came within 300 s
    // of expiring) is stored; 2 is refused and the retry is 30 s away, so
    // document 1 stays while the guests are asked.
    assert_eq!(next_asked(&mut asked, "refresh").await, 1);
    assert_eq!(next_asked(&mut asked, "second refresh").await, 2);
    assert_eq!(
        requests.load(Ordering::SeqCst),
        9,
        "a token, the role and the document on each of three fetches"
    );
    let refreshed = source.current().unwrap().values[ACCESS_KEY_ID].clone();
    assert_eq!(
        refreshed, "ASIAINSTANCE1",
        "new credentials before the old ones expired"
    );
    assert_eq!(
        common::credential_seen_by_guest(source.clone(), ACCESS_KEY_ID).await,
        refreshed
    );
    assert_eq!(signed_by_aws_guest(source).await, refreshed);
}

#[tokio::test]
async fn static_keys_from_the_environment_and_a_clear_error_without_any_source() {
    let source = ipam_clouds::aws::credentials::start(config(
        &[
            ("AWS_ACCESS_KEY_ID", "AKIASTATIC"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ],
        None,
        "http://127.0.0.1:9",
    ))
    .await
    .unwrap();
    assert_eq!(source.current().unwrap().expires_at, None);
    assert_eq!(
        common::credential_seen_by_guest(source.clone(), ACCESS_KEY_ID).await,
        "AKIASTATIC"
    );
    assert_eq!(signed_by_aws_guest(source).await, "AKIASTATIC");
    // Nothing configured and no IMDS (a closed port on 127.0.0.1).
    let error = ipam_clouds::aws::credentials::start(config(&[], None, "http://127.0.0.1:9"))
        .await
        .err()
        .expect("no source")
        .to_string();
    assert!(error.contains("AWS_WEB_IDENTITY_TOKEN_FILE"), "{error}");
}

#[tokio::test]
async fn eks_pod_identity_credentials_come_from_the_agent_with_the_token() {
    let handler: Arc<Handler> = Arc::new(|method, path, headers, _, _| {
        let authorized = headers
            .get("authorization")
            .is_some_and(|t| t == "pod-identity-token");
        match (method.as_str(), path) {
            ("GET", "/v1/credentials") if authorized => (
                StatusCode::OK,
                serde_json::json!({"AccessKeyId": "ASIAPODIDENTITY", "SecretAccessKey": "secret",
                    "Token": "token", "AccountId": "111122223333",
                    "Expiration": rfc3339_in(3600)})
                .to_string(),
            ),
            _ => (StatusCode::FORBIDDEN, String::new()),
        }
    });
    let (agent, _) = stub(handler).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("eks-pod-identity-token");
    std::fs::write(&token, "pod-identity-token\n").unwrap();
    let token = token.display().to_string();
    let uri = format!("{agent}/v1/credentials");
    let source = ipam_clouds::aws::credentials::start(config(
        &[
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &uri),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", &token),
        ],
        None,
        "http://127.0.0.1:9",
    ))
    .await
    .expect("the agent answered");
    assert!(source.current().unwrap().expires_at.is_some());
    assert_eq!(signed_by_aws_guest(source).await, "ASIAPODIDENTITY");

    // A wrong token is refused by the agent, and said so.
    std::fs::write(dir.path().join("eks-pod-identity-token"), "stale").unwrap();
    let error = ipam_clouds::aws::credentials::start(config(
        &[
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &uri),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", &token),
        ],
        None,
        "http://127.0.0.1:9",
    ))
    .await
    .err()
    .expect("refused")
    .to_string();
    assert!(
        error.contains("container credentials") && error.contains("403"),
        "{error}"
    );
}

#[tokio::test]
async fn the_pod_identity_token_file_is_read_again_on_each_refresh() {
    let dir = tempfile::tempdir().unwrap();
    let token_path = dir.path().join("eks-pod-identity-token");
    std::fs::write(&token_path, "first-token\n").unwrap();
    let (asked_tx, mut asked) = mpsc::unbounded_channel::<String>();
    let valid = Arc::new(std::sync::Mutex::new("first-token".to_string()));
    let rotate = token_path.clone();
    let handler: Arc<Handler> = Arc::new(move |method, path, headers, _, n| {
        let token = headers
            .get("authorization")
            .and_then(|t| t.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let _ = asked_tx.send(token.clone());
        let mut valid = valid.lock().unwrap();
        if (method.as_str(), path) != ("GET", "/v1/credentials") || token != *valid {
            return (StatusCode::FORBIDDEN, String::new());
        }
        // The first answer expires within the 300 s the refresh runs ahead,
        // so a refresh follows at once; meanwhile kubelet rotates the token
        // and the agent accepts only the new one.
        let expires_in = if n == 0 {
            *valid = "rotated-token".into();
            std::fs::write(&rotate, "rotated-token\n").unwrap();
            300
        } else {
            3600
        };
        (
            StatusCode::OK,
            serde_json::json!({"AccessKeyId": format!("ASIAPODIDENTITY{n}"),
                "SecretAccessKey": "secret", "Token": "token",
                "Expiration": rfc3339_in(expires_in)})
            .to_string(),
        )
    });
    let (agent, _) = stub(handler).await;
    let uri = format!("{agent}/v1/credentials");
    let token_file = token_path.display().to_string();
    let _source = ipam_clouds::aws::credentials::start(config(
        &[
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &uri),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", &token_file),
        ],
        None,
        "http://127.0.0.1:9",
    ))
    .await
    .expect("the agent answered");
    assert_eq!(next_asked(&mut asked, "first fetch").await, "first-token");
    assert_eq!(
        next_asked(&mut asked, "refresh").await,
        "rotated-token",
        "the refresh read the token file again"
    );
}
