//! The Azure provider's default egress allow-list: the Azure Resource
//! Manager endpoint of its settings (`arm-endpoint`, for a sovereign cloud or
//! a test stub), `https://management.azure.com` when it names none. Entra ID
//! and the metadata service are the host's to reach (tokens come through the
//! credentials import), never the guest's, so they are not on it.

use serde::Deserialize;

use crate::origin::origin;

/// Azure Resource Manager in the public cloud.
pub const DEFAULT_ARM_ENDPOINT: &str = "https://management.azure.com";

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum AzureEgressError {
    #[error("the Azure provider's settings are not JSON: {0}")]
    Settings(String),
    #[error("arm-endpoint {0:?} is not http[s]://host[:port]")]
    Endpoint(String),
}

/// The one field of the Azure provider's settings that decides where it
/// connects; the provider checks the rest.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Endpoints {
    arm_endpoint: Option<String>,
}

/// Origins (`scheme://host[:port]`) the Azure provider needs to reach.
pub fn default_egress(settings_json: &str) -> Result<Vec<String>, AzureEgressError> {
    let endpoints: Endpoints = serde_json::from_str(settings_json)
        .map_err(|e| AzureEgressError::Settings(e.to_string()))?;
    let endpoint = endpoints
        .arm_endpoint
        .unwrap_or_else(|| DEFAULT_ARM_ENDPOINT.to_string());
    let arm = origin(&endpoint).ok_or(AzureEgressError::Endpoint(endpoint))?;
    Ok(vec![arm])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arm_endpoint_or_the_public_one() {
        let table: &[(&str, Result<&str, AzureEgressError>)] = &[
            (
                r#"{"subscription-id":"s"}"#,
                Ok("https://management.azure.com"),
            ),
            (
                r#"{"arm-endpoint":"https://management.usgovcloudapi.net/"}"#,
                Ok("https://management.usgovcloudapi.net"),
            ),
            (
                r#"{"arm-endpoint":"http://127.0.0.1:8443"}"#,
                Ok("http://127.0.0.1:8443"),
            ),
            (
                r#"{"arm-endpoint":"management.azure.com"}"#,
                Err(AzureEgressError::Endpoint("management.azure.com".into())),
            ),
        ];
        for (settings, want) in table {
            let want = want.clone().map(|origin| vec![origin.to_string()]);
            assert_eq!(default_egress(settings), want, "{settings}");
        }
        assert!(matches!(
            default_egress("arm-endpoint: x"),
            Err(AzureEgressError::Settings(_))
        ));
        assert!(matches!(
            default_egress(r#"{"arm-endpoint": 7}"#),
            Err(AzureEgressError::Settings(_))
        ));
    }
}
