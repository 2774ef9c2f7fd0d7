//! `run`'s flags for the kvstore (etcd) and the duties besides IPAM. With
//! no etcd endpoints (no `--etcd-endpoints` and no `--etcd-config`), the
//! kvstore duties are off; the CiliumEndpoint GC needs only Kubernetes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use ipam_clustermesh::PodLabels;
use ipam_kvstore::config::{identity, EtcdConfig, TlsFiles};
use ipam_kvstore::heartbeat::HeartbeatSettings;
use ipam_kvstore::mesh::{ClusterMesh, MaxConnectedClusters};

#[derive(Args, Debug, Clone)]
pub struct KvstoreArgs {
    /// etcd endpoints (scheme://host:port); the kvstore duties run only
    /// with an etcd.
    #[arg(
        long,
        env = "IPAM_ETCD_ENDPOINTS",
        value_delimiter = ',',
        value_name = "URL"
    )]
    pub etcd_endpoints: Vec<String>,
    /// An etcd config file in Cilium's format (`endpoints`,
    /// `trusted-ca-file`, `cert-file`, `key-file`, `username`,
    /// `password`): the `etcd-config` of Cilium's ConfigMap works as is.
    /// Flags win over it.
    #[arg(long, env = "IPAM_ETCD_CONFIG", value_name = "FILE")]
    pub etcd_config: Option<PathBuf>,
    /// PEM CA that signed etcd's serving certificate.
    #[arg(long, env = "IPAM_ETCD_CA_FILE", value_name = "FILE")]
    pub etcd_ca_file: Option<PathBuf>,
    /// PEM client certificate for etcd (with --etcd-key-file).
    #[arg(long, env = "IPAM_ETCD_CERT_FILE", value_name = "FILE")]
    pub etcd_cert_file: Option<PathBuf>,
    /// PEM private key of --etcd-cert-file.
    #[arg(long, env = "IPAM_ETCD_KEY_FILE", value_name = "FILE")]
    pub etcd_key_file: Option<PathBuf>,
    /// etcd user (with --etcd-password-file).
    #[arg(long, env = "IPAM_ETCD_USERNAME")]
    pub etcd_username: Option<String>,
    /// A file holding the etcd password (a mounted Secret; never a flag).
    #[arg(long, env = "IPAM_ETCD_PASSWORD_FILE", value_name = "FILE")]
    pub etcd_password_file: Option<PathBuf>,
    /// Requests per second the operator sends to etcd.
    #[arg(long, env = "IPAM_ETCD_QPS", default_value_t = 20.0)]
    pub etcd_qps: f64,
    /// Requests sent to etcd at once before --etcd-qps paces them.
    #[arg(long, env = "IPAM_ETCD_BURST", default_value_t = 40)]
    pub etcd_burst: u32,
    /// TTL of the lease the operator's keys are written on (Cilium's
    /// --kvstore-lease-ttl).
    #[arg(long, env = "IPAM_KVSTORE_LEASE_TTL_SECONDS", default_value_t = 900)]
    pub kvstore_lease_ttl_seconds: u64,
    /// TTL of the lease locks are taken on; the lock sweeper runs this
    /// often.
    #[arg(long, env = "IPAM_KVSTORE_LOCK_TTL_SECONDS", default_value_t = 25)]
    pub kvstore_lock_ttl_seconds: u64,

    /// This cluster's id in a cluster mesh (0: none); with a
    /// --cluster-name other than `default`, the CiliumClusterConfig is
    /// written beside the heartbeat.
    #[arg(long, env = "IPAM_CLUSTER_ID", default_value_t = 0)]
    pub cluster_id: u32,
    /// The mesh's size, as every cilium-agent of it has it (Cilium's
    /// --max-connected-clusters): 255 or 511. It bounds --cluster-id, is
    /// written in the CiliumClusterConfig and sets the identity ranges the
    /// identity GC judges.
    #[arg(long, env = "IPAM_MAX_CONNECTED_CLUSTERS", default_value = "255")]
    pub max_connected_clusters: MaxConnectedClusters,
    /// Write `cilium/.heartbeat` every minute.
    #[arg(long, env = "IPAM_KVSTORE_HEARTBEAT", default_value_t = true, action = clap::ArgAction::Set)]
    pub kvstore_heartbeat: bool,
    /// Delete identity lock holders that have not changed for two sweeps
    /// (one every lock lease TTL).
    #[arg(long, env = "IPAM_KVSTORE_LOCK_SWEEPER", default_value_t = true, action = clap::ArgAction::Set)]
    pub kvstore_lock_sweeper: bool,
    /// Delete identities no agent uses, on the second round that finds them
    /// unused (for agents in kvstore identity allocation mode).
    #[arg(long, env = "IPAM_IDENTITY_GC", default_value_t = true, action = clap::ArgAction::Set)]
    pub identity_gc: bool,
    /// Seconds between rounds of the identity GC (Cilium's
    /// --identity-gc-interval).
    #[arg(long, env = "IPAM_IDENTITY_GC_INTERVAL_SECONDS", default_value_t = 900)]
    pub identity_gc_interval_seconds: u64,
    /// Identities deleted per minute at most.
    #[arg(long, env = "IPAM_IDENTITY_GC_RATE_PER_MINUTE", default_value_t = 2500)]
    pub identity_gc_rate_per_minute: u32,
    /// Mirror services annotated service.cilium.io/global into
    /// `cilium/state/services/v1/<cluster>/...` for clustermesh peers.
    #[arg(long, env = "IPAM_SYNCHRONIZE_K8S_SERVICES", default_value_t = true, action = clap::ArgAction::Set)]
    pub synchronize_k8s_services: bool,
    /// Delete this cluster's `cilium/state/nodes/v1` keys whose CiliumNode
    /// is gone, a minute after a sweep first finds them so, and never while
    /// a cilium-agent pod runs on the node.
    #[arg(long, env = "IPAM_SYNCHRONIZE_K8S_NODES", default_value_t = true, action = clap::ArgAction::Set)]
    pub synchronize_k8s_nodes: bool,
    /// The namespace of cilium-agent's pods (Cilium's
    /// --cilium-pod-namespace), also where Cilium's operator, its Lease and
    /// cilium-config are looked for (another writer of the nodes' IPAM
    /// fields); empty: the operator's own.
    #[arg(long, env = "IPAM_CILIUM_POD_NAMESPACE", default_value = "")]
    pub cilium_pod_namespace: String,
    /// cilium-agent's pod labels, key=value[,key=value] (Cilium's
    /// --cilium-pod-labels).
    #[arg(long, env = "IPAM_CILIUM_POD_LABELS", default_value = "k8s-app=cilium")]
    pub cilium_pod_labels: PodLabels,
}

