//! Reading one request off an HTTP/1.1 connection: the head found by its empty line and
//! parsed once (header values kept as views into the bytes read), then the body, framed by
//! its `Content-Length`, read whole within the body deadline. Whatever this reader does
//! not take on (HTTP/2's preface, HTTP/1.0, chunked or oversized bodies, `Expect`,
//! upgrades, absolute targets, anything malformed or over a limit) is handed, with every
//! byte read so far, to hyper, whose answers (400, 413, 431, ...) stay the ones clients
//! get. An HTTP/1.1 head whose framing is ambiguous (see [`framing`]) is handed to no one:
//! it is answered with its refusal and the connection closes.
//!
//! [`framing`]: crate::gateway::framing

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::LazyLock;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, EXPECT, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri, Version};
use tokio::io::AsyncRead;

use crate::gateway::forward::wire::{content_length, fill, head_length};
use crate::gateway::framing::{FramingCheck, FramingError, Refused};
use crate::gateway::listen::body_deadline::BodyTimedOut;
use crate::gateway::listen::client_body::ClientBody;
use crate::openai::request::Endpoint;

/// Headers parsed in place; a request with more is handed over.
const PARSED_HEADERS: usize = 128;

/// The most room made at once for a body still arriving (larger bodies grow the buffer as
/// they come).
const BODY_ROOM_STEP: usize = 64 * 1024;

/// The limits a connection's requests are read under, from the config at its opening.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest head (hyper's `max_buf_size`: 431 above it).
    pub head_bytes: usize,
    pub headers: usize,
    /// The largest body read here (the gateway's body limit); larger goes to hyper.
    pub body_bytes: usize,
    /// The time a body has to arrive once its head has.
    pub body_deadline: Duration,
}

/// A request head this reader takes on.
pub struct Head {
    pub request: Request<()>,
    /// Body bytes that follow the head.
    pub body_length: usize,
    /// The client asked to close the connection after this request.
    pub close: bool,
}

/// What the next read of a connection found.
#[allow(clippy::large_enum_variant, reason = "matched at once; a box would cost a request")]
pub enum ReadHead {
    Request(Head),
    /// The connection goes to hyper, these bytes first.
    HandOver(Bytes),
    /// The client closed (or the connection failed) before a complete head.
    Closed,
}

/// Reads until a complete head is in `buffer` and takes it out; body bytes read with it
/// stay in `buffer`. Cancel-safe: bytes read stay in `buffer`.
pub async fn read_head<S>(io: &mut S, buffer: &mut BytesMut, limits: &Limits) -> ReadHead
where
    S: AsyncRead + Unpin,
{
    let mut searched = 0;
    let length = loop {
        if let Some(length) = head_length(buffer, searched) {
            break length;
        }
        searched = buffer.len();
        if buffer.len() > limits.head_bytes {
            return ReadHead::HandOver(buffer.split().freeze());
        }
        match read_more(io, buffer).await {
            Ok(0) | Err(_) => return ReadHead::Closed,
            Ok(_) => {}
        }
    };
    if length > limits.head_bytes {
        return ReadHead::HandOver(buffer.split().freeze());
    }
    let bytes = buffer.split_to(length).freeze();
    match parse(&bytes, limits) {
        Some(head) => ReadHead::Request(head),
        None => {
            let mut replay = BytesMut::with_capacity(bytes.len() + buffer.len());
            replay.extend_from_slice(&bytes);
            replay.extend_from_slice(&buffer.split());
            ReadHead::HandOver(replay.freeze())
        }
    }
}

/// Reads the body `head` announced (its first bytes may be in `buffer` already) within the
/// body deadline, and returns the request with it. A body that did not arrive is a failed
/// body (the request path answers it), and the connection must close after the answer:
/// `false` is returned then.
pub async fn read_body<S>(
    io: &mut S,
    buffer: &mut BytesMut,
    head: Head,
    limits: &Limits,
) -> (Request<ClientBody>, bool)
where
    S: AsyncRead + Unpin,
{
    let Head { request, body_length, .. } = head;
    if buffer.len() < body_length {
        let arrived = tokio::time::timeout(limits.body_deadline, async {
            while buffer.len() < body_length {
                // Room as the bytes come: a declared length is a promise, not memory to
                // commit before anything arrived.
                let room = (body_length - buffer.len()).min(BODY_ROOM_STEP);
                if buffer.capacity() - buffer.len() < room {
                    buffer.reserve(room);
                }
                if read_more(io, buffer).await? == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the client closed the connection inside the request body",
                    ));
                }
            }
            Ok(())
        })
        .await;
        let failed = match arrived {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(ClientBody::failed(error)),
            Err(_) => Some(ClientBody::failed(BodyTimedOut(limits.body_deadline))),
        };
        if let Some(body) = failed {
            buffer.clear();
            return (request.map(|()| body), false);
        }
    }
    let body = buffer.split_to(body_length).freeze();
    (request.map(|()| ClientBody::whole(body)), true)
}

