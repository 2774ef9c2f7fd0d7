//! The AWS provider's settings (a JSON document; `README.md` documents it).

use std::collections::BTreeMap;

use ipam_provider_sdk::Error;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Settings {
    /// The region of the cluster's VPC, e.g. `us-east-1`.
    pub region: String,
    /// EC2 endpoint to use instead of the region's (a VPC interface endpoint,
    /// or a test server), `http[s]://host[:port]`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// With no `instance-tags`, instances are those tagged
    /// `kubernetes.io/cluster/<cluster-name>` (as EKS and kOps tag nodes).
    #[serde(default)]
    pub cluster_name: Option<String>,
    /// Only this VPC's subnets, security groups and instances.
    #[serde(default)]
    pub vpc_id: Option<String>,
    /// Only these subnets.
    #[serde(default)]
    pub subnet_ids: Vec<String>,
    /// Only subnets carrying every one of these tags.
    #[serde(default)]
    pub subnet_tags: BTreeMap<String, String>,
    /// Only instances carrying every one of these tags.
    #[serde(default)]
    pub instance_tags: BTreeMap<String, String>,
    /// Only security groups carrying every one of these tags.
    #[serde(default)]
    pub security_group_tags: BTreeMap<String, String>,
    /// Tags put on every interface the provider creates, besides the
    /// ownership tags the operator asks for (which win on a clash).
    #[serde(default)]
    pub extra_tags: BTreeMap<String, String>,
    /// MaxResults of every paginated Describe call (5 to 1000).
    #[serde(default = "default_page_size")]
    pub page_size: i32,
    /// Attempts per EC2 request, the first included (the SDK's standard
    /// retries, with jittered backoff; 1 leaves every retry to the operator).
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Deadline of one attempt.
    #[serde(default = "default_attempt_timeout_ms")]
    pub attempt_timeout_ms: u64,
    /// Deadline of one EC2 request with its retries; keep it below the
    /// operator's per-call deadline (`--provider-timeout-ms`, 30 s).
    #[serde(default = "default_operation_timeout_ms")]
    pub operation_timeout_ms: u64,
}

fn default_page_size() -> i32 {
    1000
}

fn default_max_attempts() -> u32 {
    3
}

fn default_attempt_timeout_ms() -> u64 {
    10_000
}

fn default_operation_timeout_ms() -> u64 {
    25_000
}

/// The tag EKS and kOps put on every node of a cluster.
pub fn cluster_tag_key(cluster_name: &str) -> String {
    format!("kubernetes.io/cluster/{cluster_name}")
}

impl Settings {
    /// Parse and check the settings; invalid-argument says what is wrong,
    /// and where (`settings: subnet-tags.tier: ...`).
    pub fn parse(text: &str) -> Result<Self, Error> {
        let settings: Settings = ipam_provider_sdk::settings::parse(text)?;
        settings
            .check()
            .map_err(|why| Error::InvalidArgument(format!("settings: {why}")))?;
        Ok(settings)
    }

    fn check(&self) -> Result<(), String> {
        let region_ok = !self.region.is_empty()
            && self
                .region
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !region_ok {
            return Err(format!(
                "region {:?}: expected a region name such as us-east-1",
                self.region
            ));
        }
        if let Some(endpoint) = &self.endpoint {
            let rest = endpoint
                .strip_prefix("https://")
                .or_else(|| endpoint.strip_prefix("http://"))
                .ok_or_else(|| format!("endpoint {endpoint:?}: expected http[s]://host[:port]"))?;
            if rest.is_empty() || rest.starts_with('/') {
                return Err(format!("endpoint {endpoint:?}: no host"));
            }
        }
        if !(5..=1000).contains(&self.page_size) {
            return Err(format!("page-size {}: expected 5 to 1000", self.page_size));
        }
        if !(1..=10).contains(&self.max_attempts) {
            return Err(format!(
                "max-attempts {}: expected 1 to 10",
                self.max_attempts
            ));
        }
        if self.attempt_timeout_ms == 0 || self.operation_timeout_ms < self.attempt_timeout_ms {
            return Err(format!(
                "attempt-timeout-ms {} and operation-timeout-ms {}: expected 0 < attempt <= operation",
                self.attempt_timeout_ms, self.operation_timeout_ms
            ));
        }
        let tag_maps = [
            ("subnet-tags", &self.subnet_tags),
            ("instance-tags", &self.instance_tags),
            ("security-group-tags", &self.security_group_tags),
            ("extra-tags", &self.extra_tags),
        ];
        for (name, tags) in tag_maps {
            if tags.keys().any(String::is_empty) {
                return Err(format!("{name}: a tag key is empty"));
            }
        }
        if self.cluster_name.as_deref() == Some("") {
            return Err("cluster-name is empty".to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(json: &str) -> String {
        match Settings::parse(json) {
            Err(Error::InvalidArgument(text)) => text,
            other => panic!("{json}: expected invalid-argument, got {other:?}"),
        }
    }

    #[test]
    fn good_settings_take_their_defaults() {
        let settings = Settings::parse(r#"{"region": "us-east-1", "cluster-name": "c1"}"#)
            .expect("good settings");
        assert_eq!(settings.region, "us-east-1");
        assert_eq!(settings.page_size, 1000);
        assert_eq!(settings.max_attempts, 3);
        assert_eq!(cluster_tag_key("c1"), "kubernetes.io/cluster/c1");
    }

    #[test]
    fn a_bad_setting_is_named_by_its_key_path() {
        assert_eq!(
            refused(r#"{"region": "us-east-1", "subnet-tags": {"tier": 2}}"#),
            "settings: subnet-tags.tier: invalid type: integer `2`, expected a string"
        );
        assert_eq!(
            refused(r#"{"subnet-ids": []}"#),
            "settings: missing field `region`"
        );
        let unknown = refused(r#"{"region": "us-east-1", "regoin": "x"}"#);
        assert!(
            unknown.starts_with("settings: regoin: unknown field `regoin`"),
            "{unknown}"
        );
    }

    #[test]
    fn values_out_of_range_are_refused_after_parsing() {
        assert_eq!(
            refused(r#"{"region": "us-east-1", "page-size": 2}"#),
            "settings: page-size 2: expected 5 to 1000"
        );
        assert_eq!(
            refused(r#"{"region": "US East"}"#),
            "settings: region \"US East\": expected a region name such as us-east-1"
        );
    }
}
