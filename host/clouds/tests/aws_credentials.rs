//! AWS credentials from an STS endpoint behind a private CA (a proxy, a
//! private STS endpoint through `AWS_ENDPOINT_URL_STS`): reached only with
//! that CA among the config's trust roots. The stub answers
//! AssumeRoleWithWebIdentity as STS's reference documentation shows it: a
//! form-encoded POST to `/`, an XML answer whose `Credentials` carry
//! `AccessKeyId`, `SecretAccessKey`, `SessionToken` and `Expiration`.

mod support;

use std::sync::Arc;

use ipam_clouds::aws::credentials::{
    self, AwsCredentialConfig, AwsCredentialError, AwsSource, ACCESS_KEY_ID,
};
use ipam_clouds::TrustRoots;
use ipam_http_client::testing::PrivateCa;
use support::StubRequest;

const ROLE_ARN: &str = "arn:aws:iam::111122223333:role/ipam";

fn sts(request: &StubRequest) -> (u16, String) {
    if request.method != "POST" || !request.body.contains("Action=AssumeRoleWithWebIdentity") {
        return (
            400,
            "<ErrorResponse><Error><Code>InvalidAction</Code></Error></ErrorResponse>".into(),
        );
    }
    (
        200,
        "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
         <AccessKeyId>ASIAPRIVATECA</AccessKeyId><SecretAccessKey>secret</SecretAccessKey>\
         <SessionToken>session</SessionToken><Expiration>2099-01-01T00:00:00Z</Expiration>\
         </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
            .into(),
    )
}

#[tokio::test]
async fn sts_behind_a_private_ca_is_reached_only_with_that_ca_trusted() {
    let ca = PrivateCa::new("private STS CA");
    let stub = support::serve_tls(Arc::new(sts), ca.acceptor(&["127.0.0.1"])).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "eyJ.token.sig\n").unwrap();
    let webpki_only = AwsCredentialConfig {
        env: [
            ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
            ("AWS_ROLE_ARN", ROLE_ARN.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        sts_endpoint: Some(stub.url.clone()),
        imds_endpoint: "http://127.0.0.1:9".into(),
        trust: TrustRoots::webpki(),
    };
    let source = credentials::choose(&webpki_only);
    assert!(
        matches!(source, AwsSource::WebIdentity { .. }),
        "{source:?}"
    );

    match credentials::fetch(&source, &webpki_only).await {
        Err(AwsCredentialError::Endpoint { message, .. }) => {
            assert!(message.contains("UnknownIssuer"), "{message}")
        }
        other => panic!("expected the certificate refused, got {other:?}"),
    }
    assert!(
        stub.requests().is_empty(),
        "nothing is sent before the certificate verifies"
    );

    let trusting = AwsCredentialConfig {
        trust: ca.trust(),
        ..webpki_only
    };
    let fetched = credentials::fetch(&source, &trusting)
        .await
        .expect("STS answered over TLS");
    assert_eq!(fetched.values[ACCESS_KEY_ID], "ASIAPRIVATECA");
    assert_eq!(stub.requests().len(), 1);
}