/// Reads what the client sent next into `buffer` (see [`fill`]: an empty buffer holds no
/// memory while it waits).
pub async fn read_more<S>(io: &mut S, buffer: &mut BytesMut) -> io::Result<usize>
where
    S: AsyncRead + Unpin,
{
    std::future::poll_fn(|cx| fill(Pin::new(&mut *io), buffer, cx)).await
}

/// Parses a whole head; `None` for anything this reader leaves to hyper. A head whose
/// framing is ambiguous is not left to anyone: it comes back marked [`Refused`], without a
/// body, and the connection closes once it is answered.
fn parse(bytes: &Bytes, limits: &Limits) -> Option<Head> {
    let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; PARSED_HEADERS];
    let mut parsed = httparse::Request::new(&mut []);
    let status = httparse::ParserConfig::default()
        .parse_request_with_uninit_headers(&mut parsed, bytes, &mut headers)
        .ok()?;
    if status != httparse::Status::Complete(bytes.len())
        || parsed.version != Some(1)
        || parsed.headers.len() > limits.headers
    {
        return None;
    }
    let method = Method::from_bytes(parsed.method?.as_bytes()).ok()?;
    let target = parsed.path?;
    if method == Method::CONNECT {
        return Some(refused(method, target, FramingError::Connect));
    }
    let mut hand_over = !target.starts_with('/');
    // Room for the request id, should the gateway add one, without growing the map.
    let mut map = HeaderMap::with_capacity(parsed.headers.len() + 1);
    let (mut body_length, mut close) = (None, false);
    let mut framing = FramingCheck::default();
    for header in parsed.headers.iter() {
        let name = HeaderName::from_bytes(header.name.as_bytes()).ok()?;
        framing.header(&name, header.value);
        if name == TRANSFER_ENCODING || name == EXPECT || name == UPGRADE {
            hand_over = true;
        }
        if name == CONTENT_LENGTH {
            // A repeat, even an equal one, is left to hyper's rules.
            let length = content_length(header.value)
                .and_then(|length| usize::try_from(length).ok())
                .filter(|&length| length <= limits.body_bytes);
            match (body_length, length) {
                (None, Some(length)) => body_length = Some(length),
                _ => hand_over = true,
            }
        }
        if name == CONNECTION {
            for token in std::str::from_utf8(header.value).ok()?.split(',').map(str::trim) {
                hand_over |= token.eq_ignore_ascii_case("upgrade");
                close |= token.eq_ignore_ascii_case("close");
            }
        }
        if !hand_over {
            map.append(name, HeaderValue::from_maybe_shared(bytes.slice_ref(header.value)).ok()?);
        }
    }
    if let Err(error) = framing.finish(true) {
        return Some(refused(method, target, error));
    }
    if hand_over {
        return None;
    }
    let uri = match inference_target(target) {
        Some(uri) => uri,
        // A copy: the target outlives the request (its context keeps it for the stream's
        // observer), and a view would keep the whole read buffer alive with it.
        None => Uri::from_maybe_shared(Bytes::copy_from_slice(target.as_bytes())).ok()?,
    };
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = map;
    Some(Head { request, body_length: body_length.unwrap_or(0), close })
}

/// A head refused for its framing: no headers, no body, and the connection closes after
/// its answer.
fn refused(method: Method, target: &str, error: FramingError) -> Head {
    let uri = Uri::try_from(target).unwrap_or_else(|_| Uri::from_static("/"));
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    request.extensions_mut().insert(Refused(error));
    Head { request, body_length: 0, close: true }
}

/// The target of an inference request (`/v1/chat/completions`, `/v1/completions`), parsed
/// once per process: most requests name one of the two, and parsing and copying a target
/// cost more than the rest of the request line.
fn inference_target(target: &str) -> Option<Uri> {
    static TARGETS: LazyLock<[Uri; 2]> = LazyLock::new(|| {
        [Endpoint::Chat, Endpoint::Completions].map(|endpoint| Uri::from_static(endpoint.path()))
    });
    TARGETS.iter().find(|uri| uri.path() == target).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_inference_targets_themselves_are_taken_ready_made() {
        for target in ["/v1/chat/completions", "/v1/completions"] {
            let uri = inference_target(target).unwrap();
            assert_eq!(uri, Uri::from_maybe_shared(Bytes::from_static(target.as_bytes())).unwrap());
        }
        for other in ["/v1/completions?stream=1", "/v1/chat/completions/", "/v1/models", "/"] {
            assert!(inference_target(other).is_none(), "{other}");
        }
    }
}
