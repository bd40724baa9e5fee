//! The canary half of the configuration: replica pools, each entry's variants, the
//! `[canary]` settings (sticky header, window, SLOs) and the `[admin]` token, validated with
//! the same per-field paths as the rest (`entries.short.variants[1].pool: ...`).

use std::collections::HashSet;
use std::time::Duration;

use http::HeaderName;

use super::Strategy;
use super::issues::Issues;
use super::raw::{RawAdmin, RawCanary, RawPool, RawVariant};
use super::verdicts::{Automation, automation, guard};
use super::{PolicyKind, ReplicaConfig};
use crate::canary::{GuardSettings, Slo, VariantTable, WeightedVariant};

/// The name of an entry's implicit variant when it configures none.
pub const DEFAULT_VARIANT_NAME: &str = "default";

/// One way of serving an entry's requests, compared with the entry's other variants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariantConfig {
    pub name: String,
    pub strategy: Strategy,
    /// `None`: the gateway's global policy.
    pub policy: Option<PolicyKind>,
    /// `None`: every replica.
    pub pool: Option<String>,
    pub weight: u32,
}

/// A named group of replicas (e.g. one topology, `tp8x2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    pub name: String,
    pub replicas: Vec<String>,
}

/// How requests are assigned to variants and how variants are compared.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryConfig {
    /// The header whose value keeps one user on one variant; then `x-request-id`, then a
    /// per-request counter.
    pub sticky_header: Option<HeaderName>,
    /// The report's sliding window.
    pub window: Duration,
    pub slo: Slo,
    /// What candidates are judged on (see [`super::verdicts`]).
    pub guard: GuardSettings,
    pub automation: Automation,
}

impl Default for CanaryConfig {
    fn default() -> Self {
        Self {
            sticky_header: None,
            window: Duration::from_secs(300),
            slo: Slo::default(),
            guard: GuardSettings::default(),
            automation: Automation::default(),
        }
    }
}

/// Who may use the admin API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdminConfig {
    /// The bearer token admin writes need; `None` disables writes.
    pub token: Option<String>,
}

/// Whether a name is safe in a URL path, a header value and a metric label.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

pub(super) fn pools(
    raw: &[RawPool],
    replicas: &[ReplicaConfig],
    issues: &mut Issues,
) -> Vec<PoolConfig> {
    let known: HashSet<&str> = replicas.iter().map(|r| r.name.as_str()).collect();
    let mut names = HashSet::new();
    let mut pools = Vec::with_capacity(raw.len());
    for (index, pool) in raw.iter().enumerate() {
        let path = format!("pools[{index}]");
        let name = pool.name.clone().unwrap_or_default();
        if !is_plain_name(&name) {
            issues
                .add(format!("{path}.name"), format!("`{name}` must be 1-64 of A-Z a-z 0-9 _ - ."));
        } else if !names.insert(name.clone()) {
            issues.add(format!("{path}.name"), format!("`{name}` is used twice"));
        }
        if pool.replicas.is_empty() {
            issues.add(format!("{path}.replicas"), "needs at least one replica");
        }
        for (slot, replica) in pool.replicas.iter().enumerate() {
            if !known.contains(replica.as_str()) {
                issues.add(
                    format!("{path}.replicas[{slot}]"),
                    format!("no replica is named `{replica}`"),
                );
            }
        }
        pools.push(PoolConfig { name, replicas: pool.replicas.clone() });
    }
    pools
}

