//! Request ids: a client's `x-request-id` is kept, a missing one is made here (a random
//! per-process prefix and a counter: unique across gateway instances, no syscall per
//! request). The id goes upstream with the request, back on the response, and into every
//! log line of the request.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use http::HeaderMap;
use http::header::HeaderValue;

use crate::gateway::headers::REQUEST_ID;

/// Longest id accepted from a client; a longer one is replaced, so logs stay bounded.
const MAX_CLIENT_ID_BYTES: usize = 128;

static PREFIX: LazyLock<String> = LazyLock::new(|| format!("{:012x}", rand::random::<u64>() >> 16));
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh id: `lw-<12 hex of process prefix>-<counter>`.
pub fn create() -> HeaderValue {
    let sequence = COUNTER.fetch_add(1, Ordering::Relaxed);
    HeaderValue::from_str(&format!("lw-{}-{sequence:x}", *PREFIX)).expect("hex and dashes")
}

/// The request's id: the client's if it sent a usable one, else a new one written into
/// `headers` so that the replica sees the same id.
pub fn accept_or_create(headers: &mut HeaderMap) -> HeaderValue {
    if let Some(value) = headers.get(&REQUEST_ID)
        && usable(value)
    {
        return value.clone();
    }
    let id = create();
    headers.insert(REQUEST_ID, id.clone());
    id
}

/// Printable ASCII of sane length: anything else would garble logs.
fn usable(value: &HeaderValue) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_CLIENT_ID_BYTES
        && bytes.iter().all(|b| b.is_ascii_graphic())
}

/// The id as text for logs.
pub fn as_text(id: &HeaderValue) -> &str {
    id.to_str().unwrap_or("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_a_client_id_and_replaces_a_bad_one() {
        let mut headers = HeaderMap::new();
        headers.insert(REQUEST_ID, HeaderValue::from_static("abc-123"));
        assert_eq!(accept_or_create(&mut headers), "abc-123");
        headers.insert(REQUEST_ID, HeaderValue::from_static("has space"));
        let made = accept_or_create(&mut headers);
        assert!(made.to_str().unwrap().starts_with("lw-"));
        assert_eq!(headers[REQUEST_ID], made);
    }

    #[test]
    fn created_ids_are_unique() {
        let ids: std::collections::HashSet<_> = (0..1000).map(|_| create()).collect();
        assert_eq!(ids.len(), 1000);
    }
}
