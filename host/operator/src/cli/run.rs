//! `ipam-operator run`: the operator in a cluster. Every flag has an
//! environment variable; `--config FILE` reads the same keys from YAML
//! (flags and variables win over the file).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use ipam_cloud::rate::BucketConfig;
use ipam_cloud::Tag;
use ipam_clouds::Cloud;
use ipam_duty::DutyMetrics;
use ipam_engine::{CloudProblems, IpamMode, LoopSettings, MaintenanceSettings, Metrics};
use ipam_health_http::startup::Startup;
use ipam_k8s::endpoint_gc::{EndpointGc, EndpointGcSettings};
use ipam_k8s::leader_metrics::LeaderMetrics;
use ipam_k8s::lease::{LeaderElection, LeaseConfig};
use ipam_k8s::operator::Operator;
use ipam_k8s::other_writers::{writing, OtherWriterWatch};
use ipam_kvstore::heartbeat_metrics::HeartbeatMetrics;
use ipam_provider_runtime::host_budget::OverBudget;
use ipam_provider_runtime::{BudgetSink, CallLimits};
use tokio::sync::watch;

use super::ipam_mode::{ipam_mode, IpamModeArg};
use super::kvstore_args::KvstoreArgs;
use super::kvstore_duties;
use super::other_writer_args::OtherWriterArgs;
use super::provider::trust_roots;
use super::registry_args::RegistryArgs;
use super::start::{start, Started};
use crate::duties::Duties;
use crate::rate_flags::{parse_bucket_override, rate_settings};
use crate::serve::{endpoints, serve};
use crate::startup::{readiness, StartStep};

/// The cloud the provider talks to, for its provider's default egress (the
/// rate model is the provider's own declaration).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CloudArg {
    /// A cloud the host does not know: no default egress.
    Generic,
    /// The AWS provider's EC2 endpoint as default egress.
    Aws,
    /// The Azure provider's ARM endpoint (its `arm-endpoint` setting, else
    /// https://management.azure.com) as default egress.
    Azure,
}

impl From<CloudArg> for Cloud {
    fn from(arg: CloudArg) -> Self {
        match arg {
            CloudArg::Generic => Cloud::Generic,
            CloudArg::Aws => Cloud::Aws,
            CloudArg::Azure => Cloud::Azure,
        }
    }
}

/// Where the provider's credentials come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CredentialsSource {
    /// The --provider-credentials file (a mounted Secret), if any.
    File,
    /// The AWS chain resolved by the host: AWS_ACCESS_KEY_ID/SECRET env,
    /// web identity via STS (IRSA), EKS Pod Identity, IMDSv2; refreshed
    /// before expiry.
    Aws,
    /// Entra ID tokens for Azure Resource Manager resolved by the host:
    /// AZURE_CLIENT_SECRET (with AZURE_TENANT_ID, AZURE_CLIENT_ID), workload
    /// identity (AZURE_FEDERATED_TOKEN_FILE), then managed identity through
    /// IMDS; refreshed before expiry.
    Azure,
}

