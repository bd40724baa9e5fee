//! A client's request body as the request path receives it: streamed by hyper (HTTP/2,
//! and HTTP/1 connections handed to hyper), or read whole by laneway's own HTTP/1 server
//! before the request was dispatched (or failed while it was read).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::gateway::body::BoxError;

/// A request body from either server.
#[derive(Debug)]
pub enum ClientBody {
    Hyper(Incoming),
    /// The whole body, already read (`None` once taken).
    Whole(Option<Bytes>),
    /// The body did not arrive: the error its first poll returns (`None` once taken).
    Failed(Option<BoxError>),
}

impl ClientBody {
    pub fn whole(bytes: Bytes) -> Self {
        Self::Whole((!bytes.is_empty()).then_some(bytes))
    }

    pub fn failed(error: impl Into<BoxError>) -> Self {
        Self::Failed(Some(error.into()))
    }

    /// The whole body if it was read whole and not yet taken; else the body, to be read.
    pub fn into_whole(self) -> Result<Bytes, Self> {
        match self {
            Self::Whole(Some(bytes)) => Ok(bytes),
            Self::Whole(None) => Ok(Bytes::new()),
            other => Err(other),
        }
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Self::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            Self::Whole(bytes) => Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes)))),
            Self::Failed(error) => Poll::Ready(error.take().map(Err)),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Hyper(body) => body.is_end_stream(),
            Self::Whole(bytes) => bytes.is_none(),
            Self::Failed(error) => error.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Hyper(body) => body.size_hint(),
            Self::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Self::Failed(_) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn a_whole_body_is_one_frame_of_its_exact_size() {
        let body = ClientBody::whole(Bytes::from_static(b"{\"a\":1}"));
        assert_eq!(body.size_hint().exact(), Some(7));
        assert_eq!(body.collect().await.unwrap().to_bytes(), "{\"a\":1}");
        let empty = ClientBody::whole(Bytes::new());
        assert!(empty.is_end_stream());
        assert_eq!(empty.size_hint().exact(), Some(0));
    }

    #[test]
    fn a_whole_body_is_taken_as_it_is_and_any_other_left_to_be_read() {
        let whole = ClientBody::whole(Bytes::from_static(b"{}"));
        assert_eq!(whole.into_whole().unwrap(), "{}");
        assert_eq!(ClientBody::whole(Bytes::new()).into_whole().unwrap(), "");
        let failed = ClientBody::failed("cut").into_whole().unwrap_err();
        assert!(matches!(failed, ClientBody::Failed(Some(_))));
    }

    #[tokio::test]
    async fn a_failed_body_returns_its_error_once() {
        let mut body = ClientBody::failed("cut");
        let error = body.frame().await.unwrap().unwrap_err();
        assert_eq!(error.to_string(), "cut");
        assert!(body.frame().await.is_none());
    }
}
