//! The HTTP/1.1 client `force_close` and `spread` speak: one request at a time on a
//! connection the caller holds, its head and body written in one vectored write, and the
//! response read straight off the socket into one buffer that the body's frames are cut
//! from. A connection is closed after its response (`force_close`) or handed back to its
//! keeper once the response ended cleanly (`spread`). Connections held by their caller need
//! none of a general client's machinery (a connection task, a dispatch channel, a pool),
//! and each of those cost CPU and kilobytes per stream.

mod body;
mod head;
mod request;
mod socket;

use std::io;

use bytes::BytesMut;
use http::{Method, Response};
use tokio::io::{AsyncRead, AsyncWrite};

pub use body::{Keep, WireBody, fill};
pub use head::{ContentLengths, content_length, head_length};
pub use request::{Buffered, Outgoing};
pub use socket::{Socket, still_open};

use crate::gateway::body::BoxError;

/// Bytes read from the socket at a time (the buffer grows by this much when full).
const READ_CHUNK: usize = 4096;

/// The largest response head accepted, 1xx heads before it included.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Why an exchange with a replica failed.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("writing the request")]
    Write(#[source] io::Error),
    #[error("the request body failed")]
    RequestBody(#[source] BoxError),
    #[error("the request body is not the {announced} bytes its size said")]
    RequestBodyLength { announced: u64 },
    #[error("reading the response")]
    Read(#[source] io::Error),
    #[error("the connection closed before the response head was complete")]
    ClosedBeforeHead,
    #[error("malformed response head")]
    MalformedHead(#[source] httparse::Error),
    #[error("response head over {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    #[error("response framing: {0}")]
    Framing(&'static str),
    #[error("the connection closed {missing} bytes before the end of the response body")]
    Truncated { missing: u64 },
    #[error("the connection closed inside a chunked response body")]
    ChunkedTruncated,
    #[error("malformed chunked response body: {0}")]
    MalformedChunk(&'static str),
}

impl WireError {
    /// Whether the replica answered something that is not HTTP (or the request body
    /// failed): such a request is not retried. Everything else is the connection closing.
    pub fn is_malformed(&self) -> bool {
        matches!(
            self,
            Self::RequestBody(_)
                | Self::RequestBodyLength { .. }
                | Self::MalformedHead(_)
                | Self::HeadTooLarge
                | Self::Framing(_)
                | Self::MalformedChunk(_)
        )
    }
}

/// What becomes of a connection after its exchange.
pub enum After<S> {
    /// The request asks the replica to close it; it closes with the response body.
    Close,
    /// Handed to the keeper once the response ended where its framing said, with nothing
    /// after it and the replica willing to go on; closed otherwise.
    Keep(Keep<S>),
}

/// Sends `request` (origin-form target, `Host` set, or a buffered client request) on `io` and returns the response once
/// its head is read; the body streams from the socket as it is polled.
pub async fn exchange<S>(
    mut io: S,
    request: Outgoing<'_>,
    after: After<S>,
) -> Result<Response<WireBody<S>>, WireError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let head_request = request.method() == Method::HEAD;
    let close = matches!(after, After::Close);
    request::write(&mut io, request, close).await?;
    let mut buffer = BytesMut::with_capacity(READ_CHUNK);
    let head = head::read(&mut io, &mut buffer).await?;
    let framing = head::framing(&head, head_request)?;
    let keep = match after {
        After::Keep(keep) if head::goes_on(&head, framing) => Some(keep),
        _ => None,
    };
    let body = WireBody::new(io, buffer, framing, keep);
    let mut response = Response::new(body);
    *response.status_mut() = head.status;
    *response.version_mut() = head.version;
    // The replica's headers ride as their lines: a map of them is built only if a server
    // needs one (see `replica_headers`).
    response.extensions_mut().insert(head.headers);
    Ok(response)
}

#[cfg(test)]
mod tests;
