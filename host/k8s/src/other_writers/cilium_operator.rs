//! Whether Cilium's own operator allocates: its leader holds its Lease
//! (`cilium-operator-resource-lock`, renewed within its duration) and its
//! IPAM mode is `eni` or `azure`: the `--ipam` its Deployment
//! (`cilium-operator`) passes on the command line, else the `ipam` key of
//! the `cilium-config` ConfigMap (Cilium's default, `cluster-pool`, when
//! the key is absent). An object that is absent (or that this operator may
//! not read) means Cilium's operator is not running. Cilium's IPAM skips a
//! CiliumNode annotated `ipam.cilium.io/ignore: "true"`, so it writes none
//! of that node's fields.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::jiff::Timestamp;

/// The annotation of a CiliumNode Cilium's IPAM leaves alone.
pub const IGNORE_ANNOTATION: &str = "ipam.cilium.io/ignore";

/// Whether Cilium's IPAM skips a node with these annotations (the value
/// `true`, in any case, as Cilium compares it).
pub fn skipped_by_cilium(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(IGNORE_ANNOTATION))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The Lease Cilium's operator elects its leader with.
pub const LEASE: &str = "cilium-operator-resource-lock";
/// Cilium's configuration.
pub const CONFIG_MAP: &str = "cilium-config";
/// Cilium's operator.
pub const DEPLOYMENT: &str = "cilium-operator";
/// The key of cilium-config (and the flag) naming the IPAM mode.
const IPAM_KEY: &str = "ipam";
/// Cilium's IPAM mode when none is set.
const DEFAULT_MODE: &str = "cluster-pool";
/// The modes in which Cilium's operator writes what this operator writes.
const ALLOCATING_MODES: [&str; 2] = ["eni", "azure"];
/// client-go's lease duration, for a Lease that does not say its own.
const DEFAULT_LEASE_SECONDS: i64 = 15;

/// What was read of Cilium's operator; `None`: absent (or not readable).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CiliumView {
    pub lease: Option<LeaseSpec>,
    /// cilium-config's data.
    pub config: Option<BTreeMap<String, String>>,
    /// The command line (command, then args) of each container of
    /// cilium-operator's pod template.
    pub deployment: Option<Vec<Vec<String>>>,
}

/// Where the IPAM mode came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeSource {
    /// `--ipam` on the Deployment's command line.
    Flag,
    /// cilium-config's `ipam` key.
    Config,
    /// Neither: Cilium's default.
    Default,
}

/// The judgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CiliumOperator {
    /// Its leader holds the Lease and its IPAM allocates in `mode`.
    Allocating { holder: String, mode: String },
    /// Not running, or running with its allocation off.
    Quiet(Quiet),
}

/// Why Cilium's operator is not another writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quiet {
    NoLease,
    /// Released, or not renewed within its duration.
    LeaseNotHeld,
    NoConfigMap,
    NoDeployment,
    /// Its IPAM mode is not one that allocates on interfaces.
    Mode {
        mode: String,
        from: ModeSource,
    },
}

impl std::fmt::Display for Quiet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Quiet::NoLease => write!(f, "no Lease {LEASE}"),
            Quiet::LeaseNotHeld => write!(f, "Lease {LEASE} not held"),
            Quiet::NoConfigMap => write!(f, "no ConfigMap {CONFIG_MAP}"),
            Quiet::NoDeployment => write!(f, "no Deployment {DEPLOYMENT}"),
            Quiet::Mode { mode, from } => {
                let from = match from {
                    ModeSource::Flag => "its --ipam",
                    ModeSource::Config => "cilium-config's ipam",
                    ModeSource::Default => "Cilium's default",
                };
                write!(f, "IPAM mode {mode} ({from})")
            }
        }
    }
}

/// The holder of a Lease renewed within its duration of `now`, if any.
pub fn lease_holder(spec: &LeaseSpec, now: Timestamp) -> Option<String> {
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?;
    let seconds = spec
        .lease_duration_seconds
        .map_or(DEFAULT_LEASE_SECONDS, i64::from);
    let expires = renewed.0.as_millisecond() + seconds * 1000;
    (now.as_millisecond() < expires).then_some(holder)
}

