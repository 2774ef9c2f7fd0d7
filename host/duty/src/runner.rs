//! Rounds of a duty on an interval, only while leading.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use crate::DutyMetrics;

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Keys or objects deleted.
    pub deletions: u64,
}

/// One of the operator's periodic duties. A value holds what the duty
/// remembers between rounds (what the previous round saw); it is made anew
/// each time this replica starts leading.
#[async_trait]
pub trait Duty: Send {
    /// Its name in metrics and logs.
    fn name(&self) -> &'static str;

    /// Time between the starts of two rounds.
    fn interval(&self) -> Duration;

    /// Wait for what the first round needs (caches synced); by default
    /// nothing.
    async fn ready(&mut self) {}

    /// One round. An error is logged and counted; the next round comes at
    /// its time.
    async fn round(&mut self) -> Result<RoundReport, String>;
}

/// Run rounds of the duty `make` builds, every interval, from each moment
/// `leader` turns true until it turns false (the round in flight is
/// dropped), until `shutdown`.
pub async fn run_while_leading<D: Duty>(
    mut make: impl FnMut() -> D,
    mut leader: watch::Receiver<bool>,
    metrics: Arc<DutyMetrics>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            led = leader.wait_for(|l| *l) => if led.is_err() { return },
        }
        let mut duty = make();
        let name = duty.name();
        tracing::info!(duty = name, "leading: duty started");
        let mut lost = leader.clone();
        tokio::select! {
            () = &mut shutdown => return,
            _ = lost.wait_for(|l| !*l) => {}
            () = rounds(&mut duty, &metrics) => {}
        }
        tracing::info!(duty = name, "no longer leading: duty stopped");
    }
}

async fn rounds<D: Duty>(duty: &mut D, metrics: &DutyMetrics) {
    duty.ready().await;
    let mut ticks = tokio::time::interval(duty.interval());
    // A round that overran its interval is followed by the next one at
    // once, then the ticks go on from there: rounds never pile up.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let name = duty.name();
        let started = Instant::now();
        let result = duty.round().await;
        let took = started.elapsed();
        match result {
            Ok(report) => {
                tracing::debug!(
                    duty = name,
                    deletions = report.deletions,
                    took_ms = took.as_millis() as u64,
                    "round done"
                );
                metrics.round(name, took, report.deletions, false);
            }
            Err(error) => {
                tracing::warn!(duty = name, %error, "round failed");
                metrics.round(name, took, 0, true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    struct Counting {
        made: u32,
        rounds: Arc<AtomicU32>,
        fail_every: u32,
    }

    #[async_trait]
    impl Duty for Counting {
        fn name(&self) -> &'static str {
            "counting"
        }
        fn interval(&self) -> Duration {
            Duration::from_secs(10)
        }
        async fn round(&mut self) -> Result<RoundReport, String> {
            let n = self.rounds.fetch_add(1, Ordering::SeqCst) + 1;
            if n % self.fail_every == 0 {
                Err(format!("round {n} of incarnation {} failed", self.made))
            } else {
                Ok(RoundReport { deletions: 2 })
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rounds_run_only_while_leading_and_are_counted() {
        let (leader_tx, leader) = watch::channel(false);
        let (stop_tx, mut stop) = watch::channel(false);
        let rounds = Arc::new(AtomicU32::new(0));
        let metrics = Arc::new(DutyMetrics::new());
        let made = Arc::new(AtomicU32::new(0));
        let task = tokio::spawn({
            let (rounds, metrics, made) = (rounds.clone(), metrics.clone(), made.clone());
            async move {
                run_while_leading(
                    move || Counting {
                        made: made.fetch_add(1, Ordering::SeqCst) + 1,
                        rounds: rounds.clone(),
                        fail_every: 3,
                    },
                    leader,
                    metrics,
                    async move {
                        let _ = stop.wait_for(|s| *s).await;
                    },
                )
                .await;
            }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(rounds.load(Ordering::SeqCst), 0, "no round before leading");
        leader_tx.send_replace(true);
        // Rounds at 0, 10, 20 and 30 s.
        tokio::time::sleep(Duration::from_secs(35)).await;
        assert_eq!(rounds.load(Ordering::SeqCst), 4);
        leader_tx.send_replace(false);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(
            rounds.load(Ordering::SeqCst),
            4,
            "no round after losing the lease"
        );
        leader_tx.send_replace(true);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(rounds.load(Ordering::SeqCst), 5);
        assert_eq!(
            made.load(Ordering::SeqCst),
            2,
            "a fresh duty each time it leads"
        );
        assert_eq!(metrics.runs("counting"), 5);
        assert_eq!(metrics.failures("counting"), 1);
        assert_eq!(metrics.deletions("counting"), 8);
        stop_tx.send_replace(true);
        task.await.unwrap();
    }
}
