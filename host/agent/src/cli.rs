//! The command line: every flag has an environment variable, as a
//! DaemonSet sets them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use ipam_logging::{LogFormat, LogLevel};
use ipnet::Ipv4Net;

use crate::install_cni::InstallCniArgs;
use crate::register::{InterfaceSelection, Watermarks};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CloudArg {
    /// EC2: facts from IMDSv2, spec.eni.
    Aws,
    /// Azure: facts from the Azure instance metadata service, spec.azure.
    Azure,
    /// No metadata service: the instance id from --instance-id, else
    /// from the Node's spec.providerID; other facts from the flags and the
    /// Node.
    None,
}

/// The node agent: registers this node's CiliumNode, hands pod addresses out
/// of its pool to the `ipam-cni` plugin, answers the release handshake and
/// routes the addresses of secondary interfaces. With `install-cni`, puts
/// the plugin and the network configuration into the node's CNI directories
/// instead (the DaemonSet's init container).
#[derive(Debug, Parser)]
#[command(
    name = "ipam-agent",
    version,
    about = "The node agent: registers this node's CiliumNode and hands pod addresses out of its pool to the ipam-cni plugin",
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
pub struct Agent {
    #[command(subcommand)]
    pub command: Option<AgentCommand>,
    /// The agent's flags, present when no subcommand is given.
    #[command(flatten)]
    pub run: Option<Cli>,
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Install the ipam-cni plugin and the network configuration list into
    /// the node's CNI directories, each written beside its target and
    /// renamed over it; a bad conflist is refused and nothing is written.
    InstallCni(InstallCniArgs),
}

