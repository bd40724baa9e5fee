//! A client request body that must arrive whole by a deadline (`timeouts.client_body_ms`):
//! a body dribbled a byte at a time would otherwise hold a connection, a buffer and, when
//! streamed through, an upstream connection for as long as the client likes.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::gateway::body::BoxError;

/// The error a body ends with when its deadline passes.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimedOut(pub Duration);

pin_project! {
    pub struct DeadlineBody<B> {
        #[pin]
        inner: B,
        // Armed at the first wait, so a body that is already here costs no timer.
        #[pin]
        timer: Option<Sleep>,
        deadline: Instant,
        limit: Duration,
    }
}

impl<B> DeadlineBody<B> {
    /// `inner` must end within `limit` from now.
    pub fn new(inner: B, limit: Duration) -> Self {
        Self { inner, timer: None, deadline: Instant::now() + limit, limit }
    }
}

impl<B> Body for DeadlineBody<B>
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
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            return Poll::Ready(frame.map(|result| result.map_err(Into::into)));
        }
        if this.timer.is_none() {
            this.timer.set(Some(tokio::time::sleep_until(*this.deadline)));
        }
        match this.timer.as_pin_mut().map(|timer| timer.poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(*this.limit))))),
            _ => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_moving_fails_at_its_deadline() {
        let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
        sender.send(Ok(Frame::data(Bytes::from_static(b"{\"mo")))).await.unwrap();
        let stream = tokio_stream_from(receiver);
        let body = DeadlineBody::new(StreamBody::new(stream), Duration::from_secs(30));
        let error = body.collect().await.unwrap_err();
        assert!(error.is::<BodyTimedOut>(), "{error}");
        drop(sender);
    }

    #[tokio::test(start_paused = true)]
    async fn a_whole_body_passes() {
        let body = DeadlineBody::new(
            http_body_util::Full::new(Bytes::from_static(b"{}")),
            Duration::from_secs(1),
        );
        assert_eq!(body.collect().await.unwrap().to_bytes(), Bytes::from_static(b"{}"));
    }

    fn tokio_stream_from(
        mut receiver: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
    ) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, BoxError>> {
        futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx))
    }
}
