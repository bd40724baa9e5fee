//! Reading a response head: interim (1xx) heads skipped, the end-to-end headers kept as
//! their lines (see `forward::replica_headers`), and the body's framing decided by RFC 9112
//! §6.3. The connection's own headers (hop-by-hop, and those `Connection` names) are read
//! for the framing and the connection's fate while the head is parsed, and left out of the
//! headers passed on: a proxy must not forward them, and reading them once here spares the
//! lookups and removals a later pass would cost on every response.

use std::mem::MaybeUninit;
use std::sync::LazyLock;

use bytes::{Buf, BytesMut};
use http::{StatusCode, Version};
use memchr::memmem::Finder;
use tokio::io::AsyncRead;

use super::body::{Framing, fill};
use super::{MAX_HEAD_BYTES, WireError};
use crate::gateway::forward::replica_headers::ReplicaHeaders;
use crate::gateway::forward::request::{header_items, is_hop_by_hop_name, listed_names};

/// Headers a response head may carry.
const MAX_HEADERS: usize = 100;

/// A final response head.
#[derive(Debug)]
pub struct Head {
    pub status: StatusCode,
    pub version: Version,
    /// The end-to-end headers: without the hop-by-hop ones, which [`Self::connection`]
    /// says what they meant.
    pub headers: ReplicaHeaders,
    pub connection: ConnectionHeaders,
}

/// What the headers that concern the connection and the body's framing said.
#[derive(Debug, Default)]
pub struct ConnectionHeaders {
    /// `Transfer-Encoding` was sent.
    transfer_encoding: bool,
    /// Its last coding named was `chunked`.
    chunked_last: bool,
    /// The `Content-Length` items, over every line.
    lengths: ContentLengths,
    /// `Connection: close`.
    close: bool,
}

impl ConnectionHeaders {
    /// Takes in one `Transfer-Encoding` value (a value that is not visible ASCII names no
    /// coding, as `HeaderValue::to_str` reads it).
    fn transfer_encoding(&mut self, value: &[u8]) {
        self.transfer_encoding = true;
        if let Some(last) = header_items(value).rfind(|coding| !coding.is_empty()) {
            self.chunked_last = last.eq_ignore_ascii_case(b"chunked");
        }
    }

    /// Takes in one `Connection` value; returns the header names it lists, each
    /// connection-specific too and so left out as well.
    fn connection<'a>(&mut self, value: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
        self.close |= header_items(value).any(|token| token.eq_ignore_ascii_case(b"close"));
        listed_names(value)
    }
}

/// A response's `Content-Length` items, over every line (and every comma-separated item of
/// a line): the one length they agree on, or why they are not one. The pooled client's
/// responses are judged by the same rule (`keep_alive`).
#[derive(Debug, Default)]
pub struct ContentLengths {
    agreed: Option<u64>,
    error: Option<&'static str>,
    items: u32,
}

impl ContentLengths {
    /// Takes in one `Content-Length` value: a comma-separated list of equal lengths.
    pub fn add(&mut self, value: &[u8]) {
        for item in header_items(value) {
            self.items += 1;
            match content_length(item) {
                None => self.error = Some("bad content-length"),
                Some(length) if self.agreed.is_some_and(|seen| seen != length) => {
                    self.error = Some("content-lengths disagree");
                }
                Some(length) => self.agreed = Some(length),
            }
        }
    }

    /// Items seen.
    pub fn items(&self) -> u32 {
        self.items
    }

    /// The length every item agreed on (`None`: no item), or why they do not agree.
    pub fn agreed(&self) -> Result<Option<u64>, &'static str> {
        match self.error {
            Some(error) => Err(error),
            None => Ok(self.agreed),
        }
    }
}

