//! What `ipam-operator run` does once connected: the engine runs only while
//! this replica holds the lease (and no other writer of the nodes' fields
//! is seen: [`crate::other_writers::writing`] makes that gate), from a
//! fresh cache each time it takes over (the previous leader, or the other
//! writer, changed the cloud meanwhile), and stops the moment the lease is
//! lost or another writer appears. Readiness: the CiliumNode cache is
//! synced, and, as leader, the engine's first resync and pass are done.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use ipam_cloud::CloudApi;
use ipam_engine::{Engine, InstanceCache, LoopSettings, Maintainer, MaintenanceSettings, Metrics};

use crate::store::KubeNodeStore;

pub struct Operator {
    pub store: Arc<KubeNodeStore>,
    pub cloud: Arc<dyn CloudApi>,
    pub settings: MaintenanceSettings,
    pub config: LoopSettings,
    pub reuse_cooldown: Duration,
    pub metrics: Arc<Metrics>,
}

impl Operator {
    /// Run the engine while `leader` is true (this replica may write),
    /// until `shutdown`. `ready` follows readiness as described above.
    pub async fn lead(
        &self,
        mut leader: watch::Receiver<bool>,
        ready: &watch::Sender<bool>,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut synced = self.store.synced();
        loop {
            // Standby (or not yet leader): ready once the cache is synced.
            let standby = async {
                let _ = synced.wait_for(|s| *s).await;
                ready.send_replace(true);
                let _ = leader.wait_for(|l| *l).await;
            };
            tokio::select! {
                () = &mut shutdown => return,
                () = standby => {}
            }
            if leader.has_changed().is_err() {
                return;
            }
            ready.send_replace(false);
            let maintainer = Maintainer::new(
                self.cloud.clone(),
                Arc::new(InstanceCache::with_reuse_cooldown(self.reuse_cooldown)),
                self.store.clone(),
                self.settings.clone(),
                self.metrics.clone(),
            );
            let engine = Engine::new(Arc::new(maintainer), self.config.clone());
            let mut state = engine.state();
            let mut leading = leader.clone();
            let lost = async move {
                let _ = leading.wait_for(|l| !*l).await;
            };
            let readiness = async {
                let _ = state.wait_for(|s| s.ready).await;
                ready.send_replace(true);
                std::future::pending::<()>().await;
            };
            tracing::info!("leading: engine started");
            tokio::select! {
                () = &mut shutdown => return,
                result = engine.run(lost) => {
                    if let Err(error) = result {
                        tracing::error!(%error, "engine stopped");
                    }
                }
                () = readiness => {}
            }
            tracing::info!("no longer leading (or another writer seen): engine stopped");
        }
    }
}
