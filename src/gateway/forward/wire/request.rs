//! Writing a request: its head (with `Connection: close` when the connection ends with it)
//! and the body's own framing (a length when the body knows it, chunks otherwise), head and
//! first body bytes in one write: copied together when the body is small (a plain `send`
//! costs the kernel less than a `writev`: README, "Performance"), else vectored. A client's
//! buffered request is written straight from the client's head, with no copy of it made
//! for the replica.

use bytes::{Buf, Bytes};
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::request::Parts;
use http::{Method, Request};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::WireError;
use crate::gateway::body::ProxyBody;
use crate::gateway::forward::request::is_hop_by_hop;

/// A body of up to this many bytes is copied behind the head, to go out in one plain write.
const JOINED_BODY_BYTES: usize = 16 * 1024;

/// A request as the wire client sends it.
pub enum Outgoing<'a> {
    /// Pointed at the replica already (`forward::request::to_upstream`, origin form).
    Request(Request<ProxyBody>),
    /// A client's request whose body is read whole, sent on as it came (see [`Buffered`]).
    Buffered(Buffered<'a>),
}

/// A client's request with its body read whole, written from the client's head: its
/// method and target, `Host` naming the replica, the client's other headers, and the
/// body's length. Only a head without hop-by-hop headers goes this way ([`Self::new`]);
/// one with them is copied and stripped first.
pub struct Buffered<'a> {
    parts: &'a Parts,
    body: Bytes,
    host: &'a str,
}

impl<'a> Buffered<'a> {
    /// `None` when the head carries hop-by-hop headers (rare: clients seldom send any but
    /// `Connection`), which a copy must strip.
    pub fn new(parts: &'a Parts, body: Bytes, host: &'a str) -> Option<Self> {
        (!parts.headers.keys().any(is_hop_by_hop)).then_some(Self { parts, body, host })
    }
}

impl Outgoing<'_> {
    pub fn method(&self) -> &Method {
        match self {
            Self::Request(request) => request.method(),
            Self::Buffered(buffered) => &buffered.parts.method,
        }
    }
}

