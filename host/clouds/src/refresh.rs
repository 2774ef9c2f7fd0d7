//! Credentials that expire, fetched again in the background before they do.
//! A guest's `get-credentials` is served from what is held, without waiting
//! on a token endpoint; a failed refresh keeps the held credentials (still
//! valid until their expiry) and is retried.

use std::fmt::Display;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ipam_cloud::credentials::{CredentialSource, Credentials};

/// Refresh this long before expiry (the AWS and Azure SDKs use 5 minutes).
pub const REFRESH_AHEAD: Duration = Duration::from_secs(300);
/// How long after a failed refresh the next try is.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);

/// The latest credentials of one source, kept fresh by a background task
/// that ends when the last holder drops this.
pub struct RefreshingSource {
    latest: RwLock<Credentials>,
}

/// How long to wait before fetching again credentials that expire at
/// `expires_at` (unix seconds), at `now`: [`REFRESH_AHEAD`] before expiry,
/// at once when that is past.
pub fn refresh_wait(expires_at: u64, now: u64) -> Duration {
    Duration::from_secs(expires_at.saturating_sub(now)).saturating_sub(REFRESH_AHEAD)
}

impl RefreshingSource {
    /// Fetch once (an error here is the caller's: the operator does not
    /// start without credentials), then keep them fresh while they expire.
    /// `cloud` names the source in the log.
    pub async fn start<F, Fut, E>(cloud: &'static str, fetch: F) -> Result<Arc<Self>, E>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Credentials, E>> + Send,
        E: Display + Send,
    {
        let first = fetch().await?;
        let this = Arc::new(Self {
            latest: RwLock::new(first),
        });
        let weak = Arc::downgrade(&this);
        tokio::spawn(async move {
            loop {
                let Some(this) = weak.upgrade() else { return };
                let Some(expires_at) = this.read().expires_at else {
                    return;
                };
                drop(this);
                tokio::time::sleep(refresh_wait(expires_at, wall_clock_unix())).await;
                let fetched = fetch().await;
                let Some(this) = weak.upgrade() else { return };
                match fetched {
                    Ok(fresh) => {
                        tracing::info!(cloud, expires_at = ?fresh.expires_at, "credentials refreshed");
                        *this.latest.write().unwrap_or_else(|p| p.into_inner()) = fresh;
                    }
                    Err(error) => {
                        tracing::warn!(cloud, %error, "refreshing credentials failed; retrying");
                        drop(this);
                        tokio::time::sleep(RETRY_AFTER_FAILURE).await;
                    }
                }
            }
        });
        Ok(this)
    }

    fn read(&self) -> Credentials {
        self.latest
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl CredentialSource for RefreshingSource {
    fn current(&self) -> Result<Credentials, String> {
        Ok(self.read())
    }
}

/// Unix seconds by the wall clock: an expiry is the issuer's wall time,
/// whatever clock the rest of the process follows.
pub fn wall_clock_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn token(value: &str, expires_at: u64) -> Credentials {
        Credentials {
            values: [("access-token".to_string(), value.to_string())].into(),
            expires_at: Some(expires_at),
        }
    }

    fn held(source: &RefreshingSource) -> String {
        source.current().expect("credentials").values["access-token"].clone()
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_refresh_keeps_the_held_credentials_and_is_retried() {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let source = RefreshingSource::start("test", move || {
            let call = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                match call {
                    // Due for a refresh at once (inside REFRESH_AHEAD).
                    0 => Ok(token("one", wall_clock_unix() + 60)),
                    1 => Err("the token endpoint answered 500"),
                    _ => Ok(token("two", wall_clock_unix() + 3_600)),
                }
            }
        })
        .await
        .expect("the first fetch");
        while calls.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(held(&source), "one", "kept after the failed refresh");
        tokio::time::sleep(RETRY_AFTER_FAILURE / 2).await;
        assert_eq!(calls.load(Ordering::SeqCst), 2, "no retry before its time");
        tokio::time::sleep(RETRY_AFTER_FAILURE).await;
        assert_eq!(calls.load(Ordering::SeqCst), 3, "retried");
        assert_eq!(held(&source), "two");
    }

    #[test]
    fn the_wait_ends_five_minutes_before_expiry() {
        let table = [
            (1_000 + 3_600, 1_000, 3_300),
            (1_000 + 300, 1_000, 0),
            (1_000 + 200, 1_000, 0),
            (500, 1_000, 0),
        ];
        for (expires_at, now, want) in table {
            assert_eq!(
                refresh_wait(expires_at, now),
                Duration::from_secs(want),
                "expires {expires_at} now {now}"
            );
        }
    }
}
