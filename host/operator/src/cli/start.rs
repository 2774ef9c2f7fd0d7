//! `run`'s slow start-up, after the HTTP listener is up: the provider
//! module (read or pulled, then loaded), its credentials, etcd, the
//! Kubernetes client and the CiliumNode cache. Each is a step of the
//! [`Startup`] report `/readyz` reads; a failed step fails the start.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ipam_cloud::credentials::CredentialSource;
use ipam_cloud::rate::RateSettings;
use ipam_cloud::CloudApi;
use ipam_clouds::aws::credentials::AwsCredentialConfig;
use ipam_clouds::azure::credentials::AzureCredentialConfig;
use ipam_clouds::Cloud;
use ipam_engine::{CloudProblems, LimitedCloud, Metrics};
use ipam_health_http::startup::Startup;
use ipam_k8s::store::{KubeNodeStore, FIELD_MANAGER};
use ipam_kvstore::etcd_store::EtcdStore;
use ipam_provider_module::sha256_hex;
use ipam_provider_runtime::oci::RegistryAccess;
use ipam_provider_runtime::TrustRoots;
use ipam_provider_runtime::{CallLimits, ProviderRuntime, RuntimeConfig, WasmProvider};

use super::provider::{load_config, module_bytes};
use super::run::{BudgetMetric, CredentialsSource, RunArgs};
use crate::rate_flags::rate_limits;
use crate::startup::{step, StartStep};

/// What the start-up made.
pub struct Started {
    pub cloud: Arc<LimitedCloud<WasmProvider>>,
    pub kvstore: Option<Arc<EtcdStore>>,
    pub client: kube::Client,
    /// Its watch runs; the CiliumNode cache step is done at its first sync.
    pub store: Arc<KubeNodeStore>,
}

pub async fn start(
    args: &RunArgs,
    trust: &TrustRoots,
    registries: &RegistryAccess,
    rate: &RateSettings,
    metrics: &Arc<Metrics>,
    problems: &Arc<CloudProblems>,
    startup: &Startup<StartStep>,
) -> anyhow::Result<Started> {
    let cloud = load_provider(
        args,
        trust,
        registries,
        rate,
        metrics,
        Some(problems),
        startup,
    )
    .await?;

    // etcd is dialled at start, leader or not, so that a bad address or
    // certificate stops the process at once instead of at its first lead.
    let kvstore = match args.kvstore.enabled() {
        true => {
            let config = args.kvstore.etcd_config().context("the etcd flags")?;
            let endpoints = config.endpoints.join(",");
            let store = step(
                startup,
                StartStep::Etcd,
                format!("connecting to {endpoints}"),
                async {
                    EtcdStore::connect(&config)
                        .await
                        .with_context(|| format!("connecting to etcd at {endpoints}"))
                },
            )
            .await?;
            tracing::info!(%endpoints, "kvstore: connected to etcd");
            Some(Arc::new(store))
        }
        false => {
            startup.off(StartStep::Etcd);
            tracing::info!(
                "kvstore: no etcd given (--etcd-endpoints, --etcd-config): kvstore duties off"
            );
            None
        }
    };

    let client = step(
        startup,
        StartStep::Kubernetes,
        "building the client",
        async {
            let client = kube_client(args.kubeconfig.as_deref()).await?;
            if args.register_crd {
                startup.waiting(StartStep::Kubernetes, "registering the CiliumNode CRD");
                if ipam_k8s::crd::ensure(client.clone()).await? {
                    tracing::info!(crd = ipam_k8s::crd::NAME, "registered the CiliumNode CRD");
                }
            }
            Ok(client)
        },
    )
    .await?;
    let store = Arc::new(KubeNodeStore::new(client.clone(), FIELD_MANAGER));
    startup.waiting(StartStep::NodeCache, "listing the CiliumNodes");
    tokio::spawn(store.clone().run());
    tokio::spawn({
        let mut synced = store.synced();
        let startup = startup.clone();
        async move {
            if synced.wait_for(|s| *s).await.is_ok() {
                startup.done(StartStep::NodeCache);
            }
        }
    });
    Ok(Started {
        cloud,
        kvstore,
        client,
        store,
    })
}

/// The provider module with its credentials, loaded, behind the rate
/// limits, its calls recorded in `metrics`.
pub(super) async fn provider(
    args: &RunArgs,
    trust: &TrustRoots,
    registries: &RegistryAccess,
    rate: &RateSettings,
    metrics: &Arc<Metrics>,
    startup: &Startup<StartStep>,
) -> anyhow::Result<Arc<LimitedCloud<WasmProvider>>> {
    load_provider(args, trust, registries, rate, metrics, None, startup).await
}

