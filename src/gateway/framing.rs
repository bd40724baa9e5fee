//! A client request whose framing two servers could read two ways is refused before any
//! byte of it goes upstream (RFC 9112 §3.2, §6.1, §6.3; what HAProxy refuses): `CONNECT`,
//! a missing or repeated `Host`, `Content-Length` beside `Transfer-Encoding`, and any
//! transfer coding but a single `chunked`. Each refusal closes the client's connection:
//! whatever follows the refused head cannot be trusted to start the next request.

use http::HeaderName;
use http::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING};

/// Why a request's framing is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("CONNECT is not served: the gateway forwards HTTP requests, not tunnels")]
    Connect,
    #[error("the request has no Host header (RFC 9112 §3.2)")]
    MissingHost,
    #[error("the request has more than one Host header (RFC 9112 §3.2)")]
    RepeatedHost,
    #[error(
        "the request has both Content-Length and Transfer-Encoding, which other servers may \
         read differently (RFC 9112 §6.1)"
    )]
    LengthWithTransferEncoding,
    #[error("Transfer-Encoding is not a list of transfer codings")]
    MalformedTransferEncoding,
    #[error("transfer codings other than a single `chunked` are not supported")]
    UnsupportedTransferCoding,
}

impl FramingError {
    /// 405 for `CONNECT`, 501 for a coding the gateway does not implement, else 400.
    pub fn status(self) -> http::StatusCode {
        match self {
            Self::Connect => http::StatusCode::METHOD_NOT_ALLOWED,
            Self::UnsupportedTransferCoding => http::StatusCode::NOT_IMPLEMENTED,
            _ => http::StatusCode::BAD_REQUEST,
        }
    }
}

/// A refused request, as an extension of the request handed to the request path (which
/// answers it without reading a body or reaching a replica).
#[derive(Debug, Clone, Copy)]
pub struct Refused(pub FramingError);

/// The framing headers of one HTTP/1.1 request head, taken in one header at a time.
#[derive(Debug, Default)]
pub struct FramingCheck {
    hosts: u32,
    content_length: bool,
    transfer_encoding: bool,
    chunked: u32,
    other_coding: bool,
    malformed: bool,
}

impl FramingCheck {
    /// Takes in one header line.
    pub fn header(&mut self, name: &HeaderName, value: &[u8]) {
        if name == HOST {
            self.hosts += 1;
        } else if name == CONTENT_LENGTH {
            self.content_length = true;
        } else if name == TRANSFER_ENCODING {
            self.transfer_encoding = true;
            self.codings(value);
        }
    }

    fn codings(&mut self, value: &[u8]) {
        let visible = value.iter().all(|&byte| byte == b'\t' || (32..127).contains(&byte));
        if !visible {
            self.malformed = true;
            return;
        }
        for coding in value.split(|&byte| byte == b',').map(<[u8]>::trim_ascii) {
            if coding.is_empty() {
                continue;
            }
            if !coding.iter().all(|&byte| is_token_byte(byte)) {
                // Parameters (`;q=1`) and anything else a token cannot hold.
                self.malformed = true;
            } else if coding.eq_ignore_ascii_case(b"chunked") {
                self.chunked += 1;
            } else {
                self.other_coding = true;
            }
        }
    }

    /// The verdict on an HTTP/1.1 head with these headers (HTTP/1.0 needs no `Host`).
    pub fn finish(self, http_1_1: bool) -> Result<(), FramingError> {
        match self.hosts {
            0 if http_1_1 => return Err(FramingError::MissingHost),
            0 | 1 => {}
            _ => return Err(FramingError::RepeatedHost),
        }
        if !self.transfer_encoding {
            return Ok(());
        }
        if self.content_length {
            return Err(FramingError::LengthWithTransferEncoding);
        }
        if self.malformed || self.chunked > 1 || (self.chunked == 0 && !self.other_coding) {
            return Err(FramingError::MalformedTransferEncoding);
        }
        if self.other_coding {
            return Err(FramingError::UnsupportedTransferCoding);
        }
        Ok(())
    }
}

