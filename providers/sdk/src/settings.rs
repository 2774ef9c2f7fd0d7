//! A provider's settings, from the JSON document `configure` receives.
//!
//! Users write settings in YAML (or JSON); the operator converts them to JSON
//! before calling `configure`. A line and column would point into JSON the
//! user never wrote, so [`parse`] names the bad setting by its key path
//! instead: `settings: subnet-tags.tier: invalid type: integer, expected a
//! string`, `settings: subnets[1]: missing field `cidr``.
//!
//! ```
//! use std::collections::BTreeMap;
//! use ipam_provider_sdk::{settings, Error};
//! use serde::Deserialize;
//!
//! #[derive(Debug, Deserialize)]
//! #[serde(rename_all = "kebab-case", deny_unknown_fields)]
//! struct Settings {
//!     region: String,
//!     #[serde(default)]
//!     subnet_tags: BTreeMap<String, String>,
//! }
//!
//! let bad = settings::parse::<Settings>(r#"{"region": "r1", "subnet-tags": {"tier": 2}}"#);
//! assert_eq!(
//!     bad.unwrap_err(),
//!     Error::InvalidArgument(
//!         "settings: subnet-tags.tier: invalid type: integer `2`, expected a string".into()
//!     )
//! );
//! ```

use serde::de::DeserializeOwned;

use crate::Error;

/// Deserialize the settings document into `T`, or `invalid-argument` saying
/// `settings: <key path>: <what is wrong>` (without a path when the document
/// itself is wrong: not an object, a missing top-level key). A document that
/// is not JSON at all keeps serde_json's line and column.
pub fn parse<T: DeserializeOwned>(json: &str) -> Result<T, Error> {
    let mut document = serde_json::Deserializer::from_str(json);
    let settings = serde_path_to_error::deserialize(&mut document).map_err(|error| {
        let path = error.path().to_string();
        let error = error.into_inner();
        let data = error.classify() == serde_json::error::Category::Data;
        Error::InvalidArgument(if !data {
            // Not JSON: the position is the only "where" there is.
            format!("settings: {error}")
        } else if path == "." {
            format!("settings: {}", without_position(&error))
        } else {
            format!("settings: {path}: {}", without_position(&error))
        })
    })?;
    document
        .end()
        .map_err(|error| Error::InvalidArgument(format!("settings: {error}")))?;
    Ok(settings)
}

/// serde_json's message without the position it appends.
fn without_position(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    text.strip_suffix(&position).unwrap_or(&text).to_string()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "kebab-case", deny_unknown_fields)]
    struct Settings {
        region: String,
        #[serde(default)]
        subnet_tags: BTreeMap<String, String>,
        #[serde(default)]
        subnets: Vec<SubnetSpec>,
        #[serde(default)]
        page_size: Option<u16>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "kebab-case", deny_unknown_fields)]
    struct SubnetSpec {
        id: String,
        cidr: String,
    }

    #[derive(Debug, Deserialize)]
    #[serde(tag = "mode", rename_all = "kebab-case")]
    enum Mode {
        Behave,
        Fetch {
            #[allow(dead_code)]
            url: String,
        },
    }

    fn refused<T: std::fmt::Debug + DeserializeOwned>(json: &str) -> String {
        match parse::<T>(json) {
            Err(Error::InvalidArgument(text)) => text,
            other => panic!("{json}: expected invalid-argument, got {other:?}"),
        }
    }

    #[test]
    fn good_settings_parse() {
        let settings: Settings = parse(
            r#"{"region": "eu-west-1", "subnet-tags": {"tier": "pods"},
                "subnets": [{"id": "subnet-1", "cidr": "10.0.1.0/24"}]}"#,
        )
        .unwrap();
        assert_eq!(settings.region, "eu-west-1");
        assert_eq!(settings.subnet_tags["tier"], "pods");
        assert_eq!(settings.subnets[0].id, "subnet-1");
        assert_eq!(settings.subnets[0].cidr, "10.0.1.0/24");
        assert_eq!(settings.page_size, None);
    }

    #[test]
    fn a_bad_value_is_named_by_its_key_path_without_a_json_position() {
        assert_eq!(
            refused::<Settings>(r#"{"region": "r", "subnet-tags": {"tier": 2}}"#),
            "settings: subnet-tags.tier: invalid type: integer `2`, expected a string"
        );
        assert_eq!(
            refused::<Settings>(r#"{"region": "r", "page-size": 70000}"#),
            "settings: page-size: invalid value: integer `70000`, expected u16"
        );
        assert_eq!(
            refused::<Settings>(
                r#"{"region": "r", "subnets": [{"id": "a", "cidr": "x"}, {"id": "b", "cidr": 5}]}"#
            ),
            "settings: subnets[1].cidr: invalid type: integer `5`, expected a string"
        );
    }

    #[test]
    fn a_missing_key_is_named_with_where_it_is_missing() {
        assert_eq!(
            refused::<Settings>(r#"{"region": "r", "subnets": [{"id": "a"}]}"#),
            "settings: subnets[0]: missing field `cidr`"
        );
        assert_eq!(
            refused::<Settings>("{}"),
            "settings: missing field `region`"
        );
    }

    #[test]
    fn an_unknown_key_is_refused_and_named() {
        let text = refused::<Settings>(r#"{"region": "r", "subnet-tag": {}}"#);
        assert!(
            text.starts_with("settings: ") && text.contains("unknown field `subnet-tag`"),
            "{text}"
        );
        let nested = refused::<Settings>(
            r#"{"region": "r", "subnets": [{"id": "a", "cidr": "x", "zone": "z"}]}"#,
        );
        assert!(
            nested.starts_with("settings: subnets[0].zone: unknown field `zone`"),
            "{nested}"
        );
    }

    #[test]
    fn an_unknown_variant_names_itself() {
        assert!(matches!(
            parse::<Mode>(r#"{"mode": "behave"}"#),
            Ok(Mode::Behave)
        ));
        let text = refused::<Mode>(r#"{"mode": "dance"}"#);
        assert!(text.contains("unknown variant `dance`"), "{text}");
        let text = refused::<Mode>(r#"{"mode": "fetch"}"#);
        assert!(text.contains("missing field `url`"), "{text}");
    }

    #[test]
    fn a_document_that_is_not_json_keeps_its_position() {
        assert_eq!(
            refused::<Settings>(r#"{"region": "r",}"#),
            "settings: trailing comma at line 1 column 16"
        );
        assert_eq!(
            refused::<Settings>(r#"{"region": "r"} {}"#),
            "settings: trailing characters at line 1 column 17"
        );
        assert_eq!(
            refused::<Settings>(r#""r""#),
            "settings: invalid type: string \"r\", expected struct Settings"
        );
    }
}