/// [`provider`], the trouble its calls meet kept in `problems` if given.
async fn load_provider(
    args: &RunArgs,
    trust: &TrustRoots,
    registries: &RegistryAccess,
    rate: &RateSettings,
    metrics: &Arc<Metrics>,
    problems: Option<&Arc<CloudProblems>>,
    startup: &Startup<StartStep>,
) -> anyhow::Result<Arc<LimitedCloud<WasmProvider>>> {
    let cloud_kind = Cloud::from(args.cloud);
    let fetching = match args.provider.starts_with("oci://") {
        true => format!("pulling {}", args.provider),
        false => format!("reading {}", args.provider),
    };
    startup.waiting(StartStep::ProviderModule, fetching);
    let fetched = async {
        let (path, bytes) = module_bytes(&args.provider, registries).await?;
        if let Some(want) = &args.provider_sha256 {
            let have = sha256_hex(&bytes);
            anyhow::ensure!(
                have.eq_ignore_ascii_case(want.trim_start_matches("sha256:")),
                "{}: sha256 is {have}, but --provider-sha256 pins {want}",
                path.display()
            );
        }
        let mut provider_config = load_config(
            &args.provider,
            args.provider_settings.as_deref(),
            &args.egress,
            trust.clone(),
            args.provider_credentials.as_deref(),
            CallLimits {
                timeout: Duration::from_millis(args.provider_timeout_ms),
                memory_bytes: args.provider_memory_mib << 20,
                host_entries: args.provider_host_entries,
                host_bytes: args.provider_host_mib << 20,
                concurrent_requests: args.provider_concurrent_requests,
                call_body_bytes: args.provider_call_body_mib << 20,
            },
        )?;
        provider_config.special_addresses = args.provider_special_addresses.clone();
        Ok((path, bytes, provider_config))
    };
    let (path, bytes, mut provider_config) =
        fail_step(startup, StartStep::ProviderModule, fetched.await)?;
    provider_config.credentials = step(
        startup,
        StartStep::Credentials,
        args.credentials_source.resolving(),
        async {
            match args.credentials_source {
                CredentialsSource::File => Ok(provider_config.credentials.clone()),
                CredentialsSource::Aws => {
                    let config = AwsCredentialConfig {
                        trust: trust.clone(),
                        ..AwsCredentialConfig::from_env()
                    };
                    let source: Arc<dyn CredentialSource> =
                        ipam_clouds::aws::credentials::start(config)
                            .await
                            .context("resolving AWS credentials")?;
                    Ok(source)
                }
                CredentialsSource::Azure => {
                    let config = AzureCredentialConfig {
                        trust: trust.clone(),
                        ..AzureCredentialConfig::from_env()
                    };
                    let source: Arc<dyn CredentialSource> =
                        ipam_clouds::azure::credentials::start(config)
                            .await
                            .context("resolving Azure credentials")?;
                    Ok(source)
                }
            }
        },
    )
    .await?;
    if let Some(chain) = args.credentials_source.cloud() {
        if chain != cloud_kind {
            tracing::warn!(
                cloud = ?cloud_kind,
                credentials = ?chain,
                "credentials come from another cloud's chain than --cloud: that cloud's default egress is not applied"
            );
        }
    }
    provider_config.refusals = Some(metrics.clone());
    provider_config.budget_events = Some(Arc::new(BudgetMetric(metrics.clone())));
    let loading = format!("loading {}", path.display());
    step(startup, StartStep::ProviderModule, loading, async {
        if provider_config.egress.is_empty() {
            provider_config.egress = cloud_kind
                .default_egress(&provider_config.settings)
                .with_context(|| format!("the default egress allow-list of cloud {cloud_kind:?}"))?;
            if !provider_config.egress.is_empty() {
                tracing::info!(egress = ?provider_config.egress, cloud = ?cloud_kind, "egress allow-list: the cloud's default");
            }
        }
        let runtime = ProviderRuntime::new(RuntimeConfig::default())?;
        let provider = runtime
            .load(&bytes, provider_config)
            .await
            .with_context(|| format!("loading {}", path.display()))?;
        tracing::info!(provider = %provider.info().name, module = %path.display(), "provider loaded");
        let limits = rate_limits(provider.info(), rate)?;
        tracing::info!(buckets = %limits.summary(), "keeping to the cloud's rate limits");
        let cloud = LimitedCloud::new(provider, limits).with_metrics(metrics.clone());
        Ok(Arc::new(match problems {
            Some(problems) => cloud.with_problems(problems.clone()),
            None => cloud,
        }))
    })
    .await
}

/// `result` of work done as `step` (already shown as waiting): the step is
/// failed on an error, and stays waiting otherwise (more of it follows).
fn fail_step<T>(
    startup: &Startup<StartStep>,
    step: StartStep,
    result: anyhow::Result<T>,
) -> anyhow::Result<T> {
    if let Err(error) = &result {
        startup.set(
            step,
            ipam_health_http::startup::StepState::Failed(crate::error_text::chain(error)),
        );
    }
    result
}

pub(super) async fn kube_client(
    kubeconfig: Option<&std::path::Path>,
) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no in-cluster config and no kubeconfig")?,
    };
    Ok(kube::Client::try_from(config)?)
}
