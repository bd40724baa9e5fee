//! Rewriting a client request into the request a replica receives: the target, the
//! protocol version and the hop-by-hop headers change; everything else passes as is.

use http::header::{self, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{HeaderMap, Request, Uri, Version};

use crate::gateway::body::ProxyBody;

/// `Keep-Alive` (RFC 9112 appendix C.2.2): hop-by-hop; the listener sets its own timeout.
pub const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// Removes the headers that describe one connection, in either direction: the client's
/// connection to us and ours to the replica are different connections. Most messages carry
/// none of them, so one pass over the names decides whether anything is removed (a remove
/// hashes its name; eight of them cost more than the pass).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let mut doomed: Vec<HeaderName> =
        headers.keys().filter(|n| is_hop_by_hop(n)).cloned().collect();
    // Headers the sender marked connection-specific go too (`close` names none, and
    // `keep-alive` is in the list above).
    for value in headers.get_all(header::CONNECTION) {
        for token in listed_names(value.as_bytes()) {
            if let Ok(name) = HeaderName::from_bytes(token)
                && headers.contains_key(&name)
            {
                doomed.push(name);
            }
        }
    }
    for name in doomed {
        headers.remove(name);
    }
}

/// The comma-separated items of a header value, trimmed; none (one empty item) if the value
/// is not all visible ASCII (or tabs), which `HeaderValue::to_str` would refuse.
pub fn header_items(value: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    let visible = value.iter().all(|&byte| byte == b'\t' || (32..127).contains(&byte));
    let value = if visible { value } else { b"" };
    value.split(|&byte| byte == b',').map(<[u8]>::trim_ascii)
}

/// The header names a `Connection` value marks connection-specific: its tokens but `close`
/// (which names none), `keep-alive` (hop-by-hop already) and the names the gateway sets or
/// frames by, which a sender cannot take away this way.
pub fn listed_names(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    header_items(value).filter(|token| {
        !token.is_empty()
            && !token.eq_ignore_ascii_case(b"close")
            && !token.eq_ignore_ascii_case(b"keep-alive")
            && !is_protected(token)
    })
}

/// Names a `Connection` header cannot remove (RFC 9110 §7.6.1 lets a proxy keep what it
/// relies on): the request id, the `x-laneway-*` family (entry, variant, priority, SLOs,
/// replica, strategy), the credentials the gateway checks and the message's own framing.
const PROTECTED: [&str; 5] =
    ["x-request-id", "authorization", "host", "content-length", "transfer-encoding"];

/// Whether `name` (as received, in any case) is one a `Connection` header cannot remove.
pub fn is_protected(name: &[u8]) -> bool {
    const FAMILY: &[u8] = b"x-laneway-";
    let in_family = name.len() > FAMILY.len() && name[..FAMILY.len()].eq_ignore_ascii_case(FAMILY);
    in_family || PROTECTED.iter().any(|protected| protected.as_bytes().eq_ignore_ascii_case(name))
}

/// The headers that describe one connection, not the request (RFC 9110 §7.6.1, plus the
/// legacy `Keep-Alive` and `Proxy-Connection`), lowercase.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

/// Whether `name` describes one connection, not the request: a header name is lowercase,
/// so each compare is a length test and at most one memory compare.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(&name.as_str())
}

/// [`is_hop_by_hop`] for a name as received, in any case.
pub fn is_hop_by_hop_name(name: &[u8]) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|hop| hop.len() == name.len() && hop.as_bytes().eq_ignore_ascii_case(name))
}

/// A request with the client's method, target and headers and the given body: a copy for
/// one send, where the send cannot write from the client's head itself.
pub fn rebuild(parts: &http::request::Parts, body: ProxyBody) -> Request<ProxyBody> {
    let mut request = Request::new(body);
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = parts.uri.clone();
    *request.version_mut() = parts.version;
    *request.headers_mut() = parts.headers.clone();
    request
}

/// How the upstream client wants the target written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetForm {
    /// `/path?query` with a `Host` header, for a connection we hold ourselves.
    Origin,
    /// `http(s)://host:port/path?query`, for the pooled client that opens its own
    /// connections (the scheme tells it whether to use TLS).
    Absolute { https: bool },
}

