//! Writing one response on an HTTP/1.1 connection: the head, then the body's frames as
//! they come, framed by the response's `Content-Length`, by the body's known size, or in
//! chunks. Frames already available go out together with the head or with each other in
//! one write ([`super::outgoing`]); a frame still being produced is waited for while the
//! connection is watched for the client leaving (it drops the body, as hyper does).

use std::io::Write;
use std::pin::Pin;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body::{Body, Frame};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::client_left;
use super::outgoing::Outgoing;
use crate::gateway::body::{BoxError, ProxyBody};
use crate::gateway::forward::replica_headers::ReplicaHeaders;
use crate::gateway::forward::wire::content_length;

/// Bytes queued before they are written even if more frames are ready.
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// Pieces queued before they are written (one vectored write takes this many).
const WRITE_BATCH_PIECES: usize = 32;

/// A body of up to this many bytes, announced by its length, gets room beside its head.
const SMALL_BODY_BYTES: u64 = 4 * 1024;

/// What the request said about its response.
#[derive(Debug, Clone, Copy)]
pub struct Reply<'a> {
    /// The request was a `HEAD`: the head only.
    pub head_request: bool,
    /// The connection closes after this response.
    pub close: bool,
    /// `Keep-Alive: timeout=N` for a connection that stays open.
    pub keep_alive: &'a HeaderValue,
}

/// What the connection does after a response written whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Reads the next request.
    GoOn,
    /// Closes: the request or the response asked it.
    Close,
}

/// Why a response was not written whole.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("writing to the client")]
    Io(#[source] std::io::Error),
    #[error("the client left")]
    ClientLeft,
    #[error("the response body failed")]
    Body(#[source] BoxError),
    #[error("the response body is not the {declared} bytes its length said")]
    Length { declared: u64 },
}

/// How the body goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// Writes `response` to `io`; `buffer` takes what the client sends meanwhile (a pipelined
/// request). Returns once the body has ended and everything is written.
pub async fn write<S>(
    io: &mut S,
    buffer: &mut BytesMut,
    response: Response<ProxyBody>,
    reply: Reply<'_>,
) -> Result<Then, WriteError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut parts, mut body) = response.into_parts();
    let replica = parts.extensions.remove::<ReplicaHeaders>();
    let headers = Headers { own: &parts.headers, replica: replica.as_ref() };
    let scanned = scan(headers);
    let framing = framing(&scanned, parts.status, &body, reply.head_request);
    let close = reply.close || scanned.closes;
    let then = if close { Then::Close } else { Then::GoOn };
    let mut out = Outgoing::with_capacity(head_room(headers, framing));
    encode_head(out.gathered(), parts.status, headers, &scanned, framing, close, reply);
    drop(replica);
    // Header values may be views into the replica's read buffer: let it go.
    drop(parts);
    let mut left = match framing {
        Framing::Length(length) => length,
        Framing::None | Framing::Chunked => 0,
    };
    if framing == Framing::None {
        return flush(io, &mut out).await.map(|()| then);
    }
    loop {
        let frame = match ready_frame(&mut body).await {
            Some(frame) => frame,
            None => {
                flush(io, &mut out).await?;
                tokio::select! {
                    frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)) => frame,
                    () = client_left(io, buffer) => return Err(WriteError::ClientLeft),
                }
            }
        };
        let data = match frame {
            None => break,
            Some(Err(error)) => {
                // What is queued still goes; the missing end tells the client it failed.
                let _ = flush(io, &mut out).await;
                return Err(WriteError::Body(error));
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if !data.is_empty() => data,
                _ => continue,
            },
        };
        match framing {
            Framing::Length(declared) => {
                if data.len() as u64 > left {
                    let _ = flush(io, &mut out).await;
                    return Err(WriteError::Length { declared });
                }
                left -= data.len() as u64;
                out.push(data);
            }
            Framing::Chunked => {
                // Writing to a Vec cannot fail.
                let _ = write!(out.gathered(), "{:x}\r\n", data.len());
                out.push(data);
                out.gathered().extend_from_slice(b"\r\n");
            }
            Framing::None => unreachable!("returned above"),
        }
        if out.remaining() >= WRITE_BATCH_BYTES || out.pieces() + 2 > WRITE_BATCH_PIECES {
            flush(io, &mut out).await?;
        }
    }
    match framing {
        Framing::Chunked => out.gathered().extend_from_slice(b"0\r\n\r\n"),
        Framing::Length(declared) if left > 0 => {
            let _ = flush(io, &mut out).await;
            return Err(WriteError::Length { declared });
        }
        _ => {}
    }
    flush(io, &mut out).await.map(|()| then)
}