/// Checks a head already in a map (one hyper parsed): the same rules, for the requests
/// laneway's own reader left to hyper.
pub fn check_map(headers: &http::HeaderMap, http_1_1: bool) -> Result<(), FramingError> {
    let mut check = FramingCheck::default();
    for name in [HOST, CONTENT_LENGTH, TRANSFER_ENCODING] {
        for value in headers.get_all(&name) {
            check.header(&name, value.as_bytes());
        }
    }
    check.finish(http_1_1)
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(lines: &[(&str, &str)]) -> Result<(), FramingError> {
        let mut check = FramingCheck::default();
        for (name, value) in lines {
            check.header(&HeaderName::from_bytes(name.as_bytes()).unwrap(), value.as_bytes());
        }
        check.finish(true)
    }

    #[test]
    fn one_host_and_one_framing_pass() {
        assert_eq!(verdict(&[("host", "x"), ("content-length", "5")]), Ok(()));
        assert_eq!(verdict(&[("host", "x"), ("transfer-encoding", "Chunked")]), Ok(()));
        assert_eq!(verdict(&[("host", "x"), ("transfer-encoding", "chunked, ")]), Ok(()));
        // HTTP/1.0 may leave Host out.
        assert_eq!(FramingCheck::default().finish(false), Ok(()));
    }

    #[test]
    fn host_must_be_there_once() {
        assert_eq!(verdict(&[]), Err(FramingError::MissingHost));
        assert_eq!(verdict(&[("host", "a"), ("host", "a")]), Err(FramingError::RepeatedHost));
    }

    #[test]
    fn length_beside_a_coding_is_refused_whichever_comes_first() {
        let cl_first = [("host", "x"), ("content-length", "3"), ("transfer-encoding", "chunked")];
        let te_first = [("host", "x"), ("transfer-encoding", "chunked"), ("content-length", "3")];
        for lines in [&cl_first[..], &te_first[..]] {
            assert_eq!(verdict(lines), Err(FramingError::LengthWithTransferEncoding));
        }
    }

    #[test]
    fn only_a_single_chunked_coding_is_taken() {
        let te = |values: &[&str]| {
            let mut lines = vec![("host", "x")];
            lines.extend(values.iter().map(|value| ("transfer-encoding", *value)));
            verdict(&lines)
        };
        let unsupported = Err(FramingError::UnsupportedTransferCoding);
        let malformed = Err(FramingError::MalformedTransferEncoding);
        assert_eq!(te(&["gzip, chunked"]), unsupported);
        assert_eq!(te(&["identity, chunked"]), unsupported);
        assert_eq!(te(&["gzip", "chunked"]), unsupported);
        assert_eq!(te(&["gzip"]), unsupported);
        assert_eq!(te(&["chunked, chunked"]), malformed);
        assert_eq!(te(&["chunked", "chunked"]), malformed);
        assert_eq!(te(&[""]), malformed);
        assert_eq!(te(&["chunked;q=1"]), malformed);
        assert_eq!(te(&["chunked\u{b}"]), malformed);
    }

    #[test]
    fn statuses_follow_the_kind_of_refusal() {
        assert_eq!(FramingError::Connect.status(), 405);
        assert_eq!(FramingError::UnsupportedTransferCoding.status(), 501);
        assert_eq!(FramingError::RepeatedHost.status(), 400);
    }

    #[test]
    fn a_map_is_checked_by_the_same_rules() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(check_map(&headers, true), Err(FramingError::MissingHost));
        headers.insert(HOST, "x".parse().unwrap());
        headers.insert(TRANSFER_ENCODING, "gzip, chunked".parse().unwrap());
        assert_eq!(check_map(&headers, true), Err(FramingError::UnsupportedTransferCoding));
    }
}