/// Points `request` at `authority`, keeping its path and query unless `path` replaces them.
pub fn to_upstream(
    mut request: Request<ProxyBody>,
    authority: &str,
    path: Option<PathAndQuery>,
    form: TargetForm,
) -> Request<ProxyBody> {
    let path = path
        .or_else(|| request.uri().path_and_query().cloned())
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    *request.uri_mut() = match form {
        TargetForm::Origin => Uri::from(path),
        TargetForm::Absolute { https } => Uri::builder()
            .scheme(if https { "https" } else { "http" })
            .authority(authority)
            .path_and_query(path)
            .build()
            .expect("validated authority and parsed path"),
    };
    // Replicas speak HTTP/1.1 whatever the client spoke.
    *request.version_mut() = Version::HTTP_11;
    let headers = request.headers_mut();
    strip_hop_by_hop(headers);
    if let Ok(host) = HeaderValue::from_str(authority) {
        headers.insert(header::HOST, host);
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::body::empty;

    #[test]
    fn the_quick_test_knows_every_hop_by_hop_header() {
        let standard = [
            header::CONNECTION,
            header::PROXY_AUTHORIZATION,
            header::TE,
            header::TRAILER,
            header::TRANSFER_ENCODING,
        ];
        assert!(standard.iter().all(is_hop_by_hop));
        assert!(is_hop_by_hop(&KEEP_ALIVE));
        assert!(is_hop_by_hop(&HeaderName::from_static("proxy-connection")));
        assert!(!is_hop_by_hop(&header::CONTENT_TYPE));
        // The list for names as received is the same one, in any case.
        let names = standard.iter().map(HeaderName::as_str);
        for name in names.chain(["keep-alive", "proxy-connection"]) {
            assert!(is_hop_by_hop_name(name.to_ascii_uppercase().as_bytes()), "{name}");
        }
        assert!(!is_hop_by_hop_name(b"Content-Type") && !is_hop_by_hop_name(b"t"));
    }

    #[test]
    fn a_connection_header_cannot_remove_what_the_gateway_sets() {
        let mut headers = HeaderMap::new();
        let listed =
            "X-Request-Id, x-laneway-variant, Authorization, Host, content-length, x-other";
        headers.insert(header::CONNECTION, HeaderValue::from_static(listed));
        for name in ["x-request-id", "x-laneway-variant", "authorization", "host", "x-other"] {
            headers.insert(HeaderName::from_static(name), HeaderValue::from_static("1"));
        }
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("2"));
        strip_hop_by_hop(&mut headers);
        let mut left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        let kept = ["authorization", "content-length", "host", "x-laneway-variant", "x-request-id"];
        assert_eq!(left, kept);
        assert!(is_protected(b"X-LANEWAY-ENTRY") && !is_protected(b"x-laneway-"));
    }

    #[test]
    fn headers_without_hop_by_hop_ones_pass_untouched() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.append("x-private", HeaderValue::from_static("1"));
        let before = headers.clone();
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers, before);
        headers.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers, before);
    }

    #[test]
    fn rewrites_target_version_and_hop_headers() {
        let request = Request::builder()
            .uri("/v1/models?x=1")
            .version(Version::HTTP_2)
            .header("connection", "keep-alive, x-private")
            .header("x-private", "1")
            .header("authorization", "Bearer k")
            .body(empty())
            .unwrap();
        let form = TargetForm::Absolute { https: false };
        let upstream = to_upstream(request, "10.0.0.1:8000", None, form);
        assert_eq!(upstream.uri(), "http://10.0.0.1:8000/v1/models?x=1");
        assert_eq!(upstream.version(), Version::HTTP_11);
        assert!(upstream.headers().get("connection").is_none());
        assert!(upstream.headers().get("x-private").is_none());
        assert_eq!(upstream.headers()["authorization"], "Bearer k");
        assert_eq!(upstream.headers()["host"], "10.0.0.1:8000");
        let request = Request::builder().uri("/debug/r0/metrics").body(empty()).unwrap();
        let path = PathAndQuery::from_static("/metrics");
        let upstream = to_upstream(request, "h:1", Some(path), TargetForm::Origin);
        assert_eq!(upstream.uri(), "/metrics");
        let request = Request::builder().uri("/v1/models").body(empty()).unwrap();
        let upstream = to_upstream(request, "h:8443", None, TargetForm::Absolute { https: true });
        assert_eq!(upstream.uri(), "https://h:8443/v1/models");
    }
}