impl CredentialsSource {
    /// What the credentials step does, as /readyz says it.
    pub(super) fn resolving(self) -> &'static str {
        match self {
            CredentialsSource::File => "the --provider-credentials file",
            CredentialsSource::Aws => "resolving the AWS chain",
            CredentialsSource::Azure => "resolving the Azure chain",
        }
    }

    /// The cloud whose chain this is, if any.
    pub(super) fn cloud(self) -> Option<Cloud> {
        match self {
            CredentialsSource::File => None,
            CredentialsSource::Aws => Some(Cloud::Aws),
            CredentialsSource::Azure => Some(Cloud::Azure),
        }
    }
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// A YAML file with any of these flags as keys (`provider: /modules/aws.wasm`).
    #[arg(long, env = "IPAM_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The provider module: a .wasm path, the name of a built component, or
    /// an OCI reference pinned to a digest (oci://REGISTRY/REPO@sha256:HEX).
    #[arg(long, env = "IPAM_PROVIDER", value_name = "MODULE")]
    pub provider: String,
    /// Refuse to start unless the module's sha256 is this (hex): the
    /// module is pinned to a digest like an image.
    #[arg(long, env = "IPAM_PROVIDER_SHA256", value_name = "HEX")]
    pub provider_sha256: Option<String>,
    /// The provider's settings (YAML or JSON), mounted from a ConfigMap.
    #[arg(long, env = "IPAM_PROVIDER_SETTINGS", value_name = "FILE")]
    pub provider_settings: Option<PathBuf>,
    /// The provider's credentials (a map of strings), mounted from a Secret.
    #[arg(long, env = "IPAM_PROVIDER_CREDENTIALS", value_name = "FILE")]
    pub provider_credentials: Option<PathBuf>,
    /// Where the provider's credentials come from.
    #[arg(long, env = "IPAM_CREDENTIALS_SOURCE", value_enum, default_value_t = CredentialsSource::File)]
    pub credentials_source: CredentialsSource,
    /// The cloud the provider talks to: the default egress allow-list.
    #[arg(long, env = "IPAM_CLOUD", value_enum, default_value_t = CloudArg::Generic)]
    pub cloud: CloudArg,
    /// Cilium's IPAM mode the cluster's agents run in (cilium-agent's
    /// --ipam): which status gets each node's interfaces. Default: the
    /// cloud's (aws: eni, azure: azure; generic: eni). Never taken from
    /// what a CiliumNode carries.
    #[arg(long, env = "IPAM_MODE", value_enum)]
    pub ipam_mode: Option<IpamModeArg>,
    /// Replace the figures of one bucket of the provider's declared rate
    /// model (an account with raised limits): NAME=BURST:PER_SECOND, e.g.
    /// AttachNetworkInterface=100:10; repeatable. A name the provider does
    /// not declare is refused at start.
    #[arg(
        long = "rate-bucket",
        env = "IPAM_RATE_BUCKETS",
        value_delimiter = ',',
        value_name = "NAME=BURST:PER_SECOND",
        value_parser = parse_bucket_override
    )]
    pub rate_buckets: Vec<(String, BucketConfig)>,
    /// A cap over every cloud API call of the provider, besides its own
    /// buckets: BURST:PER_SECOND (Cilium's default is 20:4).
    #[arg(long, env = "IPAM_RATE_GLOBAL_CAP", value_name = "BURST:PER_SECOND")]
    pub rate_global_cap: Option<BucketConfig>,
    /// An origin the provider may reach (scheme://host[:port]); repeatable.
    #[arg(
        long = "allow-egress",
        env = "IPAM_ALLOW_EGRESS",
        value_delimiter = ',',
        value_name = "ORIGIN"
    )]
    pub egress: Vec<String>,
    /// PEM CA certificates trusted besides the webpki roots (a cloud
    /// endpoint, registry or proxy with a private CA), for the provider's
    /// https egress and the operator's own calls: Entra ID and STS tokens,
    /// pulling an oci:// module.
    #[arg(long, env = "IPAM_EGRESS_CA_FILE", value_name = "FILE")]
    pub egress_ca_file: Option<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Limit of one provider call, in milliseconds.
    #[arg(long, env = "IPAM_PROVIDER_TIMEOUT_MS", default_value_t = 30_000)]
    pub provider_timeout_ms: u64,
    /// Memory cap of one provider instance, in MiB.
    #[arg(long, env = "IPAM_PROVIDER_MEMORY_MIB", default_value_t = 128)]
    pub provider_memory_mib: usize,
    /// Live host resources (wasi:http fields, requests, bodies, streams,
    /// pollables) one provider instance may hold.
    #[arg(long, env = "IPAM_PROVIDER_HOST_ENTRIES", default_value_t = CallLimits::default().host_entries)]
    pub provider_host_entries: usize,
    /// Bytes those resources may hold (header sets, URLs, buffered bodies),
    /// in MiB.
    #[arg(long, env = "IPAM_PROVIDER_HOST_MIB", default_value_t = CallLimits::default().host_bytes >> 20)]
    pub provider_host_mib: usize,
    /// Outgoing requests one provider instance may have open at once.
    #[arg(long, env = "IPAM_PROVIDER_CONCURRENT_REQUESTS", default_value_t = CallLimits::default().concurrent_requests)]
    pub provider_concurrent_requests: usize,
    /// Request and response body bytes one provider call may move, in MiB.
    #[arg(long, env = "IPAM_PROVIDER_CALL_BODY_MIB", default_value_t = CallLimits::default().call_body_bytes >> 20)]
    pub provider_call_body_mib: u64,
    /// A special address (cloud metadata, link-local; refused by default
    /// whatever the allow-list says) the provider may reach; repeatable.
    #[arg(
        long = "provider-allow-special-address",
        env = "IPAM_PROVIDER_ALLOW_SPECIAL_ADDRESSES",
        value_delimiter = ',',
        value_name = "IP"
    )]
    pub provider_special_addresses: Vec<IpAddr>,

    /// Tagged on every interface this operator creates; GC and interface
    /// freeing touch only interfaces with this cluster's tag (or with the
    /// adoption tags).
    #[arg(long, env = "IPAM_CLUSTER_NAME", default_value = "default")]
    pub cluster_name: String,
    /// Interfaces carrying every one of these tags (KEY=VALUE, comma
    /// separated) are freed and collected like this cluster's own: the
    /// ENIs Cilium's operator created, with
    /// io.cilium/cluster-name=CLUSTER. Empty: only this cluster's own.
    #[arg(
        long,
        env = "IPAM_ADOPT_INTERFACE_TAGS",
        value_delimiter = ',',
        value_name = "KEY=VALUE",
        value_parser = parse_tag
    )]
    pub adopt_interface_tags: Vec<Tag>,
    /// Use /28 prefixes where the instance type allows.
    #[arg(long, env = "IPAM_PREFIX_DELEGATION", default_value_t = false, action = clap::ArgAction::Set)]
    pub prefix_delegation: bool,
    /// Seconds an address stays excess before it is marked for release.
    #[arg(long, env = "IPAM_RELEASE_DELAY_SECONDS", default_value_t = 180)]
    pub release_delay_seconds: u64,
    /// Delete interfaces of ours that hold nothing needed.
    #[arg(long, env = "IPAM_FREE_INTERFACES", default_value_t = true, action = clap::ArgAction::Set)]
    pub free_interfaces: bool,
    /// Seconds a released address stays out of every pool.
    #[arg(long, env = "IPAM_REUSE_COOLDOWN_SECONDS", default_value_t = 30)]
    pub reuse_cooldown_seconds: u64,
    /// Seconds between full resyncs of the cloud.
    #[arg(long, env = "IPAM_RESYNC_SECONDS", default_value_t = 60)]
    pub resync_seconds: u64,
    /// Nodes worked on at once.
    #[arg(long, env = "IPAM_MAX_CONCURRENT_NODES", default_value_t = 16)]
    pub max_concurrent_nodes: usize,
    /// Seconds between rounds of the leaked-interface GC.
    #[arg(long, env = "IPAM_GC_INTERVAL_SECONDS", default_value_t = 300)]
    pub gc_interval_seconds: u64,
    /// Seconds a detached interface of ours must have existed before the GC
    /// deletes it (an interface being created is detached for a moment).
    #[arg(long, env = "IPAM_GC_GRACE_SECONDS", default_value_t = 600)]
    pub gc_grace_seconds: u64,

    /// Elect a leader among replicas (off: this replica always leads).
    #[arg(long, env = "IPAM_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the coordination.k8s.io Lease the replicas elect a leader
    /// with.
    #[arg(long, env = "IPAM_LEASE_NAME", default_value = "ipam-operator")]
    pub lease_name: String,
    /// Namespace of the lease; the pod's own by default.
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    pub lease_namespace: String,
    /// This replica's identity in the lease; the pod's name by default.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Seconds a standby waits after the last renewal before taking the
    /// lease.
    #[arg(long, env = "IPAM_LEASE_DURATION_SECONDS", default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// Seconds the leader keeps trying to renew before it stops leading.
    #[arg(long, env = "IPAM_RENEW_DEADLINE_SECONDS", default_value_t = 10)]
    pub renew_deadline_seconds: u64,
    /// Seconds between attempts to take or renew the lease.
    #[arg(long, env = "IPAM_RETRY_PERIOD_SECONDS", default_value_t = 2)]
    pub retry_period_seconds: u64,

    /// Where /healthz, /readyz and /metrics are served.
    #[arg(long, env = "IPAM_LISTEN", default_value = "0.0.0.0:9963")]
    pub listen: SocketAddr,
    /// Create the CiliumNode CRD when the cluster has none (Cilium normally
    /// owns it); needs create on customresourcedefinitions.
    #[arg(long, env = "IPAM_REGISTER_CRD", default_value_t = false, action = clap::ArgAction::Set)]
    pub register_crd: bool,
    #[command(flatten)]
    pub kvstore: KvstoreArgs,
    #[command(flatten)]
    pub other_writers: OtherWriterArgs,
    /// Seconds between rounds of the CiliumEndpoint GC (Cilium's
    /// --cilium-endpoint-gc-interval); 0 turns it off.
    #[arg(
        long,
        env = "IPAM_CILIUM_ENDPOINT_GC_INTERVAL_SECONDS",
        default_value_t = 300
    )]
    pub cilium_endpoint_gc_interval_seconds: u64,

    /// A kubeconfig file; otherwise in-cluster config or $KUBECONFIG.
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