pub(super) fn variants(
    path: &str,
    raw: &[RawVariant],
    entry_strategy: Strategy,
    pools: &[PoolConfig],
    issues: &mut Issues,
) -> Vec<VariantConfig> {
    let mut variants = Vec::with_capacity(raw.len());
    for (index, variant) in raw.iter().enumerate() {
        let path = format!("{path}[{index}]");
        let name = variant.name.clone().unwrap_or_default();
        if !is_plain_name(&name) {
            issues
                .add(format!("{path}.name"), format!("`{name}` must be 1-64 of A-Z a-z 0-9 _ - ."));
        }
        let strategy = match variant.strategy.as_deref().map(str::parse::<Strategy>) {
            None => entry_strategy,
            Some(Ok(strategy)) => strategy,
            Some(Err(message)) => {
                issues.add(format!("{path}.strategy"), message);
                entry_strategy
            }
        };
        let policy = variant.policy.as_deref().and_then(|name| {
            let parsed = PolicyKind::parse(name);
            if parsed.is_none() {
                issues.add(
                    format!("{path}.policy"),
                    format!("unknown policy `{name}` (expected prefix_latency, prefix_aware, predicted_latency, least_queue or round_robin)"),
                );
            }
            parsed
        });
        if let Some(pool) = &variant.pool
            && !pools.iter().any(|known| &known.name == pool)
        {
            issues
                .add(format!("{path}.pool"), format!("no pool is named `{pool}` (see [[pools]])"));
        }
        let weight = match variant.weight {
            None => 1,
            Some(weight) if (0..=1_000_000).contains(&weight) => weight as u32,
            Some(weight) => {
                issues
                    .add(format!("{path}.weight"), format!("{weight} is out of range 0..=1000000"));
                1
            }
        };
        variants.push(VariantConfig { name, strategy, policy, pool: variant.pool.clone(), weight });
    }
    if !variants.is_empty() {
        let table = variants
            .iter()
            .map(|v| WeightedVariant { name: v.name.clone(), weight: v.weight })
            .collect();
        if let Err(error) = VariantTable::new(table) {
            issues.add(path, error.to_string());
        }
    }
    variants
}

pub(super) fn canary(raw: &RawCanary, issues: &mut Issues) -> CanaryConfig {
    let sticky_header = raw.sticky_header.as_deref().and_then(|name| {
        let parsed = HeaderName::try_from(name.to_ascii_lowercase()).ok();
        if parsed.is_none() {
            issues.add("canary.sticky_header", format!("`{name}` is not a header name"));
        }
        parsed
    });
    let window = Duration::from_secs(issues.positive(
        "canary.window_seconds",
        raw.window_seconds,
        300,
        86_400,
    ));
    let mut limit = |field: &str, value: Option<f64>| match value {
        Some(ms) if !(ms.is_finite() && ms > 0.0) => {
            issues.add(
                format!("canary.slo.{field}"),
                format!("{ms} must be a positive number of ms"),
            );
            None
        }
        other => other,
    };
    let slo = Slo {
        ttft_ms: limit("ttft_ms", raw.slo.ttft_ms),
        tpot_ms: limit("tpot_ms", raw.slo.tpot_ms),
        e2e_ms: limit("e2e_ms", raw.slo.e2e_ms),
    };
    CanaryConfig {
        sticky_header,
        window,
        slo,
        guard: guard(raw, issues),
        automation: automation(raw, issues),
    }
}

/// The token, from the file or from the environment variable it names (read once, here).
pub(super) fn admin(raw: &RawAdmin, issues: &mut Issues) -> AdminConfig {
    let token = match (&raw.token, &raw.token_env) {
        (Some(_), Some(_)) => {
            issues.add("admin.token_env", "give either admin.token or admin.token_env, not both");
            None
        }
        (Some(token), None) => Some(token.clone()),
        (None, Some(variable)) => match std::env::var(variable) {
            Ok(token) => Some(token),
            Err(_) => {
                issues.add(
                    "admin.token_env",
                    format!("environment variable `{variable}` is not set"),
                );
                None
            }
        },
        (None, None) => None,
    };
    if token.as_deref().is_some_and(|token| token.trim().len() < 8) {
        issues.add("admin.token", "must hold at least 8 characters");
    }
    AdminConfig { token }
}

#[cfg(test)]
mod tests {
    use super::super::GatewayConfig;

    const REPLICAS: &str = "[[replicas]]\nname = \"a\"\nurl = \"http://10.0.0.1:8000\"\n\
        [[replicas]]\nname = \"b\"\nurl = \"http://10.0.0.2:8000\"\n";