/// The next frame if the body has one ready, without waiting (the task is woken when it
/// has one, as any poll would).
async fn ready_frame(body: &mut ProxyBody) -> Option<Option<Result<Frame<Bytes>, BoxError>>> {
    std::future::poll_fn(|cx| match Pin::new(&mut *body).poll_frame(cx) {
        Poll::Ready(frame) => Poll::Ready(Some(frame)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// What one scan of the response's headers found.
struct Scanned {
    /// The response's own single, valid `Content-Length`.
    declared: Option<u64>,
    /// `Content-Length` headers present but not one valid value: replaced.
    bad_length: bool,
    has_date: bool,
    /// The response says `Connection: close`.
    closes: bool,
}

/// A response's headers: its map, and the replica's lines where they came as lines (the
/// map's replace the replica's of the same name).
#[derive(Clone, Copy)]
struct Headers<'a> {
    own: &'a HeaderMap,
    replica: Option<&'a ReplicaHeaders>,
}

fn scan(headers: Headers<'_>) -> Scanned {
    let mut scanned = Scanned { declared: None, bad_length: false, has_date: false, closes: false };
    if let Some(replica) = headers.replica {
        // Checked by the wire client's head parse, and replaced by a map's own length.
        scanned.declared = replica.content_length();
        scanned.has_date = replica.has_date();
    }
    let mut lengths = 0;
    for (name, value) in headers.own {
        if name == CONTENT_LENGTH {
            lengths += 1;
            scanned.declared = content_length(value.as_bytes());
        } else if name == DATE {
            scanned.has_date = true;
        } else if name == CONNECTION {
            scanned.closes |= value.to_str().is_ok_and(|value| {
                value.split(',').any(|token| token.trim().eq_ignore_ascii_case("close"))
            });
        }
    }
    if lengths > 1 || (lengths == 1 && scanned.declared.is_none()) {
        scanned.bad_length = true;
        scanned.declared = None;
    }
    scanned
}

/// The body's framing: none for responses that carry no body (1xx, 204, 304, an answer to
/// `HEAD`: their headers are sent as they are), else the response's own valid
/// `Content-Length`, else the body's known size, else chunks.
fn framing(scanned: &Scanned, status: StatusCode, body: &ProxyBody, head_request: bool) -> Framing {
    if head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Framing::None;
    }
    if let Some(length) = scanned.declared {
        return Framing::Length(length);
    }
    body.size_hint().exact().map_or(Framing::Chunked, Framing::Length)
}

/// Room for the head (its headers and the few the gateway adds) and a small body of a
/// known length, so that both are written from one buffer without it growing.
fn head_room(headers: Headers<'_>, framing: Framing) -> usize {
    let size: usize =
        headers.own.iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum();
    let replica_size = headers.replica.map_or(0, ReplicaHeaders::written_len);
    let body = match framing {
        Framing::Length(length) if length <= SMALL_BODY_BYTES => length as usize,
        _ => 0,
    };
    size + replica_size + 160 + body
}

/// The status line and headers, into `head`: the connection's own headers (`Connection`,
/// `Keep-Alive`, `Transfer-Encoding`) are this connection's, not the response's; the
/// framing and a `Date` are added where missing.
fn encode_head(
    head: &mut Vec<u8>,
    status: StatusCode,
    headers: Headers<'_>,
    scanned: &Scanned,
    framing: Framing,
    close: bool,
    reply: Reply<'_>,
) {
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    head.extend_from_slice(b"\r\n");
    if let Some(replica) = headers.replica {
        replica.put_besides(headers.own, head);
    }
    for (name, value) in headers.own {
        let own = name == CONNECTION
            || name == TRANSFER_ENCODING
            || name.as_str() == "keep-alive"
            || (name == CONTENT_LENGTH && scanned.bad_length);
        if !own {
            put_header(head, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    match framing {
        Framing::Length(length) if scanned.declared.is_none() => {
            put_header(head, b"content-length", itoa::Buffer::new().format(length).as_bytes())
        }
        Framing::Chunked => put_header(head, b"transfer-encoding", b"chunked"),
        _ => {}
    }
    if close {
        put_header(head, b"connection", b"close");
    } else {
        put_header(head, b"keep-alive", reply.keep_alive.as_bytes());
    }
    if !scanned.has_date {
        super::date::with_now(|date| put_header(head, b"date", date));
    }
    head.extend_from_slice(b"\r\n");
}

fn put_header(head: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    head.extend_from_slice(name);
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// Writes everything queued, then flushes.
async fn flush<S: AsyncWrite + Unpin>(io: &mut S, out: &mut Outgoing) -> Result<(), WriteError> {
    out.write_to(io).await.map_err(WriteError::Io)?;
    io.flush().await.map_err(WriteError::Io)
}