/// One `--adopt-interface-tags` item: KEY=VALUE, the key not empty.
fn parse_tag(text: &str) -> Result<Tag, String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: write KEY=VALUE, e.g. io.cilium/cluster-name=prod"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("{text:?}: the tag's key is empty"));
    }
    Ok(Tag {
        key: key.to_string(),
        value: value.trim().to_string(),
    })
}

impl RunArgs {
    /// The engine's maintenance settings these flags give, in `mode`.
    pub(super) fn maintenance_settings(&self, ipam_mode: IpamMode) -> MaintenanceSettings {
        MaintenanceSettings {
            cluster_name: self.cluster_name.clone(),
            adoption_tags: self.adopt_interface_tags.clone(),
            prefix_delegation: self.prefix_delegation,
            release_delay: Duration::from_secs(self.release_delay_seconds),
            free_interfaces: self.free_interfaces,
            ipam_mode,
            ..MaintenanceSettings::default()
        }
    }
}

/// Flags read from `--config FILE`, as `--key=value` arguments placed before
/// the command line's own (later occurrences win).
pub fn config_file_args(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let map: std::collections::BTreeMap<String, serde_yaml::Value> = serde_yaml::from_str(&text)
        .with_context(|| format!("{}: not a YAML map of flags", path.display()))?;
    let mut args = Vec::new();
    for (key, value) in map {
        let one = |v: &serde_yaml::Value| -> anyhow::Result<String> {
            Ok(match v {
                serde_yaml::Value::String(s) => s.clone(),
                serde_yaml::Value::Bool(b) => b.to_string(),
                serde_yaml::Value::Number(n) => n.to_string(),
                _ => anyhow::bail!(
                    "{}: {key} must be a string, number or boolean",
                    path.display()
                ),
            })
        };
        match &value {
            serde_yaml::Value::Sequence(items) => {
                for item in items {
                    args.push(format!("--{key}={}", one(item)?));
                }
            }
            other => args.push(format!("--{key}={}", one(other)?)),
        }
    }
    Ok(args)
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    // The flags and the files they name, checked before anything is served.
    let cloud_kind = Cloud::from(args.cloud);
    let ipam_mode = ipam_mode(cloud_kind, args.ipam_mode)?;
    tracing::info!(mode = %ipam_mode, cloud = ?cloud_kind, "IPAM mode");
    // Read once, before anything goes out: the pull, the credential chain
    // and the provider's egress all verify against these roots.
    let trust = trust_roots(args.egress_ca_file.as_deref())?;
    let rate = rate_settings(&args.rate_buckets, args.rate_global_cap)?;
    // The registry credentials file is read now: a bad one stops the start
    // before anything is served.
    let registries = args.registry.access(trust.clone())?;
    if args.kvstore.enabled() {
        args.kvstore.mesh()?;
    }

    // Health first: /healthz answers while the slow start-up runs, and
    // /readyz says which of its steps are still waited for.
    // Cilium's cloud API families too, under the cloud's Cilium name.
    let metrics = Arc::new(match cloud_kind.cilium_api_subsystem() {
        Some(subsystem) => Metrics::with_cloud_api(subsystem),
        None => Metrics::new(),
    });
    let problems = Arc::new(CloudProblems::default());
    let duty_metrics = Arc::new(DutyMetrics::new());
    let leader_metrics = Arc::new(LeaderMetrics::new());
    // The heartbeat's gauge is shown only where the heartbeat runs, so an
    // alert on its age never fires for an operator without one.
    let heartbeat_metrics = Arc::new(HeartbeatMetrics::new());
    let heartbeat_on = args.kvstore.enabled() && args.kvstore.kvstore_heartbeat;
    let startup = Startup::<StartStep>::default();
    let (ready_tx, ready) = watch::channel(false);
    let (pause_tx, pause) = watch::channel(None);
    let (stop_tx, stop) = watch::channel(false);
    let until_stop = |mut stop: watch::Receiver<bool>| async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(listen = %args.listen, "serving /healthz, /readyz, /metrics");
    let server = tokio::spawn(serve(
        listener,
        endpoints(
            readiness(startup.clone(), ready, pause.clone(), problems.clone()),
            problems.clone(),
            metrics.clone(),
            &duty_metrics,
            &startup,
            &leader_metrics,
            heartbeat_on.then_some(heartbeat_metrics.as_ref()),
        ),
        until_stop(stop.clone()),
    ));
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });

    // A SIGTERM during the start-up (a pull or a dial that hangs) stops it.
    let Started {
        cloud,
        kvstore,
        client,
        store,
    } = tokio::select! {
        started = start(&args, &trust, &registries, &rate, &metrics, &problems, &startup) => started?,
        () = until_stop(stop.clone()) => {
            tracing::info!(
                waiting = startup.report().pending().unwrap_or_default(),
                "stopped during the start-up"
            );
            return Ok(ExitCode::SUCCESS);
        }
    };
    // Another writer of the nodes' fields is looked for before the engine
    // may write (`writing` waits for its first look).
    let cilium_namespace = args.kvstore.cilium_namespace(&args.lease_namespace);
    let other_writers = OtherWriterWatch::new(
        client.clone(),
        store.clone(),
        args.other_writers
            .settings(store.field_manager(), cilium_namespace),
        metrics.clone(),
    );
    let checked = other_writers.checked();
    let operator = Operator {
        store,
        cloud,
        settings: args.maintenance_settings(ipam_mode),
        config: LoopSettings {
            resync_interval: Duration::from_secs(args.resync_seconds),
            max_concurrent_nodes: args.max_concurrent_nodes.max(1),
            gc_interval: Duration::from_secs(args.gc_interval_seconds.max(1)),
            gc_grace: Duration::from_secs(args.gc_grace_seconds),
            ..LoopSettings::default()
        },
        reuse_cooldown: Duration::from_secs(args.reuse_cooldown_seconds),
        metrics,
    };

    let (leader_tx, leader) = watch::channel(!args.leader_elect);
    let mut duties = Duties::new(leader.clone(), stop.clone(), duty_metrics);
    if args.cilium_endpoint_gc_interval_seconds > 0 {
        let interval = Duration::from_secs(args.cilium_endpoint_gc_interval_seconds);
        let settings =
            EndpointGcSettings::new(interval).context("--cilium-endpoint-gc-interval-seconds")?;
        let client = client.clone();
        duties.start(ipam_k8s::endpoint_gc::NAME, move || {
            EndpointGc::new(client.clone(), settings.clone())
        });
    } else {
        tracing::info!("CiliumEndpoint GC off (--cilium-endpoint-gc-interval-seconds 0)");
    }
    if let Some(store) = &kvstore {
        kvstore_duties::start(
            &mut duties,
            &args.kvstore,
            &args.cluster_name,
            &args.lease_namespace,
            store.clone(),
            &client,
            &heartbeat_metrics,
        )?;
    }
    let identity = args.identity.clone().unwrap_or_else(hostname);
    let election = args.leader_elect.then(|| {
        let mut config = LeaseConfig::new(&args.lease_namespace, &args.lease_name, &identity);
        config.lease_duration = Duration::from_secs(args.lease_duration_seconds);
        config.renew_deadline = Duration::from_secs(args.renew_deadline_seconds);
        config.retry_period = Duration::from_secs(args.retry_period_seconds);
        LeaderElection::new(client, config).with_metrics(leader_metrics.clone())
    });
    if election.is_none() {
        // Without election this replica leads from the start.
        leader_metrics.leading(true);
    }
    let campaign = async {
        match &election {
            Some(election) => election.run(&leader_tx, until_stop(stop.clone())).await,
            None => until_stop(stop.clone()).await,
        }
    };
    tokio::spawn(other_writers.run(leader.clone(), pause_tx, until_stop(stop.clone())));
    tokio::join!(
        campaign,
        operator.lead(
            writing(leader, pause, checked),
            &ready_tx,
            until_stop(stop.clone())
        )
    );
    duties.join().await;
    if let Some(store) = &kvstore {
        if let Err(error) = store.release_locks().await {
            tracing::warn!(%error, "kvstore: the lock lease could not be revoked; its locks go with its TTL");
        }
    }
    let _ = server.await;
    Ok(ExitCode::SUCCESS)
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "ipam-operator".into())
}

