//! What the host itself knows of each cloud, apart from the generic host:
//! credential chains, instance-metadata clients, the default egress of a
//! cloud's provider, and the cloud's rate model, chosen by [`Cloud`] (a typed
//! value, never a compared string). Providers stay the only code that speaks
//! a cloud's API; this is what the host needs around them. The node agent
//! uses the metadata clients too, so nothing here links wasmtime.

pub mod aws;

use ipam_cloud::rate::{BucketConfig, RateLimits};

/// The cloud a provider talks to, as far as the host needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cloud {
    /// A cloud the host has no knowledge of (the mock, a third party's).
    Generic,
    Aws,
}

/// A cloud's default egress allow-list could not be derived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefaultEgressError {
    #[error(transparent)]
    Aws(#[from] aws::egress::AwsEgressError),
}

impl Cloud {
    /// The cloud's rate model. A cloud the host does not know gets Cilium's
    /// own client-side limit: one bucket for every call, 4 per second, burst
    /// 20 (`limit-ipam-api-qps`, `limit-ipam-api-burst`).
    pub fn rate_limits(self) -> RateLimits {
        match self {
            Cloud::Generic => RateLimits::shared_bucket(BucketConfig {
                burst: 20.0,
                per_second: 4.0,
            }),
            Cloud::Aws => aws::rate_limits::rate_limits(),
        }
    }

    /// The origins the cloud's provider needs when the operator names none,
    /// from the provider's settings (JSON): none for a generic cloud.
    pub fn default_egress(self, settings_json: &str) -> Result<Vec<String>, DefaultEgressError> {
        match self {
            Cloud::Generic => Ok(Vec::new()),
            Cloud::Aws => Ok(aws::egress::default_egress(settings_json)?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_cloud::Operation;

    #[test]
    fn each_cloud_has_its_own_rate_model_and_egress() {
        let generic = Cloud::Generic.rate_limits();
        assert_eq!(generic.buckets().len(), 1);
        assert_eq!(generic.cost(Operation::CreateInterface), &[(0, 1.0)]);
        assert_eq!(Cloud::Aws.rate_limits().buckets().len(), 3);
        assert_eq!(Cloud::Generic.default_egress("{}"), Ok(Vec::new()));
        assert_eq!(
            Cloud::Aws.default_egress(r#"{"region": "eu-west-1"}"#),
            Ok(vec!["https://ec2.eu-west-1.amazonaws.com".to_string()])
        );
    }
}