/// Writes `request` to `io`, asking the replica to close the connection after it if
/// `close`, and flushes it.
pub async fn write<S>(io: &mut S, request: Outgoing<'_>, close: bool) -> Result<(), WireError>
where
    S: AsyncWrite + Unpin,
{
    let request = match request {
        Outgoing::Request(request) => request,
        Outgoing::Buffered(buffered) => return write_buffered(io, buffered, close).await,
    };
    let (parts, mut body) = request.into_parts();
    let framing = framing_of(&parts.method, &body);
    let first = next_data(&mut body).await?;
    let more = first.is_some();
    let mut written = first.as_ref().map_or(0, |data| data.len() as u64);
    match (framing, first) {
        (Framing::Chunked, Some(data)) => {
            let head = encode_head(&parts, framing, close, 0);
            let mut out = Bytes::from(head).chain(chunk(data));
            io.write_all_buf(&mut out).await.map_err(WireError::Write)?;
        }
        (_, Some(data)) => {
            let head = encode_head(&parts, framing, close, joined_room(&data));
            write_head_and_body(io, head, data).await?;
        }
        (_, None) => {
            let head = encode_head(&parts, framing, close, 0);
            io.write_all(&head).await.map_err(WireError::Write)?;
        }
    }
    if more {
        while let Some(data) = next_data(&mut body).await? {
            written += data.len() as u64;
            let sent = match framing {
                Framing::Chunked => io.write_all_buf(&mut chunk(data)).await,
                Framing::Length(_) | Framing::None => io.write_all(&data).await,
            };
            sent.map_err(WireError::Write)?;
        }
    }
    match framing {
        Framing::Chunked => io.write_all(b"0\r\n\r\n").await.map_err(WireError::Write)?,
        Framing::Length(announced) if written != announced => {
            return Err(WireError::RequestBodyLength { announced });
        }
        Framing::Length(_) | Framing::None => {}
    }
    io.flush().await.map_err(WireError::Write)
}

/// Writes a buffered client request: head and body in one write (a copy when the body is
/// small, else vectored).
async fn write_buffered<S>(io: &mut S, request: Buffered<'_>, close: bool) -> Result<(), WireError>
where
    S: AsyncWrite + Unpin,
{
    let Buffered { parts, body, host } = request;
    let framing = framing_for(&parts.method, Some(body.len() as u64));
    let head = encode_head_to(parts, Some(host), framing, close, joined_room(&body));
    write_head_and_body(io, head, body).await?;
    io.flush().await.map_err(WireError::Write)
}

/// Room to reserve behind a head for `body`: its length if it will be copied there.
fn joined_room(body: &Bytes) -> usize {
    if body.len() <= JOINED_BODY_BYTES { body.len() } else { 0 }
}

/// Writes `head` and then `body` (unframed): a small body copied behind the head (which
/// [`joined_room`] made room for) and sent in one plain write, a large one vectored.
async fn write_head_and_body<S>(io: &mut S, mut head: Vec<u8>, body: Bytes) -> Result<(), WireError>
where
    S: AsyncWrite + Unpin,
{
    if body.len() <= JOINED_BODY_BYTES {
        head.extend_from_slice(&body);
        io.write_all(&head).await.map_err(WireError::Write)
    } else {
        io.write_all_buf(&mut Bytes::from(head).chain(body)).await.map_err(WireError::Write)
    }
}

/// How the request body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body and no length (a GET, HEAD, ... with an empty body).
    None,
    Length(u64),
    Chunked,
}

/// The framing `body` gets: its length when it knows it, chunks otherwise.
fn framing_of(method: &Method, body: &ProxyBody) -> Framing {
    framing_for(method, body.size_hint().exact())
}

/// The framing of a body of `length` bytes (`None`: not known ahead).
fn framing_for(method: &Method, length: Option<u64>) -> Framing {
    match length {
        Some(0) if !carries_body(method) => Framing::None,
        Some(length) => Framing::Length(length),
        None => Framing::Chunked,
    }
}

/// Whether an empty body of `method` is announced as `Content-Length: 0` (as hyper does:
/// methods whose requests normally carry content).
fn carries_body(method: &Method) -> bool {
    !matches!(
        *method,
        Method::GET
            | Method::HEAD
            | Method::DELETE
            | Method::OPTIONS
            | Method::CONNECT
            | Method::TRACE
    )
}

/// The request line and headers. The body's framing replaces whatever framing headers the
/// request carried (the client's framing described the client's connection).
/// `room` more bytes are reserved, for body bytes written behind it.
fn encode_head(parts: &Parts, framing: Framing, close: bool, room: usize) -> Vec<u8> {
    encode_head_to(parts, None, framing, close, room)
}

/// [`encode_head`], with `Host` naming `host` instead of the request's own when given.
fn encode_head_to(
    parts: &Parts,
    host: Option<&str>,
    framing: Framing,
    close: bool,
    room: usize,
) -> Vec<u8> {
    let target = parts.uri.path_and_query().map_or("/", |path| path.as_str());
    let headers_size: usize =
        parts.headers.iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum();
    let host_size = host.map_or(0, str::len);
    let mut head = Vec::with_capacity(
        parts.method.as_str().len() + target.len() + headers_size + host_size + 96 + room,
    );
    head.extend_from_slice(parts.method.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(host) = host {
        head.extend_from_slice(b"host: ");
        head.extend_from_slice(host.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    for (name, value) in &parts.headers {
        if name == CONTENT_LENGTH
            || name == TRANSFER_ENCODING
            || name == CONNECTION
            || (host.is_some() && name == HOST)
        {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if close {
        head.extend_from_slice(b"connection: close\r\n");
    }
    match framing {
        Framing::None => {}
        Framing::Length(length) => {
            head.extend_from_slice(b"content-length: ");
            head.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => head.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// One chunk of a chunked body: its size in hex, the data, and the line end.
fn chunk(data: Bytes) -> bytes::buf::Chain<bytes::buf::Chain<Bytes, Bytes>, &'static [u8]> {
    let size = Bytes::from(format!("{:x}\r\n", data.len()));
    size.chain(data).chain(&b"\r\n"[..])
}

/// The body's next non-empty data frame; trailers are dropped.
async fn next_data(body: &mut ProxyBody) -> Result<Option<Bytes>, WireError> {
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(WireError::RequestBody)?;
        if let Ok(data) = frame.into_data()
            && !data.is_empty()
        {
            return Ok(Some(data));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::body::{empty, full};

    fn head_of(request: Request<ProxyBody>) -> String {
        let (parts, body) = request.into_parts();
        String::from_utf8(encode_head(&parts, framing_of(&parts.method, &body), true, 0)).unwrap()
    }

    #[test]
    fn the_head_frames_the_body_by_its_own_length() {
        let request = Request::post("/v1/chat/completions")
            .header("host", "r:8000")
            .header("content-length", "999")
            .header("x-request-id", "a b")
            .body(full("{}"))
            .unwrap();
        assert_eq!(
            head_of(request),
            "POST /v1/chat/completions HTTP/1.1\r\nhost: r:8000\r\nx-request-id: a b\r\n\
             connection: close\r\ncontent-length: 2\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn a_buffered_request_goes_out_from_the_client_head_with_the_replica_as_host() {
        let client = Request::post("/v1/chat/completions?x=1")
            .header("host", "gateway:8080")
            .header("content-length", "999")
            .header("x-request-id", "a b")
            .body(())
            .unwrap();
        let (parts, ()) = client.into_parts();
        let buffered = Buffered::new(&parts, Bytes::from_static(b"{}"), "r:8000").unwrap();
        let mut written = Vec::new();
        write(&mut written, Outgoing::Buffered(buffered), true).await.unwrap();
        assert_eq!(
            String::from_utf8(written).unwrap(),
            "POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: r:8000\r\nx-request-id: a b\r\n\
             connection: close\r\ncontent-length: 2\r\n\r\n{}"
        );
        let get = Request::get("/v1/models").body(()).unwrap().into_parts().0;
        let mut written = Vec::new();
        let buffered = Buffered::new(&get, Bytes::new(), "r:8000").unwrap();
        write(&mut written, Outgoing::Buffered(buffered), false).await.unwrap();
        assert_eq!(written, b"GET /v1/models HTTP/1.1\r\nhost: r:8000\r\n\r\n");
    }

    #[test]
    fn a_head_with_hop_by_hop_headers_is_not_sent_as_it_came() {
        let client = Request::post("/v1/x")
            .header("connection", "x-secret")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        assert!(Buffered::new(&client, Bytes::new(), "r:1").is_none());
    }

    #[test]
    fn empty_bodies_are_announced_only_where_a_body_is_expected() {
        let get = Request::get("/v1/models?x=1").body(empty()).unwrap();
        assert_eq!(head_of(get), "GET /v1/models?x=1 HTTP/1.1\r\nconnection: close\r\n\r\n");
        let post = Request::post("/v1/x").body(empty()).unwrap();
        assert!(head_of(post).ends_with("content-length: 0\r\n\r\n"));
    }
}