/// SIGTERM (Kubernetes stopping the pod) or Ctrl-C.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

/// Counts each call over a provider's host-resource budget in
/// `cilium_operator_ipam_provider_over_budget{provider, resource}`, and the
/// guest log lines dropped over a call's log budget in
/// `cilium_operator_ipam_provider_log_lines_dropped{provider}`.
pub(super) struct BudgetMetric(pub(super) Arc<Metrics>);

impl BudgetSink for BudgetMetric {
    fn over_budget(&self, provider: &str, over: OverBudget) {
        self.0
            .provider_over_budget
            .get_or_create(&ipam_engine::metrics::BudgetLabel {
                provider: provider.to_string(),
                resource: over.label(),
            })
            .inc();
    }

    fn log_lines_dropped(&self, provider: &str, lines: u64) {
        self.0
            .provider_log_lines_dropped
            .get_or_create(&ipam_engine::metrics::ProviderLabel {
                provider: provider.to_string(),
            })
            .inc_by(lines);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        run: RunArgs,
    }

    #[test]
    fn cloud_and_credentials_source_are_typed_choices() {
        let parsed = Command::try_parse_from([
            "run",
            "--provider=aws",
            "--cloud=aws",
            "--credentials-source=aws",
        ])
        .unwrap();
        assert_eq!(Cloud::from(parsed.run.cloud), Cloud::Aws);
        assert_eq!(parsed.run.credentials_source, CredentialsSource::Aws);
        let defaults = Command::try_parse_from(["run", "--provider=mock"]).unwrap();
        assert_eq!(Cloud::from(defaults.run.cloud), Cloud::Generic);
        assert_eq!(defaults.run.credentials_source, CredentialsSource::File);
        let azure = Command::try_parse_from([
            "run",
            "--provider=azure",
            "--cloud=azure",
            "--credentials-source=azure",
        ])
        .unwrap();
        assert_eq!(Cloud::from(azure.run.cloud), Cloud::Azure);
        assert_eq!(azure.run.credentials_source, CredentialsSource::Azure);
        assert_eq!(
            azure.run.credentials_source.cloud(),
            Some(Cloud::Azure),
            "the chain matches the cloud"
        );
        let error = Command::try_parse_from(["run", "--provider=x", "--cloud=gcp"])
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains("generic") && error.contains("aws") && error.contains("azure"),
            "{error}"
        );
    }

    #[test]
    fn the_provider_budgets_and_special_addresses_are_flags() {
        let defaults = Command::try_parse_from(["run", "--provider=mock"]).unwrap();
        assert_eq!(defaults.run.provider_host_entries, 1024);
        assert_eq!(defaults.run.provider_host_mib, 8);
        assert_eq!(defaults.run.provider_concurrent_requests, 16);
        assert_eq!(defaults.run.provider_call_body_mib, 64);
        assert!(defaults.run.provider_special_addresses.is_empty());
        let parsed = Command::try_parse_from([
            "run",
            "--provider=mock",
            "--provider-host-entries=64",
            "--provider-host-mib=2",
            "--provider-concurrent-requests=4",
            "--provider-call-body-mib=1",
            "--provider-allow-special-address=169.254.170.2,fd00:ec2::23",
        ])
        .unwrap();
        assert_eq!(
            (
                parsed.run.provider_host_entries,
                parsed.run.provider_host_mib,
                parsed.run.provider_concurrent_requests,
                parsed.run.provider_call_body_mib
            ),
            (64, 2, 4, 1)
        );
        assert_eq!(
            parsed.run.provider_special_addresses,
            [
                "169.254.170.2".parse::<IpAddr>().unwrap(),
                "fd00:ec2::23".parse().unwrap()
            ]
        );
        assert!(Command::try_parse_from([
            "run",
            "--provider=mock",
            "--provider-allow-special-address=metadata.local"
        ])
        .is_err());
    }

    #[test]
    fn each_call_over_a_budget_is_counted_by_provider_and_resource() {
        let metrics = Arc::new(Metrics::new());
        let sink = BudgetMetric(metrics.clone());
        sink.over_budget("aws", OverBudget::Bytes);
        sink.over_budget("aws", OverBudget::Bytes);
        sink.over_budget("aws", OverBudget::Entries);
        sink.log_lines_dropped("aws", 437);
        sink.log_lines_dropped("aws", 3);
        let text = metrics.encode();
        assert!(
            text.contains(
                "cilium_operator_ipam_provider_log_lines_dropped_total{provider=\"aws\"} 440"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "cilium_operator_ipam_provider_over_budget_total{provider=\"aws\",resource=\"bytes\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "cilium_operator_ipam_provider_over_budget_total{provider=\"aws\",resource=\"entries\"} 1"
            ),
            "{text}"
        );
    }

    #[test]
    fn adoption_tags_are_key_value_pairs() {
        let parsed = Command::try_parse_from([
            "run",
            "--provider=mock",
            "--adopt-interface-tags=io.cilium/cluster-name=prod, io.cilium/cilium-managed=true",
        ])
        .unwrap();
        let tags: Vec<(&str, &str)> = parsed
            .run
            .adopt_interface_tags
            .iter()
            .map(|t| (t.key.as_str(), t.value.as_str()))
            .collect();
        assert_eq!(
            tags,
            [
                ("io.cilium/cluster-name", "prod"),
                ("io.cilium/cilium-managed", "true")
            ]
        );
        let settings = parsed.run.maintenance_settings(IpamMode::Eni);
        assert_eq!(settings.adoption_tags, parsed.run.adopt_interface_tags);
        for bad in ["io.cilium/cluster-name", "=prod"] {
            let error = Command::try_parse_from([
                "run",
                "--provider=mock",
                &format!("--adopt-interface-tags={bad}"),
            ])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
            assert!(
                error.contains("KEY=VALUE") || error.contains("empty"),
                "{bad}: {error}"
            );
        }
        let none = Command::try_parse_from(["run", "--provider=mock"]).unwrap();
        assert!(none.run.adopt_interface_tags.is_empty());
    }

    #[test]
    fn a_config_file_becomes_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("operator.yaml");
        std::fs::write(
            &path,
            "provider: /modules/aws.wasm\nleader-elect: false\nrelease-delay-seconds: 60\nallow-egress: [https://a, https://b]\n",
        )
        .unwrap();
        let args = config_file_args(&path).unwrap();
        assert_eq!(
            args,
            [
                "--allow-egress=https://a",
                "--allow-egress=https://b",
                "--leader-elect=false",
                "--provider=/modules/aws.wasm",
                "--release-delay-seconds=60"
            ]
        );
        std::fs::write(&path, "provider: {nested: 1}\n").unwrap();
        assert!(config_file_args(&path).is_err());
    }
}
