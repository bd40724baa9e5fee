//! API-key authentication on the inference listeners (smart, dedicated entries, debug):
//! keys come from the config or a file, are kept only as SHA-256 hashes, and a presented
//! `Authorization: Bearer` key is hashed and compared with every stored hash in constant
//! time. The admin listener is not covered: it binds to loopback by default.

use std::fmt;
use std::path::{Path, PathBuf};

use http::HeaderMap;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// `[auth]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    /// Keys written in the config itself.
    #[serde(default)]
    pub keys: Vec<String>,
    /// A file with one key per line (blank lines and `#` comments skipped).
    pub keys_file: Option<String>,
    /// Count requests per key in `laneway_requests_by_key_total{key}`.
    #[serde(default)]
    pub count_by_key: bool,
    /// Keys that may also use the debug entry (besides the admin token).
    #[serde(default)]
    pub debug_keys: Vec<String>,
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

/// The accepted keys, as hashes.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKeys {
    hashes: Vec<[u8; 32]>,
    /// Keys allowed on the debug entry.
    debug_hashes: Vec<[u8; 32]>,
    /// Whether to count requests per key.
    pub count_by_key: bool,
}

impl fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Hashes of short keys can be brute-forced: keep them out of logs too.
        let (keys, debug) = (self.hashes.len(), self.debug_hashes.len());
        write!(f, "ApiKeys({keys} keys, {debug} debug keys, count_by_key: {})", self.count_by_key)
    }
}

impl ApiKeys {
    pub fn new<'a>(keys: impl IntoIterator<Item = &'a str>, count_by_key: bool) -> Self {
        Self {
            hashes: keys.into_iter().map(hash).collect(),
            debug_hashes: Vec::new(),
            count_by_key,
        }
    }

    /// Also allows these keys on the debug entry (they are valid keys everywhere).
    pub fn with_debug_keys<'a>(mut self, keys: impl IntoIterator<Item = &'a str>) -> Self {
        self.debug_hashes = keys.into_iter().map(hash).collect();
        self.hashes.extend(self.debug_hashes.iter().copied());
        self
    }

    /// Also accepts these keys (a tenant's).
    pub fn with_more_keys<'a>(mut self, keys: impl IntoIterator<Item = &'a str>) -> Self {
        self.hashes.extend(keys.into_iter().map(hash));
        self
    }

    /// Validates `[auth]`: reads the key file, refuses an empty key set. On error, the
    /// field path and the message.
    pub fn from_raw(raw: &RawAuth) -> Result<Self, (String, String)> {
        let mut keys: Vec<String> = raw.keys.clone();
        if let Some(file) = &raw.keys_file {
            keys.extend(read_keys_file(Path::new(file)).map_err(|m| ("auth.keys_file".into(), m))?);
        }
        if let Some(index) = keys.iter().position(|k| k.trim().is_empty()) {
            return Err((format!("auth.keys[{index}]"), "an empty key is not allowed".into()));
        }
        if let Some(index) = raw.debug_keys.iter().position(|k| k.trim().is_empty()) {
            return Err((
                format!("auth.debug_keys[{index}]"),
                "an empty key is not allowed".into(),
            ));
        }
        if keys.is_empty() && raw.debug_keys.is_empty() {
            return Err(("auth".into(), "no keys: give `keys` or `keys_file`".into()));
        }
        let debug_keys = raw.debug_keys.iter().map(String::as_str);
        Ok(Self::new(keys.iter().map(String::as_str), raw.count_by_key).with_debug_keys(debug_keys))
    }

    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Checks a request's `Authorization` header; on success, the key's label (the first
    /// 12 hex digits of its hash: stable, and not the key).
    pub fn check(&self, headers: &HeaderMap) -> Result<String, AuthError> {
        let presented = bearer(headers).ok_or(AuthError::Missing)?;
        let presented = hash(presented);
        // Compare with every stored hash, no early exit: the time taken does not tell
        // which key (or how much of one) matched.
        let mut matched = subtle::Choice::from(0);
        for stored in &self.hashes {
            matched |= stored.ct_eq(&presented);
        }
        if bool::from(matched) { Ok(key_label(&presented)) } else { Err(AuthError::Wrong) }
    }

    /// Checks that a request may use the debug entry: its key is a debug key, or it is the
    /// admin token.
    pub fn check_debug(
        &self,
        headers: &HeaderMap,
        admin_token: Option<&str>,
    ) -> Result<(), AuthError> {
        let presented = bearer(headers).ok_or(AuthError::Missing)?;
        if admin_token.is_some_and(|token| constant_time_eq(presented.as_bytes(), token.as_bytes()))
        {
            return Ok(());
        }
        let presented = hash(presented);
        let mut matched = subtle::Choice::from(0);
        for stored in &self.debug_hashes {
            matched |= stored.ct_eq(&presented);
        }
        if bool::from(matched) { Ok(()) } else { Err(AuthError::NotAllowedToDebug) }
    }
}