/// The last `--ipam` of a command line (`--ipam=eni` or `--ipam eni`), as
/// Go's flag parsing takes the last.
pub fn ipam_flag(command_line: &[String]) -> Option<String> {
    let mut mode = None;
    let mut words = command_line.iter();
    while let Some(word) = words.next() {
        let flag = word.trim_start_matches('-');
        if word.len() - flag.len() == 0 || word.len() - flag.len() > 2 {
            continue;
        }
        if let Some(value) = flag.strip_prefix("ipam=") {
            mode = Some(value.to_string());
        } else if flag == IPAM_KEY {
            mode = words.next().cloned().or(mode);
        }
    }
    mode
}

/// Whether Cilium's operator, as `view` shows it at `now`, allocates.
pub fn judge(view: &CiliumView, now: Timestamp) -> CiliumOperator {
    let Some(lease) = &view.lease else {
        return CiliumOperator::Quiet(Quiet::NoLease);
    };
    let Some(holder) = lease_holder(lease, now) else {
        return CiliumOperator::Quiet(Quiet::LeaseNotHeld);
    };
    let Some(config) = &view.config else {
        return CiliumOperator::Quiet(Quiet::NoConfigMap);
    };
    let Some(containers) = &view.deployment else {
        return CiliumOperator::Quiet(Quiet::NoDeployment);
    };
    let flag = containers.iter().filter_map(|c| ipam_flag(c)).next_back();
    let (mode, from) = match (flag, config.get(IPAM_KEY)) {
        (Some(mode), _) => (mode, ModeSource::Flag),
        (None, Some(mode)) => (mode.clone(), ModeSource::Config),
        (None, None) => (DEFAULT_MODE.to_string(), ModeSource::Default),
    };
    let mode = mode.trim().to_string();
    match ALLOCATING_MODES.contains(&mode.as_str()) {
        true => CiliumOperator::Allocating { holder, mode },
        false => CiliumOperator::Quiet(Quiet::Mode { mode, from }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a time")
    }

    fn lease(holder: &str, renewed: &str, seconds: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(at(renewed))),
            lease_duration_seconds: seconds,
            ..LeaseSpec::default()
        }
    }

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    /// As Cilium's chart deploys it: the mode in cilium-config, the
    /// command line naming only the config dir.
    fn cilium(ipam: Option<&str>, command: &str) -> CiliumView {
        CiliumView {
            lease: Some(lease(
                "ip-10-0-1-17.ec2.internal-tqg5xlmnbc",
                "2025-03-01T10:00:00.000000Z",
                Some(15),
            )),
            config: Some(
                ipam.map(|mode| (IPAM_KEY.to_string(), mode.to_string()))
                    .into_iter()
                    .collect(),
            ),
            deployment: Some(vec![words(command)]),
        }
    }

    const CHART: &str =
        "cilium-operator-aws --config-dir=/tmp/cilium/config-map --debug=$(CILIUM_DEBUG)";

    #[test]
    fn a_held_lease_and_an_allocating_mode_is_another_writer() {
        let now = at("2025-03-01T10:00:10Z");
        let table: [(CiliumView, CiliumOperator); 7] = [
            (
                cilium(Some("eni"), CHART),
                CiliumOperator::Allocating {
                    holder: "ip-10-0-1-17.ec2.internal-tqg5xlmnbc".into(),
                    mode: "eni".into(),
                },
            ),
            (
                cilium(Some("azure"), "cilium-operator-azure --config-dir=/tmp"),
                CiliumOperator::Allocating {
                    holder: "ip-10-0-1-17.ec2.internal-tqg5xlmnbc".into(),
                    mode: "azure".into(),
                },
            ),
            // Its other duties kept, its IPAM off on the command line.
            (
                cilium(Some("eni"), "cilium-operator-generic --ipam=kubernetes"),
                CiliumOperator::Quiet(Quiet::Mode {
                    mode: "kubernetes".into(),
                    from: ModeSource::Flag,
                }),
            ),
            (
                cilium(Some("eni"), "cilium-operator-generic --ipam kubernetes"),
                CiliumOperator::Quiet(Quiet::Mode {
                    mode: "kubernetes".into(),
                    from: ModeSource::Flag,
                }),
            ),
            (
                cilium(
                    Some("kubernetes"),
                    "cilium-operator --ipam=kubernetes --ipam=eni",
                ),
                CiliumOperator::Allocating {
                    holder: "ip-10-0-1-17.ec2.internal-tqg5xlmnbc".into(),
                    mode: "eni".into(),
                },
            ),
            (
                cilium(Some("cluster-pool"), CHART),
                CiliumOperator::Quiet(Quiet::Mode {
                    mode: "cluster-pool".into(),
                    from: ModeSource::Config,
                }),
            ),
            (
                cilium(None, CHART),
                CiliumOperator::Quiet(Quiet::Mode {
                    mode: "cluster-pool".into(),
                    from: ModeSource::Default,
                }),
            ),
        ];
        for (view, want) in table {
            assert_eq!(judge(&view, now), want, "{view:?}");
        }
    }

    #[test]
    fn anything_absent_or_a_lease_not_renewed_in_time_is_quiet() {
        let now = at("2025-03-01T10:00:10Z");
        let running = cilium(Some("eni"), CHART);
        let quiet = |view: CiliumView| match judge(&view, now) {
            CiliumOperator::Quiet(why) => why,
            other => panic!("{other:?} for {view:?}"),
        };
        assert_eq!(
            quiet(CiliumView {
                lease: None,
                ..running.clone()
            }),
            Quiet::NoLease
        );
        assert_eq!(
            quiet(CiliumView {
                config: None,
                ..running.clone()
            }),
            Quiet::NoConfigMap
        );
        assert_eq!(
            quiet(CiliumView {
                deployment: None,
                ..running.clone()
            }),
            Quiet::NoDeployment
        );
        for spec in [
            // Renewed 15 s ago with a 15 s duration: expired.
            lease("a", "2025-03-01T09:59:55Z", Some(15)),
            // No duration: client-go's 15 s.
            lease("a", "2025-03-01T09:59:55Z", None),
            // Handed back on a clean shutdown.
            LeaseSpec {
                holder_identity: None,
                ..lease("", "2025-03-01T10:00:09Z", Some(1))
            },
            lease("", "2025-03-01T10:00:09Z", Some(15)),
            LeaseSpec {
                renew_time: None,
                ..lease("a", "2025-03-01T10:00:09Z", Some(15))
            },
        ] {
            let view = CiliumView {
                lease: Some(spec.clone()),
                ..running.clone()
            };
            assert_eq!(quiet(view), Quiet::LeaseNotHeld, "{spec:?}");
        }
        let renewed_recently = lease("a", "2025-03-01T09:59:55.001Z", Some(15));
        assert_eq!(lease_holder(&renewed_recently, now).as_deref(), Some("a"));
        assert_eq!(
            Quiet::Mode {
                mode: "kubernetes".into(),
                from: ModeSource::Flag
            }
            .to_string(),
            "IPAM mode kubernetes (its --ipam)"
        );
    }

    #[test]
    fn a_node_annotated_ignore_true_is_skipped_by_ciliums_ipam() {
        let annotated =
            |value: &str| BTreeMap::from([(IGNORE_ANNOTATION.to_string(), value.to_string())]);
        assert!(skipped_by_cilium(Some(&annotated("true"))));
        assert!(skipped_by_cilium(Some(&annotated("True"))));
        assert!(!skipped_by_cilium(Some(&annotated("false"))));
        assert!(!skipped_by_cilium(Some(&annotated(""))));
        assert!(!skipped_by_cilium(Some(&BTreeMap::new())));
        assert!(!skipped_by_cilium(None));
    }

    #[test]
    fn the_ipam_flag_is_read_in_either_form_and_nothing_else_is_taken_for_it() {
        let table = [
            ("cilium-operator-aws --ipam=eni", Some("eni")),
            ("cilium-operator-aws -ipam=eni", Some("eni")),
            ("cilium-operator-aws --ipam eni --debug", Some("eni")),
            ("cilium-operator --ipam-mode=eni --ipam-x eni", None),
            ("cilium-operator ---ipam=eni", None),
            ("cilium-operator ipam=eni", None),
            ("cilium-operator --ipam", None),
            ("", None),
        ];
        for (line, want) in table {
            assert_eq!(ipam_flag(&words(line)).as_deref(), want, "{line}");
        }
    }
}
