//! Response bodies: complete ones, and streamed ones fed through a bounded channel by the
//! task that paces a stream's chunks.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use tokio::sync::mpsc;

use crate::openai::ApiError;

/// The body type of every simulator response.
pub type SimBody = BoxBody<Bytes, StreamCut>;

/// The error a streamed body ends with when the `cut_after_chunks` fault is on: the
/// connection is torn down without the end of the chunked message, as a crash would.
#[derive(Debug, thiserror::Error)]
#[error("stream cut by the cut_after_chunks fault")]
pub struct StreamCut;

/// A complete body.
pub fn full(bytes: impl Into<Bytes>) -> SimBody {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

/// An error in the OpenAI shape.
pub fn error_response(error: ApiError) -> Response<SimBody> {
    let response: Response<Full<Bytes>> = error.into_response();
    response.map(|body| body.map_err(|never| match never {}).boxed())
}

/// A JSON response with status 200.
pub fn json_response(json: impl Into<Bytes>) -> Response<SimBody> {
    let mut response = Response::new(full(json));
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

/// Sending half of a streamed body.
pub type ChunkSender = mpsc::Sender<Result<Bytes, StreamCut>>;

/// A streamed body and the sender that feeds it; the body ends when the sender is dropped.
pub fn channel(capacity: usize) -> (ChunkSender, SimBody) {
    let (sender, receiver) = mpsc::channel(capacity);
    (sender, ChannelBody { receiver }.boxed())
}

struct ChannelBody {
    receiver: mpsc::Receiver<Result<Bytes, StreamCut>>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = StreamCut;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StreamCut>>> {
        self.receiver.poll_recv(cx).map(|item| item.map(|chunk| chunk.map(Frame::data)))
    }
}
