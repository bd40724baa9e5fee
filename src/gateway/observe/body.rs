//! The response body wrapper: forwards every upstream frame the moment it arrives (no
//! buffering), shows a copy of the bytes to the [`Recorder`], and holds the in-flight
//! guard until the body ends or is dropped.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::recorder::{BodyKind, Outcome, Recorder};
use crate::gateway::body::BoxError;
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
    }
}

impl<B: Body> ObservedBody<B> {
    pub fn new(inner: B, mut recorder: Recorder, guard: InFlightGuard) -> Self {
        // An empty body (204, a HEAD response) may never be polled: finish it now rather
        // than have its drop count as an abandoned request.
        let ended = inner.is_end_stream();
        if ended {
            recorder.finish(Outcome::Complete, Instant::now());
        }
        Self { inner, recorder, guard: (!ended).then_some(guard), ended }
    }
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
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(frame))) => {
                let now = Instant::now();
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
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.recorder.finish(Outcome::Complete, Instant::now());
                this.guard.take();
                *this.ended = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(error))) => {
                let error: BoxError = error.into();
                tracing::warn!(%error, "upstream body failed mid-response");
                this.recorder.finish(Outcome::UpstreamReset, Instant::now());
                this.guard.take();
                if this.recorder.kind() == BodyKind::Stream {
                    // Headers are gone already: end the stream the way vLLM reports errors.
                    let api_error = ApiError::new(
                        ErrorKind::BadGateway,
                        format!("upstream stream failed: {error}"),
                    );
                    let events = format!("{}data: [DONE]\n\n", api_error.sse_event());
                    *this.ended = true;
                    Poll::Ready(Some(Ok(Frame::data(Bytes::from(events)))))
                } else {
                    *this.ended = true;
                    Poll::Ready(Some(Err(error)))
                }
            }
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