    #[test]
    fn variants_pools_canary_and_admin_are_read() {
        let text = format!(
            "{REPLICAS}[[pools]]\nname = \"tp8x2\"\nreplicas = [\"a\"]\n\
             [[entries.short.variants]]\nname = \"fc\"\nstrategy = \"force_close\"\nweight = 3\n\
             [[entries.short.variants]]\nname = \"ka\"\nstrategy = \"keep_alive\"\n\
             policy = \"round_robin\"\npool = \"tp8x2\"\n\
             [canary]\nsticky_header = \"X-User-Id\"\nwindow_seconds = 60\n\
             slo = {{ ttft_ms = 500, tpot_ms = 50 }}\n[admin]\ntoken = \"0123456789\"\n"
        );
        let config = GatewayConfig::from_toml(&text).unwrap();
        let variants = &config.short.variants;
        assert_eq!(variants.len(), 2);
        assert_eq!((variants[0].weight, variants[1].weight), (3, 1));
        assert_eq!(variants[1].pool.as_deref(), Some("tp8x2"));
        assert_eq!(variants[1].policy, Some(super::PolicyKind::RoundRobin));
        assert_eq!(config.pool("tp8x2").unwrap().replicas, ["a"]);
        assert_eq!(config.canary.sticky_header.as_ref().unwrap().as_str(), "x-user-id");
        assert_eq!(config.canary.window.as_secs(), 60);
        assert_eq!(config.canary.slo.ttft_ms, Some(500.0));
        assert_eq!(config.admin.token.as_deref(), Some("0123456789"));
        // No variants: one implicit `default` with the entry's strategy.
        let implicit = config.long.effective_variants();
        assert_eq!(implicit.len(), 1);
        assert_eq!(implicit[0].name, "default");
        assert_eq!(implicit[0].strategy, config.long.strategy);
    }

    #[test]
    fn every_bad_canary_field_is_named_by_its_path() {
        let text = format!(
            "{REPLICAS}[[pools]]\nname = \"p\"\nreplicas = [\"a\", \"zz\"]\n\
             [[pools]]\nname = \"p\"\nreplicas = []\n\
             [[entries.short.variants]]\nname = \"x y\"\nstrategy = \"never\"\npool = \"nope\"\n\
             weight = -1\n\
             [[entries.long.variants]]\nname = \"z\"\nweight = 0\npolicy = \"random\"\n\
             [[entries.debug.variants]]\nname = \"d\"\n\
             [canary]\nsticky_header = \"bad header\"\nwindow_seconds = 0\nslo = {{ ttft_ms = -5 }}\n\
             [admin]\ntoken = \"short\"\n"
        );
        let error = GatewayConfig::from_toml(&text).unwrap_err();
        let mut paths: Vec<&str> = error.issues.iter().map(|i| i.path.as_str()).collect();
        paths.sort_unstable();
        assert_eq!(
            paths,
            [
                "admin.token",
                "canary.slo.ttft_ms",
                "canary.sticky_header",
                "canary.window_seconds",
                "entries.debug.variants",
                "entries.long.variants",
                "entries.long.variants[0].policy",
                "entries.short.variants[0].name",
                "entries.short.variants[0].pool",
                "entries.short.variants[0].strategy",
                "entries.short.variants[0].weight",
                "pools[0].replicas[1]",
                "pools[1].name",
                "pools[1].replicas",
            ],
            "{error}"
        );
    }

    #[test]
    fn the_admin_token_may_come_from_the_environment() {
        let both = "[admin]\ntoken = \"0123456789\"\ntoken_env = \"HOME\"\n";
        let error = GatewayConfig::from_toml(both).unwrap_err();
        assert_eq!(error.issues[0].path, "admin.token_env");
        let unset = "[admin]\ntoken_env = \"LANEWAY_TEST_TOKEN_THAT_IS_NEVER_SET\"\n";
        let error = GatewayConfig::from_toml(unset).unwrap_err();
        assert!(error.issues[0].message.contains("is not set"), "{error}");
        // PATH is set in every environment the tests run in and is long enough.
        let config = GatewayConfig::from_toml("[admin]\ntoken_env = \"PATH\"\n").unwrap();
        assert_eq!(config.admin.token, std::env::var("PATH").ok());
    }
}
