//! The round both stores share: a full pass (a sync, a sweep), then each
//! change applied as it comes until the round's length is up; a store may
//! ask for a full pass sooner ([`Incremental::full_due`]). A failed step
//! brings the full pass forward to the retry interval instead of waiting
//! for the next round; the round reports its last failure, if the full pass
//! did not mend it since.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use ipam_kvstore::KvError;
use tokio::time::Instant;

/// What a store heard from its Kubernetes view.
pub(crate) enum Heard<C> {
    /// One object changed.
    One(C),
    /// Anything may have changed (changes were missed): a full pass.
    Everything,
    /// The view is gone: nothing more will be heard.
    Closed,
}

#[async_trait]
pub(crate) trait Incremental: Send {
    type Change: Debug + Send + Sync;
    /// The store's name in logs.
    const WHAT: &'static str;
    async fn full(&mut self) -> Result<(), KvError>;
    async fn one(&mut self, change: &Self::Change) -> Result<(), KvError>;
    /// The next change; cancel-safe (it is raced against the clock).
    async fn next(&mut self) -> Heard<Self::Change>;
    /// When the store wants a full pass of its own accord (none by default).
    fn full_due(&self) -> Option<Instant> {
        None
    }
}

/// The earlier of two due times, either absent.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// One round of `length`; its last unmended failure.
pub(crate) async fn round<I: Incremental>(
    store: &mut I,
    length: Duration,
    retry: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + length;
    let mut full_at = Some(Instant::now());
    let mut failure: Option<String> = None;
    let mut listening = true;
    loop {
        if full_at.is_some_and(|at| at <= Instant::now()) {
            match store.full().await {
                Ok(()) => {
                    full_at = store.full_due();
                    failure = None;
                }
                Err(error) => {
                    tracing::warn!(store = I::WHAT, %error, "full pass failed; retrying");
                    failure = Some(error.to_string());
                    full_at = Some(Instant::now() + retry);
                }
            }
        }
        let wake = full_at.map_or(deadline, |at| at.min(deadline));
        let heard = tokio::select! {
            () = tokio::time::sleep_until(wake) => None,
            heard = store.next(), if listening => Some(heard),
        };
        match heard {
            None if Instant::now() >= deadline => break,
            None => {}
            // A full pass is due anyway: it covers this change.
            Some(Heard::One(_)) if full_at.is_some() => {}
            Some(Heard::One(change)) => match store.one(&change).await {
                Ok(()) => full_at = earliest(full_at, store.full_due()),
                Err(error) => {
                    tracing::warn!(store = I::WHAT, %error, ?change, "write failed; full pass soon");
                    failure = Some(error.to_string());
                    full_at = Some(Instant::now() + retry);
                }
            },
            Some(Heard::Everything) => full_at = Some(Instant::now()),
            // The view is gone (it cannot be while the duty holds it);
            // wait out the round.
            Some(Heard::Closed) => listening = false,
        }
    }
    failure.map_or(Ok(()), Err)
}