/// The one compare of secrets (shared with the admin API's token check): both sides are
/// hashed, then compared in constant time, so the time taken shows neither where they
/// differ nor how long either is.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let (a, b): ([u8; 32], [u8; 32]) = (Sha256::digest(a).into(), Sha256::digest(b).into());
    bool::from(a.ct_eq(&b))
}

fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.trim().as_bytes()).into()
}

fn key_label(hash: &[u8; 32]) -> String {
    hash[..6].iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The key of `Authorization: Bearer <key>`, scheme case-insensitive (shared with the
/// admin API's token check).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = value.trim().split_once(' ')?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
}

fn read_keys_file(path: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", PathBuf::from(path).display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, value.parse().unwrap());
        headers
    }

    #[test]
    fn missing_wrong_and_right_keys() {
        let keys = ApiKeys::new(["sk-one", "sk-two"], false);
        assert_eq!(keys.check(&HeaderMap::new()), Err(AuthError::Missing));
        assert_eq!(keys.check(&headers("Basic abc")), Err(AuthError::Missing));
        assert_eq!(keys.check(&headers("Bearer ")), Err(AuthError::Missing));
        assert_eq!(keys.check(&headers("Bearer sk-three")), Err(AuthError::Wrong));
        assert_eq!(keys.check(&headers("Bearer sk-on")), Err(AuthError::Wrong));
        let one = keys.check(&headers("Bearer sk-one")).unwrap();
        let two = keys.check(&headers("bearer  sk-two")).unwrap();
        assert_ne!(one, two);
        assert_eq!(one.len(), 12);
        assert!(!one.contains("sk-"));
    }

    #[test]
    fn only_debug_keys_and_the_admin_token_open_the_debug_entry() {
        let keys = ApiKeys::new(["sk-user"], false).with_debug_keys(["sk-oncall"]);
        assert!(keys.check(&headers("Bearer sk-oncall")).is_ok(), "a debug key is a key");
        assert_eq!(
            keys.check_debug(&headers("Bearer sk-user"), None),
            Err(AuthError::NotAllowedToDebug)
        );
        assert_eq!(keys.check_debug(&headers("Bearer sk-oncall"), None), Ok(()));
        assert_eq!(keys.check_debug(&headers("Bearer admin-token"), Some("admin-token")), Ok(()));
        assert_eq!(
            keys.check_debug(&HeaderMap::new(), Some("admin-token")),
            Err(AuthError::Missing)
        );
    }

    #[test]
    fn constant_time_compare_handles_equal_and_unequal_lengths() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(constant_time_eq(b"", b""));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"ab", b"abc"));
        assert!(!constant_time_eq(b"abc\0", b"abc"));
        // Stored values are fixed-length hashes, so a key's length never reaches the compare.
        assert_eq!(hash("k").len(), hash("a much longer key").len());
    }

    #[test]
    fn config_reads_a_key_file_and_refuses_an_empty_set() {
        let dir = std::env::temp_dir().join(format!("laneway-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("keys");
        std::fs::write(&file, "# team keys\nsk-file\n\n").unwrap();
        let raw = RawAuth {
            keys: vec!["sk-inline".into()],
            keys_file: Some(file.display().to_string()),
            count_by_key: true,
            debug_keys: Vec::new(),
        };
        let keys = ApiKeys::from_raw(&raw).unwrap();
        assert_eq!(keys.len(), 2);
        assert!(keys.check(&headers("Bearer sk-file")).is_ok());
        assert!(!format!("{keys:?}").contains("sk-"));
        let error = ApiKeys::from_raw(&RawAuth::default()).unwrap_err();
        assert_eq!(error.0, "auth");
        let missing = RawAuth { keys_file: Some("/nonexistent/keys".into()), ..RawAuth::default() };
        assert_eq!(ApiKeys::from_raw(&missing).unwrap_err().0, "auth.keys_file");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
