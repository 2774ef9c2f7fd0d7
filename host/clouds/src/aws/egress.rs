//! The AWS provider's default egress allow-list: the EC2 endpoint of the
//! region in its settings, plus the endpoint override when it has one. The
//! host's own AWS requests (STS, IMDS) are not the guest's and not on it.

use serde::Deserialize;

use crate::origin::origin;

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum AwsEgressError {
    #[error("the AWS provider's settings are not JSON: {0}")]
    Settings(String),
    #[error("the AWS provider's settings have no region, so its EC2 endpoint is unknown")]
    NoRegion,
    #[error("endpoint {0:?} is not http[s]://host[:port]")]
    Endpoint(String),
}

/// The fields of the AWS provider's settings that decide where it connects.
#[derive(Deserialize)]
struct Endpoints {
    region: Option<String>,
    endpoint: Option<String>,
}

/// Origins (`scheme://host[:port]`) the AWS provider needs to reach.
pub fn default_egress(settings_json: &str) -> Result<Vec<String>, AwsEgressError> {
    let endpoints: Endpoints =
        serde_json::from_str(settings_json).map_err(|e| AwsEgressError::Settings(e.to_string()))?;
    let region = endpoints
        .region
        .filter(|r| !r.is_empty())
        .ok_or(AwsEgressError::NoRegion)?;
    // The China partition's endpoints end in .amazonaws.com.cn.
    let suffix = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    let mut origins = vec![format!("https://ec2.{region}.{suffix}")];
    if let Some(endpoint) = endpoints.endpoint {
        origins.push(origin(&endpoint).ok_or(AwsEgressError::Endpoint(endpoint))?);
    }
    Ok(origins)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_region_endpoint_and_the_override() {
        let table: &[(&str, Result<Vec<&str>, AwsEgressError>)] = &[
            (
                r#"{"region":"us-east-1"}"#,
                Ok(vec!["https://ec2.us-east-1.amazonaws.com"]),
            ),
            (
                r#"{"region":"cn-north-1"}"#,
                Ok(vec!["https://ec2.cn-north-1.amazonaws.com.cn"]),
            ),
            (
                r#"{"region":"eu-west-1","endpoint":"https://vpce-1.ec2.eu-west-1.vpce.amazonaws.com/"}"#,
                Ok(vec![
                    "https://ec2.eu-west-1.amazonaws.com",
                    "https://vpce-1.ec2.eu-west-1.vpce.amazonaws.com",
                ]),
            ),
            (
                r#"{"region":"us-east-1","endpoint":"http://127.0.0.1:5000"}"#,
                Ok(vec![
                    "https://ec2.us-east-1.amazonaws.com",
                    "http://127.0.0.1:5000",
                ]),
            ),
            (r#"{"cluster-name":"x"}"#, Err(AwsEgressError::NoRegion)),
            (
                r#"{"region":"us-east-1","endpoint":"ec2.local"}"#,
                Err(AwsEgressError::Endpoint("ec2.local".into())),
            ),
        ];
        for (settings, want) in table {
            let got = default_egress(settings);
            let want = want
                .as_ref()
                .map(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(got, want.map_err(Clone::clone), "{settings}");
        }
        assert!(matches!(
            default_egress("region: us-east-1"),
            Err(AwsEgressError::Settings(_))
        ));
    }
}
