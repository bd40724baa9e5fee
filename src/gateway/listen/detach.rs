//! Moving a buffered request out of the client connection's read buffer. hyper hands out
//! the target, the header values and a small body as views into the 8 KiB buffer it read
//! them into; while any view lives, that buffer cannot be reused, and the connection's next
//! read (hyper reads to notice a client that leaves) takes a second one. A request that
//! waits at the gateway (queued, or held by the answer gate) would keep both for as long
//! as it waits. One allocation of exactly the request's size replaces them.

use bytes::{Bytes, BytesMut};
use http::header::HeaderValue;
use http::request::Parts;
use http::uri::Uri;

/// Rewrites `parts` and `body` so that they share one allocation of their own size. The
/// method, the header names (hyper copies the uncommon ones already) and extensions stay
/// as they are; so does a target that does not parse again (it cannot, having parsed).
pub fn detach(parts: &mut Parts, body: &mut Bytes) {
    let target = parts.uri.path_and_query().map(|target| target.as_str()).unwrap_or("");
    let values: usize = parts.headers.values().map(|value| value.len()).sum();
    let mut owned = BytesMut::with_capacity(target.len() + values + body.len());
    owned.extend_from_slice(target.as_bytes());
    for value in parts.headers.values() {
        owned.extend_from_slice(value.as_bytes());
    }
    owned.extend_from_slice(body);
    let mut owned = owned.freeze();

    let target = owned.split_to(target.len());
    if parts.uri.authority().is_none()
        && let Ok(uri) = Uri::from_maybe_shared(target)
    {
        parts.uri = uri;
    }
    for value in parts.headers.values_mut() {
        let copy = owned.split_to(value.len());
        let sensitive = value.is_sensitive();
        // The bytes were a valid value a moment ago.
        if let Ok(mut copied) = HeaderValue::from_maybe_shared(copy) {
            copied.set_sensitive(sensitive);
            *value = copied;
        }
    }
    *body = owned;
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    /// A request whose target, header values and body are views into one larger buffer, as
    /// hyper's parser leaves them.
    fn parsed_from_one_buffer() -> (Parts, Bytes, Bytes) {
        let read_buffer = Bytes::from(
            "/v1/chat/completions?x=1\napplication/json\nuser-7\n{\"model\":\"m\"}".to_string()
                + &" ".repeat(8000),
        );
        let target = read_buffer.slice(0..24);
        let content_type = read_buffer.slice(25..41);
        let user = read_buffer.slice(42..48);
        let body = read_buffer.slice(49..62);
        let request = Request::builder()
            .uri(Uri::from_maybe_shared(target).unwrap())
            .header("content-type", HeaderValue::from_maybe_shared(content_type).unwrap())
            .header("x-user-id", HeaderValue::from_maybe_shared(user).unwrap())
            .body(())
            .unwrap();
        (request.into_parts().0, body, read_buffer)
    }

    #[test]
    fn the_request_keeps_its_contents_and_lets_the_read_buffer_go() {
        let (mut parts, mut body, read_buffer) = parsed_from_one_buffer();
        assert!(!read_buffer.is_unique(), "the views hold the read buffer");
        detach(&mut parts, &mut body);
        assert_eq!(parts.uri, "/v1/chat/completions?x=1");
        assert_eq!(parts.headers["content-type"], "application/json");
        assert_eq!(parts.headers["x-user-id"], "user-7");
        assert_eq!(&body[..], b"{\"model\":\"m\"}");
        assert!(read_buffer.is_unique(), "a view into the read buffer survived");
    }

    #[test]
    fn a_sensitive_value_stays_sensitive_and_an_absolute_target_is_kept() {
        let mut request = Request::builder()
            .uri("http://replica:8000/v1/completions")
            .header("authorization", "Bearer k")
            .body(())
            .unwrap();
        request.headers_mut().get_mut("authorization").unwrap().set_sensitive(true);
        let (mut parts, _) = request.into_parts();
        let mut body = Bytes::from_static(b"{}");
        detach(&mut parts, &mut body);
        assert!(parts.headers["authorization"].is_sensitive());
        assert_eq!(parts.headers["authorization"], "Bearer k");
        assert_eq!(parts.uri, "http://replica:8000/v1/completions");
        assert_eq!(&body[..], b"{}");
    }
}
