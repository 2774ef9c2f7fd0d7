//! The per-call budget of body bytes: every request and response body of one
//! call draws from one count, and the frame that goes past it fails the body
//! stream (`HTTP-request-body-size` or `HTTP-response-body-size`) instead of
//! being delivered.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use wasmtime_wasi_http::{Error, WasiBody};

/// Body bytes one call may still move.
#[derive(Debug)]
pub struct BodyBudget {
    limit: u64,
    used: AtomicU64,
}

impl BodyBudget {
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            used: AtomicU64::new(0),
        }
    }

    /// Count `bytes` more; whether the call is still within its budget.
    fn draw(&self, bytes: u64) -> bool {
        let before = self.used.fetch_add(bytes, Ordering::Relaxed);
        before.saturating_add(bytes) <= self.limit
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Request,
    Response,
}

/// A body that draws every data frame from the call's budget.
struct Metered {
    inner: WasiBody,
    budget: Arc<BodyBudget>,
    direction: Direction,
    spent: bool,
}

impl Body for Metered {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if self.spent {
            return Poll::Ready(None);
        }
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        let bytes = frame.data_ref().map_or(0, |data| data.len() as u64);
        if self.budget.draw(bytes) {
            return Poll::Ready(Some(Ok(frame)));
        }
        self.spent = true;
        let limit = Some(self.budget.limit);
        tracing::warn!(
            limit = self.budget.limit,
            direction = ?self.direction,
            "provider call went over its body budget; failing the body"
        );
        Poll::Ready(Some(Err(match self.direction {
            Direction::Request => Error::HttpRequestBodySize(limit),
            Direction::Response => Error::HttpResponseBodySize(limit),
        })))
    }

    fn is_end_stream(&self) -> bool {
        self.spent || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `body`, drawing from `budget`.
pub fn metered(body: WasiBody, budget: Arc<BodyBudget>, direction: Direction) -> WasiBody {
    Metered {
        inner: body,
        budget,
        direction,
        spent: false,
    }
    .boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    use http_body_util::{BodyExt, Full};

    fn body(bytes: usize) -> WasiBody {
        Full::new(Bytes::from(vec![7u8; bytes]))
            .map_err(|never| match never {})
            .boxed_unsync()
    }

    #[tokio::test]
    async fn bodies_of_one_call_share_the_budget_and_the_one_past_it_fails() {
        let budget = Arc::new(BodyBudget::new(1000));
        let first = metered(body(600), budget.clone(), Direction::Request);
        assert_eq!(first.collect().await.unwrap().to_bytes().len(), 600);
        let second = metered(body(600), budget.clone(), Direction::Response);
        match second.collect().await {
            Err(Error::HttpResponseBodySize(Some(1000))) => {}
            other => panic!("expected the response body size error, got {other:?}"),
        }
        let request = metered(body(1), budget, Direction::Request);
        assert!(matches!(
            request.collect().await,
            Err(Error::HttpRequestBodySize(Some(1000)))
        ));
    }

    #[tokio::test]
    async fn a_body_within_the_budget_is_delivered_whole() {
        let budget = Arc::new(BodyBudget::new(1000));
        let within = metered(body(1000), budget, Direction::Response);
        assert_eq!(within.collect().await.unwrap().to_bytes().len(), 1000);
    }
}
