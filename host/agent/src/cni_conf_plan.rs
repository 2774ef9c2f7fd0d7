//! What the agent does with the node's CNI configuration directory, as
//! plain data: given the directory's configuration files (each already
//! classified as this agent's or another network's) and the conflist the
//! agent installs, whether it writes its conflist, which files of its own
//! it removes, and what it reports.
//!
//! The order rule: a container runtime (containerd's and CRI-O's CNI
//! loading, libcni's `ConfFiles`) reads the `*.conf`, `*.conflist` and
//! `*.json` files of the directory, sorts their names byte by byte and uses
//! the first. So a conflist is the node's network only while its name
//! sorts before every other configuration file there.
//!
//! - Another network's file present (aws-node's `10-aws.conflist`, Azure
//!   CNI's `10-azure.conflist`, ...) and no take-over: nothing is written,
//!   and any conflist of this agent's found there (an older version's, or
//!   one left by an earlier take-over) is removed, so the other network
//!   stays the node's.
//! - Take-over: the agent's conflist is written only if its name sorts
//!   before every other network's file; otherwise nothing changes and the
//!   name to choose is reported.
//! - Otherwise the conflist is written (unless the same bytes are already
//!   there), and files of this agent's under other names (a renamed
//!   conflist) are removed.

/// A configuration file in the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfFile {
    pub name: String,
    pub kind: ConfKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfKind {
    /// This agent's (its IPAM is `ipam-cni`), with the same bytes as the
    /// conflist the agent installs or not.
    Ours { same: bool },
    /// Any other file a runtime would read (another network's, or one that
    /// is not even JSON: the runtime would still try it).
    Other,
}

/// What the agent reports about its conflist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfVerdict {
    /// Written now.
    Installed,
    /// Already there, byte for byte.
    Unchanged,
    /// Another network's configuration is there and take-over is off.
    OtherNetwork { others: Vec<String> },
    /// Take-over is on but the agent's name does not sort first.
    NotFirst { ours: String, first_other: String },
}

impl ConfVerdict {
    /// The state's label (`ipam_agent_cni_conflist{state}`).
    pub fn state(&self) -> &'static str {
        match self {
            ConfVerdict::Installed | ConfVerdict::Unchanged => "installed",
            ConfVerdict::OtherNetwork { .. } => "other_network",
            ConfVerdict::NotFirst { .. } => "not_first",
        }
    }
}

