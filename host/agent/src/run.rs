//! The agent's start-up, in the order cilium-agent keeps: the saved
//! allocations are read before anything else; the node is registered; the
//! allocations are judged against the node's pool and the live pods and the
//! routes put in step (with a datapath: bpffs mounted, the program loaded
//! over its pinned maps, the host's addresses and the endpoints written);
//! with SNAT, its table written; only then is the CNI socket served and the
//! agent ready, and then its conflist installed (where no other network is
//! configured, or when told to take over), so that no runtime asks for an
//! address before the agent can answer. The CiliumNode is watched and its
//! status published from then on. At SIGTERM the agent's pod's owner tells
//! a restart (everything kept) from an uninstall (everything removed).
//! The restore and every later change of the allocations (the CNI socket,
//! the routes' netlink connection) run on the CNI thread (`cni_thread`);
//! the watch, the publisher and the health endpoints on the main runtime.

use std::sync::Arc;
use std::time::Duration;

use ipam_pool::backoff::failure_backoff;

use anyhow::Context;
use ipam_health_http::startup::Startup;

use crate::allocator::Allocator;
use crate::cli::Cli;
use crate::cni_conf_plan::ConfVerdict;
use crate::cni_thread::CniThread;
use crate::datapath::NodeDatapath;
use crate::install_cni::{self, ConflistFile};
use crate::kube_node::{publish, NodeClient};
use crate::metrics::AgentMetrics;
use crate::nft_snat::NftSnat;
use crate::register::Registration;
use crate::routing::{NoRoutes, RouteTable};
use crate::startup::AgentStep;
use crate::state_file::StateFile;
use crate::teardown::Teardown;
use crate::uninstall::{on_stop, OnStop, Owner};
use crate::{cni_conf_dir, cni_server, facts, netlink_routes, snat};

async fn kube_client(cli: &Cli) -> anyhow::Result<kube::Client> {
    let config = match &cli.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("the kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no in-cluster configuration and no --kubeconfig")?,
    };
    kube::Client::try_from(config).context("building the Kubernetes client")
}