/// The agent's own flags (`ipam-agent` with no subcommand).
#[derive(Debug, Parser)]
#[command(name = "ipam-agent")]
pub struct Cli {
    /// This node's name (the downward API's spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// Where the instance's facts come from, and which spec the CiliumNode
    /// gets (spec.eni or spec.azure).
    #[arg(long, env = "IPAM_CLOUD", value_enum, default_value_t = CloudArg::None)]
    pub cloud: CloudArg,
    /// The instance metadata service.
    #[arg(
        long,
        env = "IPAM_IMDS_ENDPOINT",
        default_value = "http://169.254.169.254"
    )]
    pub imds_endpoint: String,
    /// The instance's id (spec.instance-id), instead of the metadata
    /// service's or the Node's spec.providerID (which are used without it).
    #[arg(long, env = "IPAM_INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// The instance type (spec.eni.instance-type), instead of the metadata
    /// service's.
    #[arg(long, env = "IPAM_INSTANCE_TYPE")]
    pub instance_type: Option<String>,
    /// The availability zone (spec.eni.availability-zone), instead of the
    /// metadata service's.
    #[arg(long, env = "IPAM_AVAILABILITY_ZONE")]
    pub availability_zone: Option<String>,
    /// The VPC or VNet (spec.eni.vpc-id), instead of the metadata
    /// service's.
    #[arg(long, env = "IPAM_VPC_ID")]
    pub vpc_id: Option<String>,
    /// The subnet of the node's primary interface (spec.eni.node-subnet-id),
    /// instead of the metadata service's.
    #[arg(long, env = "IPAM_NODE_SUBNET_ID")]
    pub node_subnet_id: Option<String>,
    /// spec.eni.first-interface-index: the first device index the operator
    /// may put pool addresses on.
    #[arg(long, env = "IPAM_ENI_FIRST_INTERFACE_INDEX")]
    pub eni_first_interface_index: Option<u32>,
    /// Subnets for new interfaces (comma-separated ids).
    #[arg(long, env = "IPAM_ENI_SUBNET_IDS", value_delimiter = ',')]
    pub eni_subnet_ids: Vec<String>,
    /// Subnets for new interfaces, by tag (K=V,...).
    #[arg(long, env = "IPAM_ENI_SUBNET_TAGS", value_parser = parse_tags, default_value = "")]
    pub eni_subnet_tags: Tags,
    /// Security groups of new interfaces (comma-separated ids).
    #[arg(long, env = "IPAM_ENI_SECURITY_GROUP_IDS", value_delimiter = ',')]
    pub eni_security_group_ids: Vec<String>,
    /// Security groups of new interfaces, by tag (K=V,...).
    #[arg(long, env = "IPAM_ENI_SECURITY_GROUP_TAGS", value_parser = parse_tags, default_value = "")]
    pub eni_security_group_tags: Tags,
    /// spec.ipam.pre-allocate: free addresses the operator keeps in the
    /// pool; unset: the operator's default.
    #[arg(long, env = "IPAM_PRE_ALLOCATE")]
    pub pre_allocate: Option<u32>,
    /// spec.ipam.min-allocate: addresses the pool never goes below.
    #[arg(long, env = "IPAM_MIN_ALLOCATE")]
    pub min_allocate: Option<u32>,
    /// spec.ipam.max-allocate: addresses the pool never goes above.
    #[arg(long, env = "IPAM_MAX_ALLOCATE")]
    pub max_allocate: Option<u32>,
    /// spec.ipam.max-above-watermark: addresses allocated beyond the
    /// pre-allocation when the pool grows.
    #[arg(long, env = "IPAM_MAX_ABOVE_WATERMARK")]
    pub max_above_watermark: Option<u32>,
    /// Where the allocations are saved: on a hostPath, so they survive the
    /// agent's pod, and by default under /run, so they last as long as the
    /// boot whose pod network namespaces they describe (as cilium-agent's
    /// /var/run/cilium and aws-node's /var/run/aws-node do).
    #[arg(
        long,
        env = "IPAM_AGENT_STATE_DIR",
        default_value = "/run/ipam-agent/state"
    )]
    pub state_dir: PathBuf,
    /// The unix socket the `ipam-cni` plugin asks.
    #[arg(
        long,
        env = "IPAM_AGENT_SOCKET",
        default_value = "/run/ipam-agent/agent.sock"
    )]
    pub socket: PathBuf,
    /// /healthz, /readyz and /metrics.
    #[arg(long, env = "IPAM_AGENT_LISTEN", default_value = "0.0.0.0:9964")]
    pub listen: SocketAddr,
    /// Install the policy routes of secondary-interface addresses.
    #[arg(long, env = "IPAM_AGENT_ROUTING", default_value_t = true, action = clap::ArgAction::Set)]
    pub routing: bool,
    /// The datapath's eBPF object (`cargo xtask ebpf`); no datapath when
    /// unset.
    #[arg(long, env = "IPAM_AGENT_DATAPATH_OBJECT", value_name = "PATH")]
    pub datapath_object: Option<PathBuf>,
    /// Where bpffs is (mounted there if it is not); the datapath pins under
    /// `<bpffs>/ipam-agent`.
    #[arg(long, env = "IPAM_AGENT_BPFFS", default_value = "/sys/fs/bpf")]
    pub bpffs: PathBuf,
    /// How often the host's addresses are synced into the datapath's
    /// endpoint map after start-up.
    #[arg(long, env = "IPAM_AGENT_HOST_ADDRESS_SYNC_SECS", default_value_t = 60)]
    pub host_address_sync_secs: u64,
    /// At most one status patch per this many milliseconds.
    #[arg(long, env = "IPAM_AGENT_STATUS_INTERVAL_MS", default_value_t = 250)]
    pub status_interval_ms: u64,
    /// The network configuration list the agent installs into
    /// --cni-conf-dir once its socket serves (from the agent's ConfigMap;
    /// named NAME.conflist); unset: the agent installs none.
    #[arg(long, env = "IPAM_CNI_CONFLIST", value_name = "FILE")]
    pub cni_conflist: Option<PathBuf>,
    /// The node's CNI configuration directory (the runtime uses the first
    /// configuration file there in byte order of the names).
    #[arg(
        long,
        env = "IPAM_CNI_CONF_DIR",
        value_name = "DIR",
        default_value = "/etc/cni/net.d"
    )]
    pub cni_conf_dir: PathBuf,
    /// Install the conflist even where another network's configuration is
    /// in --cni-conf-dir (its name must then sort before theirs); off: the
    /// agent leaves another network in place and installs nothing.
    #[arg(long, env = "IPAM_CNI_TAKE_OVER", default_value_t = false, action = clap::ArgAction::Set)]
    pub cni_take_over: bool,
    /// The node's CNI plugin directory, where the init container installs
    /// ipam-cni: the agent removes the plugin from it when it is
    /// uninstalled. Unset: the plugin is left alone.
    #[arg(long, env = "IPAM_CNI_BIN_DIR", value_name = "DIR")]
    pub cni_bin_dir: Option<PathBuf>,
    /// Masquerade pod traffic to destinations outside the VPC (VNet) and
    /// --snat-exclude-cidrs, as the node's address. Unset: on with
    /// --cloud=aws or azure, off with none.
    #[arg(long, env = "IPAM_AGENT_SNAT", action = clap::ArgAction::Set)]
    pub snat: Option<bool>,
    /// Destinations (comma-separated IPv4 CIDRs) that keep the pod's
    /// address besides the VPC's own ranges: peered VPCs, on-premises
    /// networks, and on Azure the VNet's address space.
    #[arg(
        long,
        env = "IPAM_AGENT_SNAT_EXCLUDE_CIDRS",
        value_delimiter = ',',
        value_name = "CIDRS"
    )]
    pub snat_exclude_cidrs: Vec<Ipv4Net>,
    /// The agent's pod name (the downward API's metadata.name): at SIGTERM
    /// its owner DaemonSet tells a restart, which keeps everything, from an
    /// uninstall, which removes what the agent put on the node. Unset:
    /// always a restart.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// The agent's pod namespace (the downward API's metadata.namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// A kubeconfig file; otherwise the in-cluster configuration.
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Log format on stderr: text, or one JSON object per line. A fatal
    /// error is logged in it whatever the level.
    #[arg(long, env = "IPAM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level: trace, debug, info, warn, error or off, or directives
    /// TARGET=LEVEL separated by commas (info,ipam_agent=debug); anything
    /// else is refused.
    #[arg(long, env = "IPAM_LOG", default_value = DEFAULT_LOG_LEVEL)]
    pub log_level: LogLevel,
    /// Tests only: pause this long after saving an allocation and before
    /// answering, so a crash test can kill the agent in that window.
    #[arg(long, env = "IPAM_AGENT_TEST_PAUSE_AFTER_SAVE_MS", hide = true)]
    pub test_pause_after_save_ms: Option<u64>,
}

