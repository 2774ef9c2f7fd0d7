//! The duties besides IPAM, composed: each runs its rounds only while this
//! replica leads (`ipam_duty::run_while_leading`), every one counted in the
//! same `cilium_operator_duty_*` metrics, all stopped at shutdown.

use std::future::Future;
use std::sync::Arc;

use ipam_duty::{run_while_leading, Duty, DutyMetrics};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Duties {
    leader: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
    metrics: Arc<DutyMetrics>,
    running: Vec<(&'static str, JoinHandle<()>)>,
}

fn stopped(mut stop: watch::Receiver<bool>) -> impl Future<Output = ()> {
    async move {
        let _ = stop.wait_for(|s| *s).await;
    }
}

impl Duties {
    pub fn new(
        leader: watch::Receiver<bool>,
        stop: watch::Receiver<bool>,
        metrics: Arc<DutyMetrics>,
    ) -> Self {
        Self {
            leader,
            stop,
            metrics,
            running: Vec::new(),
        }
    }

    /// Run the duty `make` builds (afresh each time this replica leads).
    pub fn start<D: Duty + 'static>(
        &mut self,
        name: &'static str,
        make: impl FnMut() -> D + Send + 'static,
    ) {
        tracing::info!(duty = name, "duty enabled: runs while this replica leads");
        let task = tokio::spawn(run_while_leading(
            make,
            self.leader.clone(),
            self.metrics.clone(),
            stopped(self.stop.clone()),
        ));
        self.running.push((name, task));
    }

    /// Wait for every duty to stop (after the stop signal).
    pub async fn join(self) {
        for (name, task) in self.running {
            if let Err(error) = task.await {
                tracing::error!(duty = name, %error, "duty task ended abnormally");
            }
        }
    }
}