/// Reads from `io` until a final response head is in `buffer`, and takes it out; what
/// follows it (the body's first bytes) stays in `buffer`.
pub async fn read<S>(io: &mut S, buffer: &mut BytesMut) -> Result<Head, WireError>
where
    S: AsyncRead + Unpin,
{
    let mut discarded = 0;
    // Bytes already searched for the head's end, so a head read in pieces is searched once.
    let mut searched = 0;
    loop {
        if let Some(length) = head_length(buffer, searched) {
            let head = parse(&buffer[..length])?;
            buffer.advance(length);
            if !head.status.is_informational() {
                return Ok(head);
            }
            if head.status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(WireError::Framing("a switch of protocols was never asked for"));
            }
            if !is_expected_interim(head.status) {
                return Err(WireError::Framing("an interim response that was never asked for"));
            }
            discarded += length;
            searched = 0;
            continue;
        }
        searched = buffer.len();
        if discarded + buffer.len() >= MAX_HEAD_BYTES {
            return Err(WireError::HeadTooLarge);
        }
        let read = std::future::poll_fn(|cx| fill(std::pin::Pin::new(&mut *io), buffer, cx));
        if read.await.map_err(WireError::Read)? == 0 {
            return Err(WireError::ClosedBeforeHead);
        }
    }
}

/// The interim answers a replica may send before its response: `100 Continue` and
/// `103 Early Hints`. Any other 1xx was not asked for (the gateway sends no `Expect` and
/// asks for no upgrade), and a reply that holds one is refused as a whole (HAProxy: 502).
pub fn is_expected_interim(status: StatusCode) -> bool {
    status == StatusCode::CONTINUE || status.as_u16() == 103
}

/// The length of the head (a request's or a response's) at the start of `buffer`, up to
/// and with its empty line, once that line is there; `searched` bytes are known not to
/// hold it. A head holds no empty line before its end, so the first one ends it (CRLF or,
/// leniently, bare LF endings). Two whole-buffer searches, each vectorised and built once:
/// a search from one line break to the next cost a call per line.
pub fn head_length(buffer: &[u8], searched: usize) -> Option<usize> {
    static CRLF_EMPTY_LINE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\n\r\n"));
    static LF_EMPTY_LINE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\n\n"));
    // A line break in the last two bytes searched may start the empty line.
    let from = searched.saturating_sub(2);
    let window = &buffer[from..];
    let crlf = CRLF_EMPTY_LINE.find(window);
    // A bare LF empty line counts only if it comes first: searched for before the CRLF one
    // (its first line break at most one byte before the CRLF one's).
    let before = crlf.map_or(window, |at| &window[..at + 1]);
    match LF_EMPTY_LINE.find(before) {
        Some(at) => Some(from + at + 2),
        None => crlf.map(|at| from + at + 3),
    }
}

/// Parses a whole head (its empty line included) into its status and the lines of its
/// end-to-end headers.
fn parse(bytes: &[u8]) -> Result<Head, WireError> {
    let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut response, bytes, &mut headers)
        .map_err(WireError::MalformedHead)?;
    if parsed != httparse::Status::Complete(bytes.len()) {
        return Err(WireError::Framing("an empty line inside the head"));
    }
    let code = response.code.ok_or(WireError::Framing("no status code"))?;
    let status = StatusCode::from_u16(code).map_err(|_| WireError::Framing("bad status code"))?;
    let version = if response.version == Some(0) { Version::HTTP_10 } else { Version::HTTP_11 };
    let mut kept = ReplicaHeaders::builder(bytes.len());
    let mut connection = ConnectionHeaders::default();
    // Header names a `Connection` value lists (rare): left out once all are read.
    let mut listed: Vec<&[u8]> = Vec::new();
    for header in response.headers.iter() {
        let name = header.name.as_bytes();
        if is_hop_by_hop_name(name) {
            if name.eq_ignore_ascii_case(b"transfer-encoding") {
                connection.transfer_encoding(header.value);
            } else if name.eq_ignore_ascii_case(b"connection") {
                listed.extend(connection.connection(header.value));
            }
            continue;
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            connection.lengths.add(header.value);
        }
        // httparse let through only what a header name and value may hold (the same bytes
        // `HeaderName` and `HeaderValue` take).
        kept.push(name, header.value);
    }
    // A transfer coding overrides a length, which is not passed on (RFC 9112 §6.3).
    let overridden = connection.transfer_encoding;
    let length = connection.lengths.agreed().ok().flatten().filter(|_| !overridden);
    let mut headers = kept.finish(length);
    // Several lengths that agree are passed on as one (those that disagree fail framing).
    if let Some(length) = length
        && connection.lengths.items() > 1
    {
        headers.add(http::header::CONTENT_LENGTH, length.into());
    }
    if overridden || !listed.is_empty() {
        headers = headers.without(|name| {
            (overridden && name.eq_ignore_ascii_case(b"content-length"))
                || listed.iter().any(|listed| listed.eq_ignore_ascii_case(name))
        });
    }
    Ok(Head { status, version, headers, connection })
}

