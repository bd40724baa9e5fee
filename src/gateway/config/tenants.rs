//! `[[tenants]]`: named API keys with their limits (requests and tokens per minute,
//! requests at once). A tenant's keys are valid API keys even without `[auth]`.

use std::sync::Arc;

use serde::Deserialize;

use super::issues::Issues;

/// One `[[tenants]]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTenant {
    pub name: Option<String>,
    #[serde(default)]
    pub keys: Vec<String>,
    pub requests_per_minute: Option<i64>,
    pub tokens_per_minute: Option<i64>,
    pub max_concurrent: Option<i64>,
    /// Share of queue turns against other tenants of the same band (default 1).
    pub weight: Option<i64>,
    /// Default priority band, 0..=9 (default 4); higher bands wait less, are shed last.
    pub priority: Option<i64>,
    /// Highest band `x-laneway-priority` may ask for (default: `priority`).
    pub max_priority: Option<i64>,
}

/// A tenant's limits; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TenantLimits {
    pub requests_per_minute: Option<u64>,
    /// Prompt (reserved from the estimate at admission) plus completion tokens, settled
    /// from the response's `usage`.
    pub tokens_per_minute: Option<u64>,
    pub max_concurrent: Option<u64>,
}

/// A validated tenant.
#[derive(Clone, PartialEq, Eq)]
pub struct TenantConfig {
    /// The name on `/metrics` and in logs (never the key).
    pub name: String,
    pub keys: Vec<String>,
    pub limits: TenantLimits,
    /// Share of queue turns (at least 1).
    pub weight: u32,
    /// Default priority band.
    pub priority: u8,
    /// Highest band the priority header may ask for.
    pub max_priority: u8,
}

impl std::fmt::Debug for TenantConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Keys stay out of logs.
        f.debug_struct("TenantConfig")
            .field("name", &self.name)
            .field("keys", &self.keys.len())
            .field("limits", &self.limits)
            .field("weight", &self.weight)
            .field("priority", &self.priority)
            .finish()
    }
}

const MAX_PER_MINUTE: u64 = 1_000_000_000_000;

pub(super) fn tenants(raw: &[RawTenant], issues: &mut Issues) -> Vec<TenantConfig> {
    let mut tenants: Vec<TenantConfig> = Vec::new();
    for (index, tenant) in raw.iter().enumerate() {
        let path = format!("tenants[{index}]");
        let name = tenant.name.clone().unwrap_or_default();
        let label_safe = name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if name.is_empty() || name.len() > 64 || !label_safe {
            issues.add(format!("{path}.name"), format!("`{name}`: 1..=64 of [A-Za-z0-9._-]"));
        } else if tenants.iter().any(|have| have.name == name) {
            issues.add(format!("{path}.name"), format!("`{name}` is used twice"));
        }
        if tenant.keys.is_empty() {
            issues.add(format!("{path}.keys"), "a tenant needs at least one key");
        }
        for (key_index, key) in tenant.keys.iter().enumerate() {
            let taken = tenants.iter().any(|have| have.keys.contains(key))
                || tenant.keys[..key_index].contains(key);
            if key.trim().is_empty() {
                issues.add(format!("{path}.keys[{key_index}]"), "an empty key is not allowed");
            } else if taken {
                issues.add(format!("{path}.keys[{key_index}]"), "this key belongs to a tenant");
            }
        }
        let mut limit = |field: &str, value: Option<i64>| {
            value.map(|_| issues.positive(&format!("{path}.{field}"), value, 1, MAX_PER_MINUTE))
        };
        let limits = TenantLimits {
            requests_per_minute: limit("requests_per_minute", tenant.requests_per_minute),
            tokens_per_minute: limit("tokens_per_minute", tenant.tokens_per_minute),
            max_concurrent: limit("max_concurrent", tenant.max_concurrent),
        };
        let weight = issues.positive(&format!("{path}.weight"), tenant.weight, 1, 1000) as u32;
        let mut band = |field: &str, value: Option<i64>, default: u8| match value {
            None => default,
            Some(n) if (0..=i64::from(MAX_BAND)).contains(&n) => n as u8,
            Some(n) => {
                issues
                    .add(format!("{path}.{field}"), format!("{n} is out of range 0..={MAX_BAND}"));
                default
            }
        };
        let priority = band("priority", tenant.priority, DEFAULT_BAND);
        let max_priority = band("max_priority", tenant.max_priority, priority).max(priority);
        let keys = tenant.keys.clone();
        tenants.push(TenantConfig { name, keys, limits, weight, priority, max_priority });
    }
    tenants
}

/// Who a waiting request belongs to and how it ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    /// The tenant's name; every request without one shares the empty flow.
    pub key: Arc<str>,
    /// Relative share of turns among flows of one band (at least 1).
    pub weight: u32,
    /// Priority band: higher bands are served first and shed last.
    pub band: u8,
}

/// The band of requests that name none and belong to no tenant.
pub const DEFAULT_BAND: u8 = 4;
/// The highest band.
pub const MAX_BAND: u8 = 9;

impl Default for Flow {
    fn default() -> Self {
        Self { key: Arc::from(""), weight: 1, band: DEFAULT_BAND }
    }
}

#[cfg(test)]
mod tests {
    use crate::gateway::config::GatewayConfig;

    #[test]
    fn tenants_bring_their_keys_and_bad_fields_are_named() {
        let config = GatewayConfig::from_toml(
            "[[tenants]]\nname = \"a\"\nkeys = [\"sk-a\"]\nrequests_per_minute = 60\n",
        )
        .unwrap();
        assert_eq!(config.tenants[0].limits.requests_per_minute, Some(60));
        assert_eq!(config.tenants[0].limits.tokens_per_minute, None);
        let keys = config.auth.expect("tenant keys are API keys");
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, "Bearer sk-a".parse().unwrap());
        assert!(keys.check(&headers).is_ok());
        let error = GatewayConfig::from_toml(
            "[[tenants]]\nname = \"a b\"\nkeys = [\"k\", \"k\"]\nmax_concurrent = 0\n\
             [[tenants]]\nname = \"c\"\n",
        )
        .unwrap_err();
        let paths: Vec<&str> = error.issues.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "tenants[0].name",
                "tenants[0].keys[1]",
                "tenants[0].max_concurrent",
                "tenants[1].keys"
            ]
        );
    }
}
