//! How another writer of the CiliumNode fields the operator owns is looked
//! for (`ipam_k8s::other_writers`): the window after another manager's
//! change, the managers that never count, and how often Cilium's operator
//! is read. Where Cilium's operator runs is `--cilium-pod-namespace`.

use std::collections::BTreeSet;
use std::time::Duration;

use clap::Args;
use ipam_k8s::other_writers::managed_fields::WriterRules;
use ipam_k8s::other_writers::OtherWriterSettings;

#[derive(Args, Debug, Clone)]
pub struct OtherWriterArgs {
    /// Seconds after another field manager last changed a CiliumNode's
    /// spec.ipam.pool, status.eni or status.azure during which the engine
    /// does not write (two writers would fight); 0 looks only at Cilium's
    /// operator's Lease.
    #[arg(long, env = "IPAM_OTHER_WRITER_WINDOW_SECONDS", default_value_t = 120)]
    pub other_writer_window_seconds: u64,
    /// Field managers whose changes of those fields are not another
    /// writer's (cilium-agent sets them when it creates a node).
    #[arg(
        long = "other-writer-ignore-managers",
        env = "IPAM_OTHER_WRITER_IGNORE_MANAGERS",
        value_delimiter = ',',
        value_name = "MANAGER",
        default_value = "cilium-agent"
    )]
    pub other_writer_ignore_managers: Vec<String>,
    /// Seconds between reads of Cilium's operator's Lease (with
    /// cilium-config and its Deployment while the Lease is held), and
    /// between looks at every node's window.
    #[arg(
        long,
        env = "IPAM_OTHER_WRITER_POLL_SECONDS",
        default_value_t = 5,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub other_writer_poll_seconds: u64,
}

impl OtherWriterArgs {
    /// The settings for an operator writing as `own_manager`, Cilium's
    /// operator looked for in `cilium_namespace`.
    pub fn settings(&self, own_manager: &str, cilium_namespace: &str) -> OtherWriterSettings {
        let ignored: BTreeSet<String> = self
            .other_writer_ignore_managers
            .iter()
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty())
            .collect();
        OtherWriterSettings {
            rules: WriterRules {
                own_manager: own_manager.to_string(),
                ignored,
                window: Duration::from_secs(self.other_writer_window_seconds),
            },
            poll_interval: Duration::from_secs(self.other_writer_poll_seconds),
            cilium_namespace: cilium_namespace.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: OtherWriterArgs,
    }

    #[test]
    fn defaults_and_flags() {
        let defaults = Command::try_parse_from(["x"]).unwrap().args;
        let settings = defaults.settings("ipam-operator", "kube-system");
        assert_eq!(settings.rules.window, Duration::from_secs(120));
        assert_eq!(
            settings.rules.ignored,
            BTreeSet::from(["cilium-agent".to_string()])
        );
        assert_eq!(settings.rules.own_manager, "ipam-operator");
        assert_eq!(settings.poll_interval, Duration::from_secs(5));
        assert_eq!(settings.cilium_namespace, "kube-system");
        let parsed = Command::try_parse_from([
            "x",
            "--other-writer-window-seconds=30",
            "--other-writer-ignore-managers=cilium-agent, kubectl-edit,",
            "--other-writer-poll-seconds=1",
        ])
        .unwrap()
        .args
        .settings("me", "cilium");
        assert_eq!(parsed.rules.window, Duration::from_secs(30));
        assert_eq!(
            parsed.rules.ignored,
            BTreeSet::from(["cilium-agent".to_string(), "kubectl-edit".to_string()])
        );
        let error = Command::try_parse_from(["x", "--other-writer-poll-seconds=0"])
            .err()
            .expect("0 s between polls is refused")
            .to_string();
        assert!(error.contains("--other-writer-poll-seconds"), "{error}");
    }
}
