//! A body that holds a value (an admission place) until the body ends or is dropped, so
//! that a streamed response keeps its place for as long as it streams.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    pub struct HeldBody<B, T> {
        #[pin]
        inner: B,
        held: Option<T>,
    }
}

impl<B, T> HeldBody<B, T> {
    pub fn new(inner: B, held: T) -> Self {
        Self { inner, held: Some(held) }
    }
}

impl<B: Body<Data = Bytes>, T> Body for HeldBody<B, T> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) {
            this.held.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
