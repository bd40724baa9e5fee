//! Reading a response head: interim (1xx) heads skipped, header values kept as views into
//! the bytes read, and the body's framing decided by RFC 9112 §6.3.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version};
use tokio::io::AsyncRead;

use super::body::{Framing, fill};
use super::{MAX_HEAD_BYTES, WireError};

/// Headers a response head may carry.
const MAX_HEADERS: usize = 100;

/// Headers the gateway may add to a response (see `listen::respond`).
const ADDED_HEADERS: usize = 10;

/// A final response head.
#[derive(Debug)]
pub struct Head {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
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
            let bytes = buffer.split_to(length).freeze();
            let head = parse(&bytes)?;
            if !head.status.is_informational() {
                return Ok(head);
            }
            if head.status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(WireError::Framing("a switch of protocols was never asked for"));
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

/// The length of the head (a request's or a response's) at the start of `buffer`, up to
/// and with its empty line, once that line is there; `searched` bytes are known not to
/// hold it. A head holds no empty line before its end, so the first one ends it (CRLF or,
/// leniently, bare LF endings).
pub fn head_length(buffer: &[u8], searched: usize) -> Option<usize> {
    let from = searched.saturating_sub(2);
    memchr::memchr_iter(b'\n', &buffer[from..]).map(|at| from + at + 1).find_map(|next| {
        match (buffer.get(next), buffer.get(next + 1)) {
            (Some(b'\n'), _) => Some(next + 1),
            (Some(b'\r'), Some(b'\n')) => Some(next + 2),
            _ => None,
        }
    })
}

/// Parses a whole head (its empty line included); header values are slices of `bytes`,
/// not copies.
fn parse(bytes: &Bytes) -> Result<Head, WireError> {
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
    // Room for the headers the gateway adds before it answers (`x-laneway-*`, the request
    // id, a tenant's rate limits) without growing the map.
    let mut map = HeaderMap::with_capacity(response.headers.len() + ADDED_HEADERS);
    for header in response.headers.iter() {
        let name = HeaderName::from_bytes(header.name.as_bytes())
            .map_err(|_| WireError::Framing("bad header name"))?;
        // httparse let through only what a header value may hold; `HeaderValue` checks
        // the same bytes again (its unchecked constructor is `unsafe`, kept out of here).
        let value = HeaderValue::from_maybe_shared(bytes.slice_ref(header.value))
            .map_err(|_| WireError::Framing("bad header value"))?;
        map.append(name, value);
    }
    Ok(Head { status, version, headers: map })
}

/// A `Content-Length` value (or one item of a comma-separated list of them): digits only
/// (RFC 9110 §8.6), around optional whitespace. Rust's integer parser also takes a leading
/// `+`, which another server on the path might read differently.
pub fn content_length(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Whether the connection may carry another request after this response: HTTP/1.1
/// without `Connection: close`, and a body that ends by its framing, not by a close.
pub fn goes_on(head: &Head, framing: Framing) -> bool {
    let closes = head.headers.get_all(CONNECTION).iter().any(|value| {
        value.to_str().is_ok_and(|value| {
            value.split(',').any(|token| token.trim().eq_ignore_ascii_case("close"))
        })
    });
    head.version == Version::HTTP_11 && !closes && framing != Framing::UntilClose
}

/// How the body after `head` is delimited (RFC 9112 §6.3).
pub fn framing(head: &Head, head_request: bool) -> Result<Framing, WireError> {
    if head_request
        || head.status == StatusCode::NO_CONTENT
        || head.status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Empty);
    }
    if head.headers.contains_key(TRANSFER_ENCODING) {
        let last_coding = head
            .headers
            .get_all(TRANSFER_ENCODING)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .rfind(|coding| !coding.is_empty());
        return Ok(match last_coding {
            Some(coding) if coding.eq_ignore_ascii_case("chunked") => Framing::Chunked,
            _ => Framing::UntilClose,
        });
    }
    let mut length = None;
    for value in head.headers.get_all(CONTENT_LENGTH) {
        for item in value.to_str().unwrap_or("").split(',') {
            let parsed =
                content_length(item.as_bytes()).ok_or(WireError::Framing("bad content-length"))?;
            if length.is_some_and(|seen| seen != parsed) {
                return Err(WireError::Framing("content-lengths disagree"));
            }
            length = Some(parsed);
        }
    }
    Ok(length.map_or(Framing::UntilClose, Framing::Length))
}

#[cfg(test)]
mod tests {
    use super::head_length;

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
}
