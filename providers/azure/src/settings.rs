//! The Azure provider's settings (a JSON document; `README.md` documents it).

use std::collections::BTreeMap;

use ipam_provider_sdk::Error;
use serde::Deserialize;

/// ARM's public endpoint; sovereign clouds and tests name another.
pub const PUBLIC_ARM_ENDPOINT: &str = "https://management.azure.com";

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Settings {
    /// The subscription id (a GUID) everything lives in.
    pub subscription_id: String,
    /// The resource group of the nodes: their scale sets, VMs and NICs, and
    /// virtual networks and NSGs (AKS's `MC_...` group).
    pub resource_group: String,
    /// More resource groups whose virtual networks and NSGs are read (a
    /// cluster on a virtual network of its own group).
    #[serde(default)]
    pub network_resource_groups: Vec<String>,
    /// The cluster's region (`eastus`): Resource SKUs are read for it; for
    /// every region when unset (a larger answer).
    #[serde(default)]
    pub location: Option<String>,
    /// Only these scale sets (by name) give instances; all of the resource
    /// groups' when unset.
    #[serde(default)]
    pub scale_sets: Option<Vec<String>>,
    /// Whether VMs outside scale sets are instances too.
    #[serde(default = "yes")]
    pub standalone_vms: bool,
    /// Only scale sets and standalone VMs carrying every one of these tags.
    #[serde(default)]
    pub instance_tags: BTreeMap<String, String>,
    /// Only subnets of virtual networks carrying every one of these tags
    /// (ARM has no tags on subnets).
    #[serde(default)]
    pub subnet_tags: BTreeMap<String, String>,
    /// Only network security groups carrying every one of these tags.
    #[serde(default)]
    pub security_group_tags: BTreeMap<String, String>,
    /// ARM endpoint, `http[s]://host[:port]` (sovereign clouds, tests).
    #[serde(default = "public_endpoint")]
    pub arm_endpoint: String,
    #[serde(default)]
    pub api_versions: ApiVersions,
    /// How long one write may wait for its long-running operation, the
    /// polls' waits added up; keep it below the operator's per-call deadline
    /// (`--provider-timeout-ms`, 30 s).
    #[serde(default = "default_operation_timeout_ms")]
    pub operation_timeout_ms: u64,
    /// Wait between polls when ARM sends no Retry-After.
    #[serde(default = "default_poll_interval_ms")]
    pub poll_interval_ms: u64,
}

/// The api-version of each family of calls.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ApiVersions {
    /// Microsoft.Network: virtual networks, NSGs, standalone NICs.
    pub network: String,
    /// Microsoft.Compute: virtual machines, scale sets, scale-set VMs.
    pub compute: String,
    /// Scale-set VM NICs (`virtualMachineScaleSets/{vmss}/.../networkInterfaces`),
    /// which ARM serves at the older versions only.
    pub scale_set_network: String,
    /// Microsoft.Compute/skus.
    pub resource_skus: String,
}

impl Default for ApiVersions {
    fn default() -> Self {
        ApiVersions {
            network: "2024-03-01".into(),
            compute: "2024-07-01".into(),
            scale_set_network: "2018-10-01".into(),
            resource_skus: "2021-07-01".into(),
        }
    }
}

fn yes() -> bool {
    true
}

fn public_endpoint() -> String {
    PUBLIC_ARM_ENDPOINT.to_string()
}

fn default_operation_timeout_ms() -> u64 {
    25_000
}

fn default_poll_interval_ms() -> u64 {
    1_000
}

/// Characters of a name that goes into an ARM path as it is.
fn is_path_safe(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'(' | b')'))
}

