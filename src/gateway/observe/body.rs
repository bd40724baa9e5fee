//! The response body wrapper: forwards every upstream frame the moment it arrives (no
//! buffering), shows a copy of the bytes to the [`Recorder`], and holds the in-flight
//! guard until the body ends or is dropped. When the upstream fails mid-body, or a
//! [`StreamWatchdog`] timer fires, a stream ends with an OpenAI-shape error event and
//! `data: [DONE]`; any other body ends in an error (the client sees a cut response).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::recorder::{BodyKind, Outcome, Recorder};
use super::watchdog::{Expiry, StreamWatchdog};
use crate::gateway::body::BoxError;
use crate::gateway::health::{FailureReason, HealthTracker};
use crate::gateway::pick::InFlightGuard;
use crate::openai::{ApiError, ErrorKind};

pin_project! {
    /// An upstream body on its way to the client, observed.
    pub struct ObservedBody<B> {
        #[pin]
        inner: B,
        recorder: Recorder,
        guard: Option<InFlightGuard>,
        ended: bool,
        watchdog: StreamWatchdog,
        health: Arc<HealthTracker>,
    }
}

impl<B: Body> ObservedBody<B> {
    /// Observes `inner` with `recorder`, holding `guard` until it ends, under the watchdog's
    /// timers, with upstream failures reported to the health tracker.
    pub fn new(
        inner: B,
        mut recorder: Recorder,
        guard: InFlightGuard,
        watchdog: StreamWatchdog,
        health: Arc<HealthTracker>,
    ) -> Self {
        // An empty body (204, a HEAD response) may never be polled: finish it now rather
        // than have its drop count as an abandoned request.
        let ended = inner.is_end_stream();
        if ended {
            recorder.finish(Outcome::Complete, Instant::now());
        }
        let guard = (!ended).then_some(guard);
        Self { inner, recorder, guard, ended, watchdog, health }
    }
}

/// Why the body stops early.
enum Failure {
    Upstream(BoxError),
    Expired(Expiry),
}

impl<B> Body for ObservedBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        if *this.ended {
            return Poll::Ready(None);
        }
        let failure = match this.inner.as_mut().poll_frame(cx) {
            Poll::Pending => match this.watchdog.poll_expired(cx) {
                Poll::Ready(expiry) => Failure::Expired(expiry),
                Poll::Pending => return Poll::Pending,
            },
            Poll::Ready(Some(Ok(frame))) => {
                // One clock read per frame, for the recorder and the watchdog alike (tokio's
                // clock is std's outside tests; tests may pause it for the watchdog).
                let read_at = tokio::time::Instant::now();
                let now = read_at.into_std();
                if let Some(data) = frame.data_ref() {
                    this.recorder.on_data(data, now);
                }
                // A body of known length is over with its last byte: hyper stops polling
                // then, so waiting for `None` would record a complete response as abandoned.
                if this.inner.is_end_stream() {
                    this.recorder.finish(Outcome::Complete, now);
                    this.guard.take();
                    *this.ended = true;
                }
                this.watchdog.on_progress(read_at);
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(None) => {
                this.recorder.finish(Outcome::Complete, Instant::now());
                this.guard.take();
                *this.ended = true;
                return Poll::Ready(None);
            }
            Poll::Ready(Some(Err(error))) => Failure::Upstream(error.into()),
        };
        *this.ended = true;
        let (message, outcome, reason) = match &failure {
            Failure::Upstream(error) => {
                let request_id = this.recorder.request_id();
                tracing::warn!(%error, request_id, "upstream body failed mid-response");
                if let Some(guard) = this.guard.as_ref() {
                    this.health.record_failure(guard.replica(), FailureReason::Reset);
                }
                (format!("upstream stream failed: {error}"), Outcome::UpstreamReset, "reset")
            }
            Failure::Expired(expiry) => {
                let (request_id, reason) = (this.recorder.request_id(), expiry.as_str());
                tracing::warn!(request_id, reason, "response cut short by the gateway");
                if let (Some(guard), Expiry::Idle) = (this.guard.as_ref(), expiry) {
                    this.health.record_failure(guard.replica(), FailureReason::Timeout);
                }
                let message = format!("response ended by the gateway: {}", expiry.as_str());
                (message, Outcome::CutShort, expiry.as_str())
            }
        };
        this.health.metrics().stream_failures.with_label_values(&[reason]).inc();
        this.recorder.finish(outcome, Instant::now());
        this.guard.take();
        if this.recorder.kind() == BodyKind::Stream {
            // Headers are gone already: end the stream the way vLLM reports errors.
            let api_error = ApiError::new(ErrorKind::BadGateway, message);
            let events = format!("{}data: [DONE]\n\n", api_error.sse_event());
            Poll::Ready(Some(Ok(Frame::data(Bytes::from(events)))))
        } else {
            let error: BoxError = match failure {
                Failure::Upstream(error) => error,
                Failure::Expired(_) => message.into(),
            };
            Poll::Ready(Some(Err(error)))
        }
    }

    // Only our own end counts: trusting the inner body's would let hyper stop polling
    // before the recorder saw the end, and the request would count as abandoned.
    fn is_end_stream(&self) -> bool {
        self.ended
    }

    fn size_hint(&self) -> SizeHint {
        if self.ended { SizeHint::with_exact(0) } else { self.inner.size_hint() }
    }
}