/// Retry `attempt` with backoff (1 s doubling to 30 s) until it succeeds;
/// `failed` hears of each failure with the attempt's number and the wait
/// before the next.
async fn retry<T, E, F: std::future::Future<Output = Result<T, E>>>(
    mut attempt: impl FnMut() -> F,
    mut failed: impl FnMut(&E, u32, Duration),
) -> (T, u32) {
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        match attempt().await {
            Ok(value) => return (value, attempts),
            Err(error) => {
                let delay =
                    failure_backoff(Duration::from_secs(1), Duration::from_secs(30), attempts);
                failed(&error, attempts, delay);
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Retry `attempt` as `step` until it succeeds ([`retry`]), showing the
/// last failure in `/readyz`: the API server or the metadata service may
/// not be reachable yet when a node boots, nor the Node's provider id set.
/// A failure is logged at warn when it differs from the one before (the
/// same one again at debug, so a long wait is one line, not a line every
/// 30 s).
async fn until_done<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
    startup: &Startup<AgentStep>,
    step: AgentStep,
    what: &str,
    attempt: impl FnMut() -> F,
) -> T {
    let mut last = String::new();
    startup.waiting(step, what);
    let (value, attempts) = retry(attempt, |error, attempts, delay| {
        let text = error.to_string();
        if text == last {
            tracing::debug!(%error, attempts, retry_in = ?delay, "{what}: still failing");
        } else {
            tracing::warn!(%error, attempts, retry_in = ?delay, "{what}");
            last = text;
        }
        startup.waiting(step, format!("retrying in {delay:?}: {error}"));
    })
    .await;
    startup.done(step);
    if attempts > 1 {
        tracing::info!(attempts, "{what}: done");
    }
    value
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    // 1. The saved allocations, before anything reads or serves.
    let state = StateFile::in_dir(&cli.state_dir);
    let saved = state.load().context(
        "the saved allocations cannot be read; the file is left as it is \
         (move it away to start empty, knowing its addresses may be in use)",
    )?;
    tracing::info!(saved = saved.allocations.len(), file = %state.path().display(), "allocations read");
    // The conflist to install, checked before anything is served: a bad one
    // is a configuration error, not something to find out on the node.
    let conflist = cli
        .cni_conflist
        .as_deref()
        .map(install_cni::read_conflist)
        .transpose()
        .context("the conflist to install (--cni-conflist)")?;

    // Health before the slow work: /readyz names the steps still waited
    // for, and is 200 once the CNI socket is served.
    let metrics = Arc::new(AgentMetrics::new());
    let startup = Startup::<AgentStep>::default();
    if cli.datapath_object.is_none() {
        startup.off(AgentStep::Datapath);
    }
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("listening on {}", cli.listen))?;
    let endpoint_metrics = metrics.clone();
    let mut startup_registry = prometheus_client::registry::Registry::default();
    startup.register(&mut startup_registry, "ipam_agent_startup_step");
    let readiness = startup.clone();
    let endpoints = ipam_health_http::Endpoints::with_readiness(
        Arc::new(move || readiness.report().pending()),
        Arc::new(move |text: &mut String| {
            // Writing into a String cannot fail.
            let _ = prometheus_client::encoding::text::encode_registry(
                text,
                endpoint_metrics.registry(),
            );
            let _ = prometheus_client::encoding::text::encode_registry(text, &startup_registry);
        }),
    );
    tokio::spawn(ipam_health_http::serve(
        listener,
        endpoints,
        std::future::pending(),
    ));

    // 2. Register the node.
    let client = startup
        .run(
            AgentStep::Kubernetes,
            "building the client",
            kube_client(&cli),
        )
        .await?;
    let nodes = NodeClient::new(client, &cli.node_name);
    let (node_facts, source) = until_done(
        &startup,
        AgentStep::InstanceFacts,
        "reading the instance's facts",
        || facts::gather(&cli, &nodes),
    )
    .await;
    tracing::info!(instance = %node_facts.instance_id, from = source.as_str(), "instance facts read");
    let registration = Registration {
        facts: node_facts,
        interfaces: cli.interfaces(),
        watermarks: cli.watermarks(),
    };
    let node = until_done(
        &startup,
        AgentStep::Registration,
        "registering the CiliumNode",
        || nodes.register(&registration),
    )
    .await;
    tracing::info!(node = %node.name, instance = %node.spec.instance_id, pool = node.spec.ipam.pool.len(), "CiliumNode registered");

    // 3. Restore against the pool and the pods that still exist.
    startup.waiting(AgentStep::Restore, "listing the pods on this node");
    let live_pods = match nodes.live_pods().await {
        Ok(pods) => Some(pods),
        Err(error) => {
            tracing::warn!(%error, "the pods on this node are unknown: no saved allocation is freed for want of its pod");
            None
        }
    };
    let cni = startup
        .run(AgentStep::Restore, "starting the CNI thread", async {
            CniThread::start()
        })
        .await?;
    let routes = startup
        .run(AgentStep::Restore, "opening netlink", async {
            anyhow::Ok::<Arc<dyn RouteTable>>(if cli.routing {
                // Its connection is driven by the CNI thread, where it is used.
                let _entered = cni.handle().enter();
                Arc::new(netlink_routes::NetlinkRoutes::new().context("opening netlink")?)
            } else {
                Arc::new(NoRoutes)
            })
        })
        .await?;
    startup.waiting(AgentStep::Restore, "waiting for the datapath");
    let datapath = match &cli.datapath_object {
        Some(object) => {
            let loading = format!("loading {}", object.display());
            let datapath = startup
                .run(
                    AgentStep::Datapath,
                    loading,
                    load_datapath(object, &cli.bpffs, &metrics),
                )
                .await?;
            tokio::spawn(
                datapath
                    .clone()
                    .keep_host_addresses(Duration::from_secs(cli.host_address_sync_secs.max(1))),
            );
            Some(datapath)
        }
        None => None,
    };
    let allocator = Arc::new(
        Allocator::new(saved, node, state, routes.clone(), metrics.clone())
            .with_datapath(datapath)
            .pause_after_save(cli.test_pause_after_save_ms.map(Duration::from_millis)),
    );
    let restore = cni.run("the restore", {
        let allocator = allocator.clone();
        async move { allocator.restore(live_pods.as_ref()).await }
    });
    let report = startup
        .run(
            AgentStep::Restore,
            "judging the saved allocations",
            async move { anyhow::Ok(restore.await??) },
        )
        .await?;
    for ip in &report.outside_pool {
        tracing::warn!(%ip, "a pod holds an address that has left the pool; it is not handed out again");
    }
    tracing::info!(kept = report.kept, freed = ?report.freed, "allocations restored");

    // SNAT before the first pod is served, kept in step with the node;
    // turned off, a table an earlier run wrote goes.
    if !cli.snat_enabled() {
        if let Err(error) = NftSnat.remove() {
            tracing::debug!(%error, "removing a SNAT table of an earlier run (SNAT is off)");
        }
    } else {
        let ranges = allocator.vpc_ranges();
        let rules = snat::wanted(&ranges.borrow(), &cli.snat_exclude_cidrs);
        apply_snat(&rules, &metrics).context("writing the SNAT table")?;
        tokio::spawn(keep_snat(
            ranges,
            cli.snat_exclude_cidrs.clone(),
            metrics.clone(),
        ));
    }

    // 4. Follow the node, publish the status, serve the plugin.
    tokio::spawn({
        let nodes = nodes.clone();
        let allocator = allocator.clone();
        async move { nodes.watch(allocator).await }
    });
    tokio::spawn(publish(
        nodes.clone(),
        allocator.clone(),
        metrics.clone(),
        Duration::from_millis(cli.status_interval_ms),
    ));
    let socket = startup
        .run(AgentStep::CniSocket, "binding the socket", async {
            let _entered = cni.handle().enter();
            cni_server::bind(&cli.socket)
        })
        .await?;
    let (stop_serving, serving_stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = cni.handle().spawn(cni_server::serve(
        socket,
        allocator,
        metrics.clone(),
        async move {
            let _ = serving_stopped.await;
        },
    ));
    startup.done(AgentStep::CniSocket);
    tracing::info!(socket = %cli.socket.display(), "serving the CNI plugin");

    // The node's network configuration, now that the agent answers.
    let installing = conflist.map(|conflist| {
        tokio::spawn(keep_conflist(
            cli.cni_conf_dir.clone(),
            conflist,
            cli.cni_take_over,
            metrics.clone(),
        ))
    });

    shutdown_signal().await?;
    if let Some(installing) = installing {
        installing.abort();
    }
    // A plugin asking now gets "try again later" instead of a stale socket;
    // the requests already accepted are answered before the agent stops.
    let _ = std::fs::remove_file(&cli.socket);
    let _ = stop_serving.send(());
    if let Err(error) = serving.await {
        tracing::warn!(%error, "the CNI server ended badly");
    }
    let owner = match (&cli.pod_namespace, &cli.pod_name) {
        (Some(namespace), Some(name)) => {
            match tokio::time::timeout(OWNER_TIMEOUT, nodes.owner(namespace, name)).await {
                Ok(owner) => owner,
                Err(_) => Owner::Unreadable(format!("no answer within {OWNER_TIMEOUT:?}")),
            }
        }
        _ => Owner::NotKnown,
    };
    match on_stop(&owner) {
        OnStop::Keep(why) => tracing::info!(why, "stopped, everything kept for the next start"),
        OnStop::Uninstall(why) => {
            tracing::warn!(why, "uninstalled: removing what the agent put on the node");
            let teardown = Teardown {
                cni_conf_dir: cli.cni_conflist.is_some().then(|| cli.cni_conf_dir.clone()),
                cni_bin_dir: cli.cni_bin_dir.clone(),
                routes,
                bpffs: cli.datapath_object.is_some().then(|| cli.bpffs.clone()),
            };
            for (step, outcome) in teardown.run(&cni).await {
                match outcome {
                    Ok(removed) => tracing::info!(step, removed, "removed"),
                    Err(error) => tracing::error!(step, error, "could not remove"),
                }
            }
            tracing::info!("stopped");
        }
    }
    Ok(())
}

/// How long the owner lookup at SIGTERM may take: within the pod's grace
/// period, with time left for the teardown.
const OWNER_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes the SNAT table for `rules`.
fn apply_snat(
    rules: &snat::SnatRules,
    metrics: &AgentMetrics,
) -> Result<(), crate::nft_snat::NftError> {
    NftSnat.apply(rules)?;
    metrics.snat_ranges(rules.sources.len(), rules.kept.len());
    if rules.masquerades() {
        tracing::info!(masqueraded = ?rules.sources, kept = ?rules.kept, "SNAT table written");
    } else {
        tracing::info!("SNAT table written empty: the CiliumNode names no VPC range yet");
    }
    Ok(())
}

/// Rewrites the SNAT table whenever the node's VPC ranges change; a failed
/// write is retried with backoff (1 s doubling to 30 s), with the newest
/// ranges.
async fn keep_snat(
    mut ranges: tokio::sync::watch::Receiver<Vec<ipnet::Ipv4Net>>,
    exclude: Vec<ipnet::Ipv4Net>,
    metrics: Arc<AgentMetrics>,
) {
    while ranges.changed().await.is_ok() {
        retry(
            || {
                let rules = snat::wanted(&ranges.borrow_and_update(), &exclude);
                std::future::ready(apply_snat(&rules, &metrics))
            },
            |error, _, delay| tracing::warn!(%error, retry_in = ?delay, "writing the SNAT table"),
        )
        .await;
    }
}

/// Installs the conflist as `cni_conf_plan` decides, once: a failed write
/// is retried with backoff (1 s doubling to 30 s); a decision not to
/// install is logged at warn and shown in `ipam_agent_cni_conflist`.
async fn keep_conflist(
    dir: std::path::PathBuf,
    conflist: ConflistFile,
    take_over: bool,
    metrics: Arc<AgentMetrics>,
) {
    let (plan, _) = retry(
        || std::future::ready(cni_conf_dir::install(&dir, &conflist, take_over)),
        |error, _, delay| {
            metrics.cni_conflist("failed");
            tracing::warn!(%error, retry_in = ?delay, "installing the conflist");
        },
    )
    .await;
    metrics.cni_conflist(plan.verdict.state());
    for removed in &plan.remove {
        tracing::warn!(file = %dir.join(removed).display(), "a conflist of the agent's removed");
    }
    match plan.verdict {
        ConfVerdict::Installed => tracing::info!(
            file = %dir.join(&conflist.name).display(),
            "conflist installed: pods on this node get their addresses from the agent"
        ),
        ConfVerdict::Unchanged => tracing::info!(
            file = %dir.join(&conflist.name).display(),
            "conflist already installed"
        ),
        ConfVerdict::OtherNetwork { others } => tracing::warn!(
            ?others,
            dir = %dir.display(),
            "another network is configured on this node: the agent's conflist is not \
             installed (--cni-take-over, chart value agent.cni.takeOver, to replace it)"
        ),
        ConfVerdict::NotFirst { ours, first_other } => tracing::warn!(
            ours,
            first_other,
            dir = %dir.display(),
            "told to take over, but the runtime would read {first_other} first: \
             name the agent's conflist to sort before it (agent.cni.confName)"
        ),
    }
}

/// The datapath over its pinned maps, with the host's addresses written.
/// A map re-created for another layout is logged and counted; it starts
/// empty, and the restore writes the kept endpoints into it again.
async fn load_datapath(
    object: &std::path::Path,
    bpffs: &std::path::Path,
    metrics: &Arc<AgentMetrics>,
) -> anyhow::Result<Arc<NodeDatapath>> {
    let (datapath, loaded) = NodeDatapath::load(object, bpffs).with_context(|| {
        format!(
            "loading the datapath {} with its pins under {}",
            object.display(),
            bpffs.display()
        )
    })?;
    for map in &loaded.recreated {
        tracing::warn!(
            map,
            "a pinned datapath map had another layout: re-created empty"
        );
    }
    metrics.maps_recreated(loaded.recreated.len());
    let addresses = crate::datapath::host_addresses().await?;
    datapath.sync_host_addresses(&addresses)?;
    let datapath = Arc::new(datapath);
    metrics.datapath_loaded(datapath.clone());
    tracing::info!(bpffs = ?loaded.bpffs, recreated = loaded.recreated.len(), "datapath loaded");
    Ok(datapath)
}

async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => {}
        result = tokio::signal::ctrl_c() => result.context("SIGINT handler")?,
    }
    Ok(())
}