fn is_guid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_api_version(text: &str) -> bool {
    // 2024-03-01, or 2024-03-01-preview
    let date = text.get(..10).unwrap_or("");
    let rest = text.get(10..).unwrap_or("");
    date.len() == 10
        && date.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
        && (rest.is_empty() || rest == "-preview")
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
        if !is_guid(&self.subscription_id) {
            return Err(format!(
                "subscription-id {:?}: expected a subscription id (a GUID)",
                self.subscription_id
            ));
        }
        if let Some(location) = &self.location {
            let location_ok = !location.is_empty()
                && location
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
            if !location_ok {
                return Err(format!(
                    "location {location:?}: expected a region name such as eastus"
                ));
            }
        }
        if !is_path_safe(&self.resource_group) {
            return Err(format!(
                "resource-group {:?}: not a resource group name",
                self.resource_group
            ));
        }
        for (i, group) in self.network_resource_groups.iter().enumerate() {
            if !is_path_safe(group) {
                return Err(format!(
                    "network-resource-groups[{i}] {group:?}: not a resource group name"
                ));
            }
        }
        for (i, name) in self.scale_sets.iter().flatten().enumerate() {
            if !is_path_safe(name) {
                return Err(format!("scale-sets[{i}] {name:?}: not a scale set name"));
            }
        }
        let rest = self
            .arm_endpoint
            .strip_prefix("https://")
            .or_else(|| self.arm_endpoint.strip_prefix("http://"))
            .ok_or_else(|| {
                format!(
                    "arm-endpoint {:?}: expected http[s]://host[:port]",
                    self.arm_endpoint
                )
            })?;
        if rest.trim_end_matches('/').is_empty()
            || rest.trim_end_matches('/').contains(['/', '?', '#'])
        {
            return Err(format!(
                "arm-endpoint {:?}: expected http[s]://host[:port] and no path",
                self.arm_endpoint
            ));
        }
        let versions = [
            ("network", &self.api_versions.network),
            ("compute", &self.api_versions.compute),
            ("scale-set-network", &self.api_versions.scale_set_network),
            ("resource-skus", &self.api_versions.resource_skus),
        ];
        for (name, version) in versions {
            if !is_api_version(version) {
                return Err(format!(
                    "api-versions.{name} {version:?}: expected YYYY-MM-DD[-preview]"
                ));
            }
        }
        let tag_maps = [
            ("instance-tags", &self.instance_tags),
            ("subnet-tags", &self.subnet_tags),
            ("security-group-tags", &self.security_group_tags),
        ];
        for (name, tags) in tag_maps {
            if tags.keys().any(String::is_empty) {
                return Err(format!("{name}: a tag key is empty"));
            }
        }
        if self.poll_interval_ms == 0 || self.operation_timeout_ms < self.poll_interval_ms {
            return Err(format!(
                "poll-interval-ms {} and operation-timeout-ms {}: expected 0 < poll interval <= operation timeout",
                self.poll_interval_ms, self.operation_timeout_ms
            ));
        }
        Ok(())
    }

    /// The groups whose virtual networks and NSGs are read: the nodes'
    /// first, then the network ones.
    pub fn network_groups(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.resource_group).chain(
            self.network_resource_groups
                .iter()
                .filter(|g| !g.eq_ignore_ascii_case(&self.resource_group)),
        )
    }

    /// The endpoint without a trailing slash, for joining paths.
    pub fn endpoint(&self) -> &str {
        self.arm_endpoint.trim_end_matches('/')
    }
}

