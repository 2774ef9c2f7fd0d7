//! The network configuration list `install-cni` puts on the node, checked
//! before anything is written: a runtime that finds a broken conflist in its
//! configuration directory fails every pod's sandbox on the node, so a bad
//! one must never get there. Pure: bytes in, a typed verdict out.

use serde_json::Value;

/// The IPAM type the node's agent serves: a conflist that does not name it
/// would give pods addresses from somewhere else.
pub const IPAM_TYPE: &str = "ipam-cni";

#[derive(Debug, thiserror::Error)]
pub enum ConflistError {
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("not a JSON object")]
    NotAnObject,
    #[error("`{0}` is missing or not a non-empty string")]
    MissingString(&'static str),
    #[error("`plugins` is missing or not a list")]
    NoPluginList,
    #[error("`plugins` is empty")]
    EmptyPluginList,
    #[error("plugins[{index}] is not an object with a non-empty string `type`")]
    BadPlugin { index: usize },
    #[error("no plugin has `ipam.type` \"{IPAM_TYPE}\": pods would not get their addresses from the agent")]
    NoIpamCni,
}

/// What a valid conflist says, for the log line after installing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflist {
    pub name: String,
    pub cni_version: String,
    /// The plugins' `type`s, in chain order.
    pub plugin_types: Vec<String>,
}

/// Checks `bytes` is a conflist the agent can serve: a JSON object with
/// `cniVersion`, `name` and a non-empty `plugins` list of objects with a
/// `type`, one of which has `ipam.type == "ipam-cni"`.
pub fn check(bytes: &[u8]) -> Result<Conflist, ConflistError> {
    let document: Value = serde_json::from_slice(bytes).map_err(ConflistError::NotJson)?;
    let object = document.as_object().ok_or(ConflistError::NotAnObject)?;
    let string = |field: &'static str| {
        object
            .get(field)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or(ConflistError::MissingString(field))
    };
    let cni_version = string("cniVersion")?;
    let name = string("name")?;
    let plugins = object
        .get("plugins")
        .and_then(Value::as_array)
        .ok_or(ConflistError::NoPluginList)?;
    if plugins.is_empty() {
        return Err(ConflistError::EmptyPluginList);
    }
    let plugin_types = plugins
        .iter()
        .enumerate()
        .map(|(index, plugin)| {
            plugin
                .get("type")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .ok_or(ConflistError::BadPlugin { index })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !plugins.iter().any(names_ipam_cni) {
        return Err(ConflistError::NoIpamCni);
    }
    Ok(Conflist {
        name,
        cni_version,
        plugin_types,
    })
}

/// A plugin that takes its addresses from `ipam-cni`.
fn names_ipam_cni(plugin: &Value) -> bool {
    plugin.pointer("/ipam/type").and_then(Value::as_str) == Some(IPAM_TYPE)
}

/// Whether a configuration file of the node's directory is this agent's:
/// a conflist one of whose plugins, or a single-plugin `.conf` whose
/// plugin, takes its addresses from `ipam-cni`. Anything else (another
/// network's, or not JSON at all) is not.
pub fn is_agents(bytes: &[u8]) -> bool {
    let Ok(document) = serde_json::from_slice::<Value>(bytes) else {
        return false;
    };
    match document.get("plugins").and_then(Value::as_array) {
        Some(plugins) => plugins.iter().any(names_ipam_cni),
        None => names_ipam_cni(&document),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{
        "cniVersion": "1.0.0",
        "name": "ipam",
        "plugins": [
            {"type": "ptp", "ipam": {"type": "ipam-cni", "socket": "/run/ipam-agent/agent.sock"}},
            {"type": "ipam-cni", "socket": "/run/ipam-agent/agent.sock"}
        ]
    }"#;

    #[test]
    fn a_conflist_with_ipam_cni_passes() {
        let conflist = check(GOOD.as_bytes()).unwrap();
        assert_eq!(conflist.name, "ipam");
        assert_eq!(conflist.cni_version, "1.0.0");
        assert_eq!(conflist.plugin_types, ["ptp", "ipam-cni"]);
    }

    /// `GOOD` with one change, and the error it must give.
    fn refused(edit: impl FnOnce(&mut Value)) -> ConflistError {
        let mut document: Value = serde_json::from_str(GOOD).unwrap();
        edit(&mut document);
        check(document.to_string().as_bytes()).unwrap_err()
    }

    #[test]
    fn each_missing_part_is_named() {
        assert!(matches!(
            check(b"{\"cniVersion\": "),
            Err(ConflistError::NotJson(_))
        ));
        assert!(matches!(check(b"[]"), Err(ConflistError::NotAnObject)));
        assert!(matches!(
            refused(|d| drop(d.as_object_mut().unwrap().remove("cniVersion"))),
            ConflistError::MissingString("cniVersion")
        ));
        assert!(matches!(
            refused(|d| d["name"] = Value::from("")),
            ConflistError::MissingString("name")
        ));
        assert!(matches!(
            refused(|d| d["name"] = Value::from(3)),
            ConflistError::MissingString("name")
        ));
        assert!(matches!(
            refused(|d| d["plugins"] = Value::from("ptp")),
            ConflistError::NoPluginList
        ));
        assert!(matches!(
            refused(|d| d["plugins"] = Value::Array(vec![])),
            ConflistError::EmptyPluginList
        ));
        assert!(matches!(
            refused(|d| d["plugins"][1] = Value::from("ipam-cni")),
            ConflistError::BadPlugin { index: 1 }
        ));
        assert!(matches!(
            refused(|d| d["plugins"][0]["ipam"]["type"] = Value::from("host-local")),
            ConflistError::NoIpamCni
        ));
    }

    #[test]
    fn the_agents_files_are_told_from_other_networks() {
        let single = r#"{"cniVersion": "1.0.0", "name": "ipam", "type": "ptp",
                         "ipam": {"type": "ipam-cni"}}"#;
        let aws = r#"{"cniVersion": "0.4.0", "name": "aws-cni", "plugins": [
                        {"type": "aws-cni", "name": "aws-cni"},
                        {"type": "egress-cni", "ipam": {"type": "host-local"}}]}"#;
        for (bytes, agents) in [
            (GOOD, true),
            (single, true),
            (aws, false),
            (
                r#"{"type": "bridge", "ipam": {"type": "host-local"}}"#,
                false,
            ),
            ("not json", false),
            ("[]", false),
        ] {
            assert_eq!(is_agents(bytes.as_bytes()), agents, "{bytes}");
        }
    }

    #[test]
    fn a_single_plugin_conf_is_not_a_list() {
        // The `.conf` form: one plugin at the top level, no `plugins`.
        let conf = r#"{"cniVersion": "1.0.0", "name": "ipam", "type": "ptp",
                       "ipam": {"type": "ipam-cni"}}"#;
        assert!(matches!(
            check(conf.as_bytes()),
            Err(ConflistError::NoPluginList)
        ));
    }
}
