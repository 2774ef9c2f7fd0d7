//! The egress denials of the current call: counted, the first kept (the
//! call's error names it), the first few logged, and one closing line for
//! the rest. A guest may be denied thousands of times in a call; neither the
//! host's memory nor its log grows with that, and each destination is cut
//! to [`guest_text::KEPT_BYTES`] before it is kept or logged.

use std::sync::{Arc, Mutex};

use crate::egress::EgressError;
use crate::guest_text;

/// Denials of one call that are logged one by one.
pub const LOGGED_PER_CALL: u64 = 8;

/// What one call was denied.
#[derive(Debug, Default)]
pub struct CallDenials {
    pub count: u64,
    /// The first denial: its destination (cut) and reason.
    pub first: Option<(String, EgressError)>,
}

/// Shared between the send hook (which runs in a spawned future) and the
/// store that reads it after the call.
#[derive(Clone, Default)]
pub struct DenialLog(Arc<Mutex<CallDenials>>);

impl DenialLog {
    pub fn record(&self, destination: &str, error: EgressError) {
        let Ok(mut denials) = self.0.lock() else {
            return;
        };
        denials.count += 1;
        let destination = guest_text::kept(destination);
        if denials.count <= LOGGED_PER_CALL {
            tracing::warn!(%destination, %error, "provider egress denied");
        }
        if denials.first.is_none() {
            denials.first = Some((destination, error));
        }
    }

    /// Take what was denied since the last call; the denials past those
    /// logged one by one are logged here, in one line.
    pub fn take(&self) -> CallDenials {
        let Ok(mut denials) = self.0.lock() else {
            return CallDenials::default();
        };
        let taken = std::mem::take(&mut *denials);
        if taken.count > LOGGED_PER_CALL {
            tracing::warn!(
                denied = taken.count,
                not_logged = taken.count - LOGGED_PER_CALL,
                "provider egress denied more often in one call than is logged one by one"
            );
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_denial_is_counted_the_first_kept_cut_and_the_log_starts_afresh() {
        let log = DenialLog::default();
        let long = format!("http://unlisted.test/{}", "p".repeat(1 << 20));
        for n in 0..1000 {
            log.record(
                &long,
                EgressError::NotAllowed {
                    origin: format!("http://unlisted-{n}.test:80"),
                },
            );
        }
        let taken = log.take();
        assert_eq!(taken.count, 1000);
        let (destination, reason) = taken.first.expect("the first is kept");
        assert!(destination.len() < guest_text::KEPT_BYTES + 32);
        assert!(destination.starts_with("http://unlisted.test/ppp"));
        assert_eq!(
            reason,
            EgressError::NotAllowed {
                origin: "http://unlisted-0.test:80".into()
            }
        );
        let next = log.take();
        assert_eq!((next.count, next.first.is_none()), (0, true));
    }
}
