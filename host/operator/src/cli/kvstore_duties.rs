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
    CiliumNodesView, ClusterInfo, NodesSettings, NodesStore, ServicesSettings, ServicesStore,
    ServicesView,
};
use ipam_kvstore::heartbeat::Heartbeat;
use ipam_kvstore::identity_gc::{IdentityGc, IdentityGcSettings};
use ipam_kvstore::lock_sweeper::{LockSweeper, LockSweeperSettings};
use ipam_kvstore::SharedStore;

use super::kvstore_args::KvstoreArgs;
use crate::duties::Duties;

/// Start the kvstore duties the flags enable, on `store`.
pub fn start(
    duties: &mut Duties,
    args: &KvstoreArgs,
    cluster_name: &str,
    store: Arc<dyn SharedStore>,
    client: &kube::Client,
) -> anyhow::Result<()> {
    if args.kvstore_heartbeat {
        let (store, settings) = (store.clone(), args.heartbeat(cluster_name));
        duties.start("heartbeat", move || {
            Heartbeat::new(store.clone(), settings.clone())
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
        let settings = identity_gc_settings(args)?;
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
            let (settings, store) = (NodesSettings::new(cluster), store.clone());
            duties.start("nodes-store", move || {
                NodesStore::new(settings.clone(), view.clone(), store.clone())
            });
        }
    }
    Ok(())
}

fn identity_gc_settings(args: &KvstoreArgs) -> anyhow::Result<IdentityGcSettings> {
    let cluster_id = u8::try_from(args.cluster_id).map_err(|_| {
        anyhow::anyhow!(
            "--cluster-id {}: the identity GC knows the identity ranges of cluster ids 0 to 255 \
             (Cilium's default of 255 connected clusters); turn it off with --identity-gc=false",
            args.cluster_id
        )
    })?;
    let deletions_per_minute = NonZeroU32::new(args.identity_gc_rate_per_minute)
        .context("--identity-gc-rate-per-minute must be positive")?;
    Ok(IdentityGcSettings {
        cluster_id,
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

    #[test]
    fn identity_gc_settings_come_from_the_flags_and_bad_ones_are_named() {
        let parse = |args: &[&str]| {
            Command::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
                .unwrap()
                .kvstore
        };
        let settings = identity_gc_settings(&parse(&[
            "--cluster-id=3",
            "--identity-gc-interval-seconds=60",
            "--identity-gc-rate-per-minute=100",
        ]))
        .unwrap();
        assert_eq!(settings.cluster_id, 3);
        assert_eq!(settings.interval, Duration::from_secs(60));
        assert_eq!(settings.deletions_per_minute.get(), 100);
        let error = identity_gc_settings(&parse(&["--cluster-id=300"])).unwrap_err();
        assert!(error.to_string().contains("0 to 255"), "{error}");
        let error = identity_gc_settings(&parse(&["--identity-gc-rate-per-minute=0"])).unwrap_err();
        assert!(error.to_string().contains("must be positive"), "{error}");
    }
}
