//! What the host itself knows of each cloud, apart from the generic host:
//! credential chains, instance-metadata clients and the default egress of a
//! cloud's provider, chosen by [`Cloud`] (a typed value, never a compared
//! string). How a cloud throttles is not here: each provider declares its
//! cloud's rate model (WIT 0.2.0). Providers stay the only code that speaks
//! a cloud's API; this is what the host needs around them. The node agent
//! uses the metadata clients too, so nothing here links wasmtime (nor kube).
//!
//! Credentials: the provider's cloud credentials come from the host
//! ([`aws::credentials`]: the AWS SDKs' chain; [`azure::credentials`]:
//! Entra ID tokens by client secret, workload identity or managed identity),
//! kept fresh before they expire ([`refresh::RefreshingSource`]) and handed
//! to the guest through the credentials import.
//!
//! Instance facts: the node agent reads its instance's id, type, zone,
//! network and primary MAC from the cloud's metadata service
//! ([`aws::instance_facts::read`] over IMDSv2,
//! [`azure::AzureImds::instance_facts`] from Azure IMDS), each checked into
//! its cloud's typed facts, and converts either into the cloud-neutral
//! [`InstanceFacts`] to register its CiliumNode with.

pub mod aws;
pub mod azure;
mod form;
pub mod instance_facts;
pub mod mac;
mod origin;
pub mod refresh;

pub use instance_facts::InstanceFacts;
/// What every client here verifies an https server against: the webpki
/// roots, plus the operator's `--egress-ca-file` where it gives one.
pub use ipam_http_client::TrustRoots;
pub use mac::MacAddress;

/// The cloud a provider talks to, as far as the host needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cloud {
    /// A cloud the host has no knowledge of (the mock, a third party's).
    Generic,
    Aws,
    Azure,
}

/// A cloud's default egress allow-list could not be derived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefaultEgressError {
    #[error(transparent)]
    Aws(#[from] aws::egress::AwsEgressError),
    #[error(transparent)]
    Azure(#[from] azure::egress::AzureEgressError),
}

impl Cloud {
    /// The origins the cloud's provider needs when the operator names none,
    /// from the provider's settings (JSON): none for a generic cloud.
    pub fn default_egress(self, settings_json: &str) -> Result<Vec<String>, DefaultEgressError> {
        match self {
            Cloud::Generic => Ok(Vec::new()),
            Cloud::Aws => Ok(aws::egress::default_egress(settings_json)?),
            Cloud::Azure => Ok(azure::egress::default_egress(settings_json)?),
        }
    }

    /// The subsystem of Cilium's cloud API metrics for this cloud
    /// (`cilium_operator_ec2_api_*`, `cilium_operator_azure_api_*`); none
    /// for a generic cloud.
    pub fn cilium_api_subsystem(self) -> Option<&'static str> {
        match self {
            Cloud::Generic => None,
            Cloud::Aws => Some("ec2"),
            Cloud::Azure => Some("azure"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cilium_names_the_api_metrics_of_aws_and_azure_after_ec2_and_azure() {
        assert_eq!(Cloud::Aws.cilium_api_subsystem(), Some("ec2"));
        assert_eq!(Cloud::Azure.cilium_api_subsystem(), Some("azure"));
        assert_eq!(Cloud::Generic.cilium_api_subsystem(), None);
    }

    #[test]
    fn each_cloud_has_its_own_egress() {
        assert_eq!(Cloud::Generic.default_egress("{}"), Ok(Vec::new()));
        assert_eq!(
            Cloud::Aws.default_egress(r#"{"region": "eu-west-1"}"#),
            Ok(vec!["https://ec2.eu-west-1.amazonaws.com".to_string()])
        );
        assert_eq!(
            Cloud::Azure.default_egress(r#"{"subscription-id": "s"}"#),
            Ok(vec!["https://management.azure.com".to_string()])
        );
    }
}