/// A `Content-Length` value (or one item of a comma-separated list of them): digits only
/// (RFC 9110 §8.6), around optional whitespace. Rust's integer parser also takes a leading
/// `+`, which another server on the path might read differently.
pub fn content_length(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |length, &byte| {
        let digit = byte.checked_sub(b'0').filter(|digit| *digit <= 9)?;
        length.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// Whether the connection may carry another request after this response: HTTP/1.1
/// without `Connection: close`, a body that ends by its framing, not by a close, and no
/// length beside a transfer coding (a replica that sends both may have meant the length:
/// HAProxy closes such a connection too).
pub fn goes_on(head: &Head, framing: Framing) -> bool {
    let connection = &head.connection;
    let both = connection.transfer_encoding && connection.lengths.items() > 0;
    head.version == Version::HTTP_11 && !connection.close && !both && framing != Framing::UntilClose
}

/// How the body after `head` is delimited (RFC 9112 §6.3).
pub fn framing(head: &Head, head_request: bool) -> Result<Framing, WireError> {
    if head_request
        || head.status == StatusCode::NO_CONTENT
        || head.status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Empty);
    }
    let connection = &head.connection;
    if connection.transfer_encoding {
        return Ok(if connection.chunked_last { Framing::Chunked } else { Framing::UntilClose });
    }
    let length = connection.lengths.agreed().map_err(WireError::Framing)?;
    Ok(length.map_or(Framing::UntilClose, Framing::Length))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(head: &str) -> Result<Head, WireError> {
        parse(head.as_bytes())
    }

    #[test]
    fn the_connection_headers_are_read_and_left_out() {
        let head = parsed(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nConnection: keep-alive, \
             X-Hop\r\nx-hop: 1\r\nkeep-alive: timeout=5\r\ntransfer-encoding: chunked\r\n\
             x-request-id: a\r\n\r\n",
        )
        .unwrap();
        let names: Vec<&[u8]> = head.headers.lines().map(|(name, _)| name).collect();
        assert_eq!(names, [&b"content-type"[..], b"x-request-id"]);
        assert_eq!(framing(&head, false).unwrap(), Framing::Chunked);
        assert!(goes_on(&head, Framing::Chunked));
    }

    #[test]
    fn close_and_the_last_coding_decide_as_the_headers_say() {
        let head = parsed("HTTP/1.1 200 OK\r\nconnection: Close\r\ncontent-length: 2\r\n\r\n");
        let head = head.unwrap();
        assert_eq!(framing(&head, false).unwrap(), Framing::Length(2));
        assert!(!goes_on(&head, Framing::Length(2)));
        assert_eq!(head.headers.lines().collect::<Vec<_>>(), [(&b"content-length"[..], &b"2"[..])]);
        assert_eq!(head.headers.content_length(), Some(2));
        // The last coding named wins, over several values; an empty list names none.
        let head = parsed(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntransfer-encoding: gzip\r\n\
             transfer-encoding: ,\r\n\r\n",
        );
        assert_eq!(framing(&head.unwrap(), false).unwrap(), Framing::UntilClose);
        let head = parsed("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n");
        assert_eq!(framing(&head.unwrap(), false).unwrap(), Framing::Chunked);
    }

    #[test]
    fn content_lengths_must_agree_and_be_digits() {
        let length = |value: &str| {
            let head = parsed(&format!("HTTP/1.1 200 OK\r\ncontent-length: {value}\r\n\r\n"));
            framing(&head.unwrap(), false).map_err(|error| error.to_string())
        };
        assert_eq!(length("7, 7").unwrap(), Framing::Length(7));
        assert!(length("7, 8").unwrap_err().contains("disagree"));
        assert!(length("+7").unwrap_err().contains("bad content-length"));
        assert!(length("18446744073709551616").unwrap_err().contains("bad content-length"));
        assert_eq!(length("18446744073709551615").unwrap(), Framing::Length(u64::MAX));
        assert_eq!(length(" 007 ").unwrap(), Framing::Length(7));
        let twice = parsed("HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n");
        assert!(framing(&twice.unwrap(), false).is_err());
        // A chunked body ignores the length; a HEAD answer and a 204 have no body.
        let both =
            parsed("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: x\r\n\r\n");
        let both = both.unwrap();
        assert_eq!(framing(&both, false).unwrap(), Framing::Chunked);
        // ... and is not passed on, wherever it stood.
        assert_eq!(both.headers.lines().count(), 0);
        let after =
            parsed("HTTP/1.1 200 OK\r\ncontent-length: 3\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(after.unwrap().headers.content_length(), None);
        let bad = parsed("HTTP/1.1 204 No Content\r\ncontent-length: x\r\n\r\n").unwrap();
        assert_eq!(framing(&bad, false).unwrap(), Framing::Empty);
        let head = parsed("HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n").unwrap();
        assert_eq!(framing(&head, true).unwrap(), Framing::Empty);
    }

    #[test]
    fn an_http_1_0_answer_or_one_without_framing_ends_the_connection() {
        let head = parsed("HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n").unwrap();
        assert!(!goes_on(&head, Framing::Length(2)));
        let head = parsed("HTTP/1.1 200 OK\r\n\r\n").unwrap();
        assert_eq!(framing(&head, false).unwrap(), Framing::UntilClose);
        assert!(!goes_on(&head, Framing::UntilClose));
    }

    #[test]
    fn a_head_ends_at_its_first_empty_line_wherever_the_search_resumes() {
        let head = b"HTTP/1.1 200 OK\r\na: b\r\n\r\nbody\r\n\r\n";
        for searched in 0..=24 {
            assert_eq!(head_length(head, searched), Some(25), "resumed at {searched}");
        }
        assert_eq!(head_length(b"HTTP/1.1 200 OK\na: b\n\nbody", 0), Some(22));
        assert_eq!(head_length(b"HTTP/1.1 200 OK\r\na: b\r\n\r", 0), None);
        assert_eq!(head_length(b"HTTP/1.1 200 OK\r\na: b\r\n", 0), None);
    }

    /// The first empty line, found one line break at a time: what [`head_length`] must
    /// agree with.
    fn first_empty_line(buffer: &[u8]) -> Option<usize> {
        (0..buffer.len()).filter(|&at| buffer[at] == b'\n').find_map(|at| {
            match (buffer.get(at + 1), buffer.get(at + 2)) {
                (Some(b'\n'), _) => Some(at + 2),
                (Some(b'\r'), Some(b'\n')) => Some(at + 3),
                _ => None,
            }
        })
    }

    #[test]
    fn the_head_end_is_the_first_empty_line_of_any_mix_of_line_endings() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(15);
        let mut found = 0;
        for _ in 0..20_000 {
            let length = rng.random_range(0..24);
            let buffer: Vec<u8> =
                (0..length).map(|_| [b'\r', b'\n', b'a'][rng.random_range(0..3)]).collect();
            let expected = first_empty_line(&buffer);
            found += usize::from(expected.is_some());
            // Searched in pieces, as bytes arrive, it ends at the same place.
            let searched = rng.random_range(0..=length);
            let searched =
                if first_empty_line(&buffer[..searched]).is_some() { 0 } else { searched };
            assert_eq!(
                head_length(&buffer, 0),
                expected,
                "{:?}",
                buffer.escape_ascii().to_string()
            );
            assert_eq!(head_length(&buffer, searched), expected, "resumed at {searched}");
        }
        // Both outcomes were tried, many times each.
        assert!(found > 5_000 && found < 15_000, "{found} of 20,000 had an empty line");
    }
}
