//! Presented secrets: the key of a request's `Authorization: Bearer` header and the one
//! constant-time compare, shared by the inference listeners' keys, the admin API's token
//! and the tenants' quotas.

use http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The one compare of secrets (shared with the admin API's token check): both sides are
/// hashed, then compared in constant time, so the time taken shows neither where they
/// differ nor how long either is.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let (a, b): ([u8; 32], [u8; 32]) = (Sha256::digest(a).into(), Sha256::digest(b).into());
    bool::from(a.ct_eq(&b))
}

/// The key of `Authorization: Bearer <key>`, scheme case-insensitive (shared with the
/// admin API's token check).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = value.trim().split_once(' ')?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing API key: send `Authorization: Bearer <key>`")]
    Missing,
    #[error("invalid API key")]
    Wrong,
    #[error("this key may not use the debug entry (auth.debug_keys, or the admin token)")]
    NotAllowedToDebug,
}
