//! The kvstore duties `run` starts when an etcd is given: heartbeat, lock
//! sweeper, identity GC, services and nodes stores, each behind its flag
//! (`docs/kvstore.md`). The Kubernetes caches the stores read follow the
//! API server from the start, leader or not, so a new leader's first round
//! has them synced.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ipam_clustermesh::{
    AgentPodsView, CiliumNodesView, ClusterInfo, NodesSettings, NodesStore, ServicesSettings,
    ServicesStore, ServicesView,
};
use ipam_kvstore::heartbeat::Heartbeat;
use ipam_kvstore::heartbeat_metrics::HeartbeatMetrics;
use ipam_kvstore::identity_gc::{IdentityGc, IdentityGcSettings};
use ipam_kvstore::lock_sweeper::{LockSweeper, LockSweeperSettings};
use ipam_kvstore::mesh::ClusterMesh;
use ipam_kvstore::SharedStore;

use super::kvstore_args::KvstoreArgs;
use crate::duties::Duties;

/// Start the kvstore duties the flags enable, on `store`; cilium-agent's
/// pods are looked for in `namespace` unless --cilium-pod-namespace names
/// another. Each heartbeat written is recorded in `heartbeat_metrics`.
pub fn start(
    duties: &mut Duties,
    args: &KvstoreArgs,
    cluster_name: &str,
    namespace: &str,
    store: Arc<dyn SharedStore>,
    client: &kube::Client,
    heartbeat_metrics: &Arc<HeartbeatMetrics>,
) -> anyhow::Result<()> {
    let mesh = args.mesh()?;
    if args.kvstore_heartbeat {
        let (store, settings) = (store.clone(), args.heartbeat(cluster_name, mesh));
        let metrics = heartbeat_metrics.clone();
        duties.start("heartbeat", move || {
            Heartbeat::new(store.clone(), settings.clone()).with_metrics(metrics.clone())
        });
    }
    if args.kvstore_lock_sweeper {
        let settings = LockSweeperSettings {
            interval: Duration::from_secs(args.kvstore_lock_ttl_seconds.max(1)),
        };
        let store = store.clone();
        duties.start("lock-sweeper", move || {
            LockSweeper::new(store.clone(), settings.clone())
        });
    }
    if args.identity_gc {
        let settings = identity_gc_settings(args, mesh)?;
        let store = store.clone();
        duties.start("identity-gc", move || {
            IdentityGc::new(store.clone(), settings.clone())
        });
    }
    if args.synchronize_k8s_services || args.synchronize_k8s_nodes {
        let cluster = ClusterInfo::new(cluster_name, args.cluster_id)
            .context("--cluster-name and --cluster-id, as the shared stores' keys need them")?;
        if args.synchronize_k8s_services {
            let view = Arc::new(ServicesView::new());
            tokio::spawn(view.clone().follow(client.clone()));
            let (settings, store) = (ServicesSettings::new(cluster.clone()), store.clone());
            duties.start("services-store", move || {
                ServicesStore::new(settings.clone(), view.clone(), store.clone())
            });
        }
        if args.synchronize_k8s_nodes {
            let view = Arc::new(CiliumNodesView::new());
            tokio::spawn(view.clone().follow(client.clone()));
            let agents = Arc::new(AgentPodsView::new());
            let agents_namespace = args.cilium_namespace(namespace);
            tokio::spawn(agents.clone().follow(
                client.clone(),
                agents_namespace.to_string(),
                args.cilium_pod_labels.clone(),
            ));
            let (settings, store) = (NodesSettings::new(cluster), store.clone());
            duties.start("nodes-store", move || {
                NodesStore::new(
                    settings.clone(),
                    view.clone(),
                    agents.clone(),
                    store.clone(),
                )
            });
        }
    }
    Ok(())
}

fn identity_gc_settings(
    args: &KvstoreArgs,
    mesh: ClusterMesh,
) -> anyhow::Result<IdentityGcSettings> {
    let deletions_per_minute = NonZeroU32::new(args.identity_gc_rate_per_minute)
        .context("--identity-gc-rate-per-minute must be positive")?;
    Ok(IdentityGcSettings {
        mesh,
        interval: Duration::from_secs(args.identity_gc_interval_seconds.max(1)),
        deletions_per_minute,
    })
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
    fn identity_gc_settings_come_from_the_flags_and_bad_ones_are_named() {
        let args = parse(&[
            "--cluster-id=3",
            "--identity-gc-interval-seconds=60",
            "--identity-gc-rate-per-minute=100",
        ]);
        let settings = identity_gc_settings(&args, args.mesh().unwrap()).unwrap();
        assert_eq!(settings.mesh.cluster_id(), 3);
        assert_eq!(settings.interval, Duration::from_secs(60));
        assert_eq!(settings.deletions_per_minute.get(), 100);
        let args = parse(&["--identity-gc-rate-per-minute=0"]);
        let error = identity_gc_settings(&args, args.mesh().unwrap()).unwrap_err();
        assert!(error.to_string().contains("must be positive"), "{error}");
    }

    #[test]
    fn the_cluster_id_is_checked_against_the_mesh_size_for_every_duty() {
        let error = parse(&["--cluster-id=300"]).mesh().unwrap_err();
        let text = format!("{error:#}");
        assert!(
            text.contains("--max-connected-clusters") && text.contains("300"),
            "{text}"
        );
        let args = parse(&["--cluster-id=300", "--max-connected-clusters=511"]);
        let mesh = args.mesh().unwrap();
        let config = args.heartbeat("east", mesh).cluster_config().unwrap();
        assert_eq!(
            (config.id, config.capabilities.max_connected_clusters),
            (300, 511)
        );
        assert_eq!(
            identity_gc_settings(&args, mesh).unwrap().mesh,
            mesh,
            "the identity GC judges the range of cluster 300 of 511"
        );
        let refused = Command::try_parse_from(["run", "--max-connected-clusters=256"]);
        let error = refused.err().expect("256 is not a mesh size").to_string();
        assert!(error.contains("255 or 511"), "{error}");
    }

    #[test]
    fn cilium_s_agent_pods_by_default() {
        let args = parse(&[]);
        assert_eq!(args.cilium_pod_labels.selector(), "k8s-app=cilium");
        assert_eq!(args.cilium_pod_namespace, "");
        assert!(Command::try_parse_from(["run", "--cilium-pod-labels=k8s-app"]).is_err());
    }
}
