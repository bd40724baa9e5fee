//! API-key authentication on the inference listeners (smart, dedicated entries, debug): a
//! presented `Authorization: Bearer` key is hashed and compared with every stored hash in
//! constant time. The admin listener is not covered: it binds to loopback by default.

use http::HeaderMap;
use subtle::ConstantTimeEq;

use crate::gateway::config::ApiKeys;
use crate::gateway::config::auth::{hash, key_label};
use crate::gateway::secrets::{AuthError, bearer, constant_time_eq};

// The key set is config (validated once); checking a request against it is this phase's.
impl ApiKeys {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::config::Issues;
    use crate::gateway::config::auth::RawAuth;

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
        let keys = ApiKeys::from_raw(&raw, &mut Issues::default()).unwrap();
        assert_eq!(keys.len(), 2);
        assert!(keys.check(&headers("Bearer sk-file")).is_ok());
        assert!(!format!("{keys:?}").contains("sk-"));
        let mut issues = Issues::default();
        assert!(ApiKeys::from_raw(&RawAuth::default(), &mut issues).is_none());
        assert_eq!(issues.paths(), ["auth"]);
        let missing = RawAuth { keys_file: Some("/nonexistent/keys".into()), ..RawAuth::default() };
        let mut issues = Issues::default();
        assert!(ApiKeys::from_raw(&missing, &mut issues).is_none());
        assert_eq!(issues.paths(), ["auth.keys_file"]);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