/// Whether `tags` carry every one of `wanted` (ARM tag names compare without
/// case, values with it).
pub fn has_tags(tags: &BTreeMap<String, String>, wanted: &BTreeMap<String, String>) -> bool {
    wanted.iter().all(|(key, value)| {
        tags.iter()
            .any(|(k, v)| k.eq_ignore_ascii_case(key) && v == value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUB: &str = "00000000-1111-2222-3333-444444444444";

    fn refused(json: &str) -> String {
        match Settings::parse(json) {
            Err(Error::InvalidArgument(text)) => text,
            other => panic!("{json}: expected invalid-argument, got {other:?}"),
        }
    }

    fn with(extra: &str) -> String {
        format!(r#"{{"subscription-id": "{SUB}", "resource-group": "rg"{extra}}}"#)
    }

    #[test]
    fn good_settings_take_their_defaults() {
        let settings = Settings::parse(&with("")).expect("good settings");
        assert_eq!(settings.endpoint(), "https://management.azure.com");
        assert_eq!(settings.api_versions.scale_set_network, "2018-10-01");
        assert!(settings.standalone_vms);
        assert_eq!(settings.scale_sets, None);
        assert_eq!(settings.location, None);
        assert_eq!(settings.operation_timeout_ms, 25_000);
        assert_eq!(settings.network_groups().collect::<Vec<_>>(), ["rg"]);
        let custom = Settings::parse(&with(
            r#", "arm-endpoint": "http://127.0.0.1:8080/", "location": "eastus",
               "network-resource-groups": ["RG", "vnet-rg"],
               "api-versions": {"network": "2023-09-01-preview"}"#,
        ))
        .expect("good settings");
        assert_eq!(custom.endpoint(), "http://127.0.0.1:8080");
        assert_eq!(custom.location.as_deref(), Some("eastus"));
        assert_eq!(
            custom.network_groups().collect::<Vec<_>>(),
            ["rg", "vnet-rg"]
        );
        assert_eq!(custom.api_versions.network, "2023-09-01-preview");
        assert_eq!(custom.api_versions.compute, "2024-07-01");
    }

    #[test]
    fn unknown_keys_are_refused_and_named_at_every_level() {
        let top = refused(&with(r#", "resource-groups": ["x"]"#));
        assert!(
            top.starts_with("settings: resource-groups: unknown field"),
            "{top}"
        );
        let nested = refused(&with(r#", "api-versions": {"storage": "2024-01-01"}"#));
        assert!(
            nested.starts_with("settings: api-versions.storage: unknown field"),
            "{nested}"
        );
    }

    #[test]
    fn bad_values_are_named() {
        for (extra, says) in [
            (
                r#", "arm-endpoint": "management.azure.com""#,
                "arm-endpoint",
            ),
            (r#", "arm-endpoint": "https://host/path""#, "no path"),
            (
                r#", "api-versions": {"compute": "latest"}"#,
                "api-versions.compute",
            ),
            (r#", "scale-sets": ["a/b"]"#, "scale-sets[0]"),
            (
                r#", "network-resource-groups": [""]"#,
                "network-resource-groups[0]",
            ),
            (r#", "location": "East US""#, "location \"East US\""),
            (
                r#", "subnet-tags": {"": "x"}"#,
                "subnet-tags: a tag key is empty",
            ),
            (r#", "poll-interval-ms": 0"#, "poll-interval-ms 0"),
        ] {
            let text = refused(&with(extra));
            assert!(text.contains(says), "{extra}: {text}");
        }
        let text = refused(r#"{"subscription-id": "sub", "resource-group": "rg"}"#);
        assert!(text.contains("expected a subscription id"), "{text}");
        let text = refused(&format!(
            r#"{{"subscription-id": "{SUB}", "resource-group": "a/b"}}"#
        ));
        assert!(text.contains("resource-group \"a/b\""), "{text}");
        let text = refused(&format!(r#"{{"subscription-id": "{SUB}"}}"#));
        assert_eq!(text, "settings: missing field `resource-group`");
    }

    #[test]
    fn tag_names_match_without_case_and_values_with_it() {
        let tags: BTreeMap<String, String> = [("Cluster".to_string(), "c1".to_string())]
            .into_iter()
            .collect();
        let want = |k: &str, v: &str| -> BTreeMap<String, String> {
            [(k.to_string(), v.to_string())].into_iter().collect()
        };
        assert!(has_tags(&tags, &want("cluster", "c1")));
        assert!(!has_tags(&tags, &want("cluster", "C1")));
        assert!(!has_tags(&tags, &want("pool", "c1")));
        assert!(has_tags(&tags, &BTreeMap::new()));
    }
}
