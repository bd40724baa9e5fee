//! `[limits] store`: where tenants' quota counters live. Unset, each gateway counts alone;
//! a `redis://` URL shares them between every gateway pointed at the same Redis.

use std::time::Duration;

use super::issues::Issues;
use super::reliability::RawLimits;

/// The shared store for tenants' counters, validated.
#[derive(Clone, PartialEq, Eq)]
pub struct QuotaStoreConfig {
    /// `redis://[user:password@]host:port[/db]`.
    pub url: String,
    /// Every key starts with this and a colon, then the tenant's name (never its key).
    pub key_prefix: String,
    /// Longest wait for one answer: past it the request is decided on local counters, as
    /// this wait is on every tenant request's path.
    pub timeout: Duration,
}

impl std::fmt::Debug for QuotaStoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A password in the URL stays out of logs.
        f.debug_struct("QuotaStoreConfig")
            .field("url", &redacted(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The URL without what stands between `://` and `@`.
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***{}", &url[..scheme], &url[at..])
        }
        _ => url.to_string(),
    }
}

pub(super) fn quota_store(raw: &RawLimits, issues: &mut Issues) -> Option<QuotaStoreConfig> {
    let prefix = raw.store_key_prefix.clone().unwrap_or_else(|| "laneway".into());
    let prefix_safe = prefix.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
    if prefix.is_empty() || prefix.len() > 64 || !prefix_safe {
        issues.add("limits.store_key_prefix", format!("`{prefix}`: 1..=64 of [A-Za-z0-9._:-]"));
    }
    let timeout = issues.positive("limits.store_timeout_ms", raw.store_timeout_ms, 50, 10_000);
    let url = raw.store.clone()?;
    if !url.starts_with("redis://") {
        let shown = redacted(&url);
        issues.add("limits.store", format!("`{shown}`: expected redis://host:port"));
        return None;
    }
    if let Err(error) = redis::Client::open(url.as_str()) {
        issues.add("limits.store", format!("`{}`: {error}", redacted(&url)));
        return None;
    }
    Some(QuotaStoreConfig { url, key_prefix: prefix, timeout: Duration::from_millis(timeout) })
}

#[cfg(test)]
mod tests {
    use super::redacted;
    use crate::gateway::config::GatewayConfig;
    use std::time::Duration;

    #[test]
    fn the_store_is_optional_validated_and_its_password_hidden() {
        let none = GatewayConfig::from_toml("").unwrap();
        assert_eq!(none.quota_store, None);
        let config = GatewayConfig::from_toml(
            "[limits]\nstore = \"redis://:secret@127.0.0.1:6379/2\"\nstore_timeout_ms = 20\n",
        )
        .unwrap();
        let store = config.quota_store.expect("configured");
        assert_eq!(
            (store.key_prefix.as_str(), store.timeout),
            ("laneway", Duration::from_millis(20))
        );
        assert!(!format!("{store:?}").contains("secret"));
        assert_eq!(redacted("redis://u:p@h:1"), "redis://***@h:1");
        let error = GatewayConfig::from_toml(
            "[limits]\nstore = \"http://127.0.0.1:6379\"\nstore_key_prefix = \"a b\"\n\
             store_timeout_ms = 0\n",
        )
        .unwrap_err();
        let paths: Vec<&str> = error.issues.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(paths, ["limits.store_key_prefix", "limits.store_timeout_ms", "limits.store"]);
        let error = GatewayConfig::from_toml("[limits]\nstore = \"redis://\"\n").unwrap_err();
        assert_eq!(error.issues[0].path, "limits.store");
    }
}
