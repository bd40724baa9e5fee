//! The body of a replica's response, whichever client read it: hyper's pooled one
//! (`keep_alive`) or laneway's own (`force_close`, `spread`).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::wire::{Socket, WireBody};
use crate::gateway::body::BoxError;

/// A replica's response body.
pub enum UpstreamBody {
    /// Read by hyper's pooled client (`keep_alive`).
    Hyper(Incoming),
    /// Read by laneway's own client (`force_close`, `spread`).
    Wire(WireBody<Socket>),
}

impl From<Incoming> for UpstreamBody {
    fn from(body: Incoming) -> Self {
        Self::Hyper(body)
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Self::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            Self::Wire(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Hyper(body) => body.is_end_stream(),
            Self::Wire(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Hyper(body) => body.size_hint(),
            Self::Wire(body) => body.size_hint(),
        }
    }
}