/// The level when neither `--log-level` nor `IPAM_LOG` says one.
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// Tags as K=V pairs.
pub type Tags = BTreeMap<String, String>;

fn parse_tags(text: &str) -> Result<Tags, String> {
    text.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => {
                Ok((key.trim().to_string(), value.trim().to_string()))
            }
            _ => Err(format!("{pair:?} is not KEY=VALUE")),
        })
        .collect()
}

impl Cli {
    pub fn interfaces(&self) -> InterfaceSelection {
        InterfaceSelection {
            first_interface_index: self.eni_first_interface_index,
            subnet_ids: self.eni_subnet_ids.clone(),
            subnet_tags: self.eni_subnet_tags.clone(),
            security_group_ids: self.eni_security_group_ids.clone(),
            security_group_tags: self.eni_security_group_tags.clone(),
        }
    }

    /// Whether pod traffic leaving the VPC is masqueraded.
    pub fn snat_enabled(&self) -> bool {
        self.snat.unwrap_or(self.cloud != CloudArg::None)
    }

    pub fn watermarks(&self) -> Watermarks {
        Watermarks {
            pre_allocate: self.pre_allocate,
            min_allocate: self.min_allocate,
            max_allocate: self.max_allocate,
            max_above_watermark: self.max_above_watermark,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_bad_values_are_refused() {
        let cli = Cli::try_parse_from([
            "ipam-agent",
            "--node-name=n1",
            "--eni-subnet-tags=cluster=a, tier=pods",
            "--eni-security-group-ids=sg-1,sg-2",
        ])
        .unwrap();
        assert_eq!(cli.eni_subnet_tags["tier"], "pods");
        assert_eq!(cli.eni_security_group_ids, ["sg-1", "sg-2"]);
        assert!(cli.routing);
        assert_eq!(cli.datapath_object, None, "no datapath unless asked");
        assert_eq!(cli.bpffs, PathBuf::from("/sys/fs/bpf"));
        assert_eq!(cli.state_dir, PathBuf::from("/run/ipam-agent/state"));
        assert_eq!(cli.log_level.to_string(), DEFAULT_LOG_LEVEL);
        assert!(!cli.snat_enabled(), "off without a cloud");
        assert!(!cli.cni_take_over);
        assert_eq!(cli.cni_conflist, None, "no conflist unless named");
        let aws = |extra: &[&str]| {
            let mut args = vec!["ipam-agent", "--node-name=n1", "--cloud=aws"];
            args.extend_from_slice(extra);
            Cli::try_parse_from(args).unwrap()
        };
        assert!(aws(&[]).snat_enabled(), "on with a cloud");
        assert!(!aws(&["--snat=false"]).snat_enabled());
        assert_eq!(
            aws(&["--snat-exclude-cidrs=192.168.0.0/16,172.16.0.0/12"]).snat_exclude_cidrs,
            [
                "192.168.0.0/16".parse::<Ipv4Net>().unwrap(),
                "172.16.0.0/12".parse().unwrap()
            ]
        );
        for bad in [
            "--eni-subnet-tags=novalue",
            "--cloud=gcp",
            "--log-level=verbose",
            "--log-format=yaml",
            "--snat-exclude-cidrs=10.0.0.0/33",
            "--snat=maybe",
            "--cni-take-over=yes",
        ] {
            assert!(
                Cli::try_parse_from(["ipam-agent", "--node-name=n1", bad]).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_agent_and_install_cni_read_no_variable_in_common() {
        // A variable both read would make clap take `install-cni` in a
        // container that sets it for the agent's flags as the agent itself,
        // and refuse it for want of --node-name.
        use clap::CommandFactory;
        let envs = |command: clap::Command| -> std::collections::BTreeSet<String> {
            command
                .get_arguments()
                .filter_map(|arg| arg.get_env())
                .map(|env| env.to_string_lossy().into_owned())
                .collect()
        };
        let agent = envs(Cli::command());
        use clap::Args;
        let install = envs(crate::install_cni::InstallCniArgs::augment_args(
            clap::Command::new("install-cni"),
        ));
        assert!(install.len() >= 4, "{install:?}");
        let shared: Vec<&String> = agent.intersection(&install).collect();
        assert!(shared.is_empty(), "read by both: {shared:?}");
    }

    #[test]
    fn every_flag_has_help_text() {
        use clap::CommandFactory;
        let mut command = Cli::command();
        command.build();
        let missing: Vec<String> = command
            .get_arguments()
            .filter(|arg| arg.get_help().is_none())
            .map(|arg| arg.get_id().to_string())
            .collect();
        assert!(missing.is_empty(), "flags without help: {missing:?}");
    }
}