impl KvstoreArgs {
    /// Cilium's namespace: `--cilium-pod-namespace`, else `default` (the
    /// operator's own).
    pub fn cilium_namespace<'a>(&'a self, default: &'a str) -> &'a str {
        match self.cilium_pod_namespace.as_str() {
            "" => default,
            named => named,
        }
    }

    /// Whether an etcd was given at all.
    pub fn enabled(&self) -> bool {
        !self.etcd_endpoints.is_empty() || self.etcd_config.is_some()
    }

    /// The etcd to use: flags, then the config file for what they leave
    /// out; validated.
    pub fn etcd_config(&self) -> anyhow::Result<EtcdConfig> {
        let client = identity(self.etcd_cert_file.clone(), self.etcd_key_file.clone())?;
        let tls = (self.etcd_ca_file.is_some() || client.is_some()).then(|| TlsFiles {
            ca: self.etcd_ca_file.clone(),
            client,
        });
        let password = self
            .etcd_password_file
            .as_deref()
            .map(read_password)
            .transpose()?;
        let mut config = EtcdConfig {
            endpoints: self.etcd_endpoints.clone(),
            tls,
            username: self.etcd_username.clone(),
            password,
            lease_ttl: Duration::from_secs(self.kvstore_lease_ttl_seconds),
            lock_ttl: Duration::from_secs(self.kvstore_lock_ttl_seconds),
            qps: self.etcd_qps,
            burst: self.etcd_burst,
            ..EtcdConfig::default()
        };
        if let Some(path) = &self.etcd_config {
            config = config.merge_cilium_file(path)?;
        }
        config.validate()?;
        Ok(config)
    }

    /// This cluster's id in a mesh of --max-connected-clusters; checked
    /// at start, before etcd is dialled, for every duty.
    pub fn mesh(&self) -> anyhow::Result<ClusterMesh> {
        ClusterMesh::new(self.cluster_id, self.max_connected_clusters)
            .context("--cluster-id and --max-connected-clusters")
    }

    pub fn heartbeat(&self, cluster_name: &str, mesh: ClusterMesh) -> HeartbeatSettings {
        HeartbeatSettings {
            cluster_name: cluster_name.to_string(),
            mesh,
            ..HeartbeatSettings::default()
        }
    }
}

fn read_password(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the etcd password from {}", path.display()))?;
    Ok(text.trim_end_matches(['\r', '\n']).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        kvstore: KvstoreArgs,
    }

    fn parse(args: &[&str]) -> KvstoreArgs {
        Command::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
            .unwrap()
            .kvstore
    }

    #[test]
    fn no_etcd_means_no_kvstore_duties() {
        assert!(!parse(&[]).enabled());
        assert!(parse(&["--etcd-endpoints=http://127.0.0.1:2379"]).enabled());
    }

    #[test]
    fn flags_become_an_etcd_config_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let password = dir.path().join("password");
        std::fs::write(&password, "s3cret\n").unwrap();
        let args = parse(&[
            "--etcd-endpoints=https://etcd-0:2379,https://etcd-1:2379",
            "--etcd-ca-file=/ca.crt",
            "--etcd-username=operator",
            &format!("--etcd-password-file={}", password.display()),
            "--kvstore-lease-ttl-seconds=600",
        ]);
        let config = args.etcd_config().unwrap();
        assert_eq!(config.endpoints.len(), 2);
        assert_eq!(config.password.as_deref(), Some("s3cret"));
        assert_eq!(config.lease_ttl, Duration::from_secs(600));
        assert_eq!(config.tls.unwrap().ca.unwrap(), Path::new("/ca.crt"));

        let half = parse(&["--etcd-endpoints=http://a:1", "--etcd-cert-file=/c"]);
        let error = half.etcd_config().unwrap_err().to_string();
        assert!(error.contains("without the key"), "{error}");
        let scheme = parse(&["--etcd-endpoints=etcd:2379"]);
        let error = scheme.etcd_config().unwrap_err().to_string();
        assert!(error.contains("not http:// or https://"), "{error}");
    }
}
