//! The rate limits the operator keeps to: the provider's declared rate
//! model (or, for a provider built before providers declared one, one
//! shared bucket), adjusted by `--rate-bucket NAME=BURST:PER_SECOND` and
//! `--rate-global-cap BURST:PER_SECOND`.

use std::collections::BTreeMap;

use anyhow::Context;
use ipam_cloud::rate::{BucketConfig, RateLimits, RateSettings};
use ipam_cloud::ProviderInfo;

/// One `--rate-bucket` value: a bucket's name and its figures.
pub fn parse_bucket_override(text: &str) -> Result<(String, BucketConfig), String> {
    let (name, figures) = text.split_once('=').ok_or_else(|| {
        format!("{text:?}: write NAME=BURST:PER_SECOND, e.g. AttachNetworkInterface=100:10")
    })?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("{text:?}: the bucket's name is empty"));
    }
    let bucket = figures.parse::<BucketConfig>().map_err(|e| e.to_string())?;
    Ok((name.to_string(), bucket))
}

/// The operator's adjustments; a bucket named twice is a mistake to report.
pub fn rate_settings(
    overrides: &[(String, BucketConfig)],
    global_cap: Option<BucketConfig>,
) -> anyhow::Result<RateSettings> {
    let mut by_name = BTreeMap::new();
    for (name, bucket) in overrides {
        anyhow::ensure!(
            by_name.insert(name.clone(), *bucket).is_none(),
            "--rate-bucket sets {name} twice"
        );
    }
    Ok(RateSettings {
        overrides: by_name,
        global_cap,
    })
}

/// The limits for this provider: its declared model checked and adjusted,
/// or the shared bucket when it declares none.
pub fn rate_limits(info: &ProviderInfo, settings: &RateSettings) -> anyhow::Result<RateLimits> {
    if info.rate_model.is_none() {
        tracing::warn!(provider = %info.name,
            "the provider declares no rate model (built for WIT 0.1.0): one bucket for every call, \
             4 per second, burst 20, unless --rate-bucket all=BURST:PER_SECOND says otherwise");
    }
    RateLimits::of_provider(info, settings)
        .with_context(|| format!("the rate limits of provider {}", info.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_override_is_a_name_and_figures() {
        assert_eq!(
            parse_bucket_override("AttachNetworkInterface=100:10"),
            Ok((
                "AttachNetworkInterface".to_string(),
                BucketConfig {
                    burst: 100.0,
                    per_second: 10.0
                }
            ))
        );
        for bad in ["Attach", "=1:1", "Attach=1", "Attach=0:1"] {
            assert!(parse_bucket_override(bad).is_err(), "{bad}");
        }
        let twice = [
            parse_bucket_override("a=1:1").unwrap(),
            parse_bucket_override("a=2:2").unwrap(),
        ];
        let error = rate_settings(&twice, None).unwrap_err();
        assert!(error.to_string().contains("sets a twice"), "{error}");
    }

    #[test]
    fn a_provider_without_a_model_gets_the_shared_bucket() {
        let info = ProviderInfo {
            name: "old".into(),
            version: "0.1.0".into(),
            capabilities: Default::default(),
            max_concurrency: 1,
            rate_model: None,
        };
        let limits = rate_limits(&info, &RateSettings::default()).unwrap();
        assert_eq!(limits.summary(), "all 20:4");
        let unknown =
            rate_settings(&[parse_bucket_override("Describe=1:1").unwrap()], None).unwrap();
        let error = format!("{:#}", rate_limits(&info, &unknown).unwrap_err());
        assert!(
            error.contains("bucket \"Describe\", which the provider's rate model does not declare"),
            "{error}"
        );
    }
}
