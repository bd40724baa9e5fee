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

/// `lw-<12 hex digits of a random process prefix>-`.
static PREFIX: LazyLock<String> =
    LazyLock::new(|| format!("lw-{:012x}-", rand::random::<u64>() >> 16));
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh id: `lw-<12 hex of process prefix>-<counter in hex>`.
pub fn create() -> HeaderValue {
    id_with(&PREFIX, COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// `prefix` then `sequence` in hex, written without a formatter (an id is made for most
/// requests).
fn id_with(prefix: &str, sequence: u64) -> HeaderValue {
    let prefix = prefix.as_bytes();
    let digits = (64 - sequence.leading_zeros()).div_ceil(4).max(1) as usize;
    let mut id = [0u8; 64];
    let end = prefix.len() + digits;
    id[..prefix.len()].copy_from_slice(prefix);
    for (place, slot) in id[prefix.len()..end].iter_mut().rev().enumerate() {
        *slot = b"0123456789abcdef"[((sequence >> (4 * place)) & 0xf) as usize];
    }
    HeaderValue::from_bytes(&id[..end]).expect("hex and dashes")
}

/// The request's id: the client's if it sent a usable one, else a new one written into
/// `headers` so that the replica sees the same id.
pub fn accept_or_create(headers: &mut HeaderMap) -> HeaderValue {
    if let Some(value) = crate::gateway::headers::find(headers, &REQUEST_ID)
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
    fn ids_are_the_prefix_and_the_counter_in_hex() {
        assert_eq!(id_with("lw-0123456789ab-", 0), "lw-0123456789ab-0");
        assert_eq!(id_with("lw-0123456789ab-", 0xabc), "lw-0123456789ab-abc");
        assert_eq!(id_with("p-", u64::MAX), "p-ffffffffffffffff");
        assert!(create().to_str().unwrap().starts_with(PREFIX.as_str()));
    }

    #[test]
    fn created_ids_are_unique() {
        let ids: std::collections::HashSet<_> = (0..1000).map(|_| create()).collect();
        assert_eq!(ids.len(), 1000);
    }
}