/// Every state the metric shows, the errors' included.
pub const STATES: &[&str] = &["installed", "other_network", "not_first", "failed"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfPlan {
    /// Write the agent's conflist under its name.
    pub write: bool,
    /// Files of the agent's own to remove, by name.
    pub remove: Vec<String>,
    pub verdict: ConfVerdict,
}

/// Whether a file name is one a runtime reads as a network configuration.
pub fn is_config_name(name: &str) -> bool {
    [".conf", ".conflist", ".json"]
        .iter()
        .any(|extension| name.len() > extension.len() && name.ends_with(extension))
}

/// The plan for installing the conflist `ours` over `files` (the
/// directory's configuration files).
pub fn plan(files: &[ConfFile], ours: &str, take_over: bool) -> ConfPlan {
    let mut others: Vec<String> = files
        .iter()
        .filter(|f| f.kind == ConfKind::Other)
        .map(|f| f.name.clone())
        .collect();
    // The runtime's order: byte by byte.
    others.sort();
    let own_files = files
        .iter()
        .filter(|f| matches!(f.kind, ConfKind::Ours { .. }));
    if !others.is_empty() && !take_over {
        return ConfPlan {
            write: false,
            remove: own_files.map(|f| f.name.clone()).collect(),
            verdict: ConfVerdict::OtherNetwork { others },
        };
    }
    if let Some(first_other) = others.first() {
        if first_other.as_bytes() <= ours.as_bytes() {
            return ConfPlan {
                write: false,
                remove: Vec::new(),
                verdict: ConfVerdict::NotFirst {
                    ours: ours.to_string(),
                    first_other: first_other.clone(),
                },
            };
        }
    }
    let unchanged = files
        .iter()
        .any(|f| f.name == ours && f.kind == ConfKind::Ours { same: true });
    ConfPlan {
        write: !unchanged,
        remove: own_files
            .filter(|f| f.name != ours)
            .map(|f| f.name.clone())
            .collect(),
        verdict: if unchanged {
            ConfVerdict::Unchanged
        } else {
            ConfVerdict::Installed
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &str = "05-ipam.conflist";

    fn ours(name: &str, same: bool) -> ConfFile {
        ConfFile {
            name: name.into(),
            kind: ConfKind::Ours { same },
        }
    }

    fn other(name: &str) -> ConfFile {
        ConfFile {
            name: name.into(),
            kind: ConfKind::Other,
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_plans_in_each_case() {
        let cases: Vec<(&str, Vec<ConfFile>, bool, ConfPlan)> = vec![
            (
                "an empty directory",
                vec![],
                false,
                ConfPlan {
                    write: true,
                    remove: vec![],
                    verdict: ConfVerdict::Installed,
                },
            ),
            (
                "ours already there, same bytes",
                vec![ours(OURS, true)],
                false,
                ConfPlan {
                    write: false,
                    remove: vec![],
                    verdict: ConfVerdict::Unchanged,
                },
            ),
            (
                "ours there, other bytes; an old name of ours",
                vec![ours(OURS, false), ours("00-ipam.conflist", false)],
                false,
                ConfPlan {
                    write: true,
                    remove: names(&["00-ipam.conflist"]),
                    verdict: ConfVerdict::Installed,
                },
            ),
            (
                "aws-node's network, no take-over: ours (an older install) goes",
                vec![other("10-aws.conflist"), ours(OURS, true)],
                false,
                ConfPlan {
                    write: false,
                    remove: names(&[OURS]),
                    verdict: ConfVerdict::OtherNetwork {
                        others: names(&["10-aws.conflist"]),
                    },
                },
            ),
            (
                "Azure CNI's and a broken file, no take-over",
                vec![other("10-azure.conflist"), other("01-broken.conf")],
                false,
                ConfPlan {
                    write: false,
                    remove: vec![],
                    verdict: ConfVerdict::OtherNetwork {
                        others: names(&["01-broken.conf", "10-azure.conflist"]),
                    },
                },
            ),
            (
                "take-over, ours sorts first",
                vec![other("10-aws.conflist")],
                true,
                ConfPlan {
                    write: true,
                    remove: vec![],
                    verdict: ConfVerdict::Installed,
                },
            ),
            (
                "take-over, another sorts first",
                vec![other("00-loopback.conf"), other("10-aws.conflist")],
                true,
                ConfPlan {
                    write: false,
                    remove: vec![],
                    verdict: ConfVerdict::NotFirst {
                        ours: OURS.into(),
                        first_other: "00-loopback.conf".into(),
                    },
                },
            ),
            (
                "take-over, byte order: digits sort before upper-case letters",
                vec![other("A-net.conflist")],
                true,
                ConfPlan {
                    write: true,
                    remove: vec![],
                    verdict: ConfVerdict::Installed,
                },
            ),
            (
                "take-over, same name as another network's file",
                vec![other(OURS)],
                true,
                ConfPlan {
                    write: false,
                    remove: vec![],
                    verdict: ConfVerdict::NotFirst {
                        ours: OURS.into(),
                        first_other: OURS.into(),
                    },
                },
            ),
        ];
        for (what, files, take_over, expected) in cases {
            assert_eq!(plan(&files, OURS, take_over), expected, "{what}");
        }
    }

    #[test]
    fn config_names_are_those_a_runtime_reads() {
        for name in [
            "10-aws.conflist",
            "87-podman.conf",
            "x.json",
            ".hidden.conf",
        ] {
            assert!(is_config_name(name), "{name}");
        }
        for name in [
            ".05-ipam.conflist.new",
            "README",
            "conf",
            ".conf",
            "x.conflist.bak",
        ] {
            assert!(!is_config_name(name), "{name}");
        }
    }
}
