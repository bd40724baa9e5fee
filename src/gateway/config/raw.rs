//! The TOML file as written: every field optional and kept loosely typed (strings for
//! addresses and names) so that validation can name every bad field, not just the first.

use serde::Deserialize;

use super::reliability::{RawAdmission, RawHealth, RawLimits, RawRetry, RawTimeouts};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub listen: Option<String>,
    pub admin_listen: Option<String>,
    pub policy: Option<String>,
    pub body_limit_bytes: Option<i64>,
    pub drain_deadline_ms: Option<i64>,
    pub connect_timeout_ms: Option<i64>,
    pub header_timeout_ms: Option<i64>,
    pub access_log: Option<bool>,
    #[serde(default)]
    pub classifier: RawClassifier,
    #[serde(default)]
    pub scrape: RawScrape,
    #[serde(default)]
    pub entries: RawEntries,
    #[serde(default)]
    pub replicas: Vec<RawReplica>,
    #[serde(default)]
    pub pools: Vec<RawPool>,
    #[serde(default)]
    pub canary: RawCanary,
    #[serde(default)]
    pub admin: RawAdmin,
    pub tls: Option<crate::gateway::tls::RawTls>,
    pub auth: Option<super::auth::RawAuth>,
    pub upstream_tls: Option<crate::gateway::tls::upstream::RawUpstreamTls>,
    #[serde(default)]
    pub discovery: super::discovery::RawDiscovery,
    #[serde(default)]
    pub health: RawHealth,
    #[serde(default)]
    pub retry: RawRetry,
    #[serde(default)]
    pub timeouts: RawTimeouts,
    #[serde(default)]
    pub admission: RawAdmission,
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub prefix: super::prefix::RawPrefix,
    #[serde(default)]
    pub kv_events: super::kv_events::RawKvEvents,
    #[serde(default)]
    pub capacity: super::capacity::RawCapacity,
    #[serde(default)]
    pub models: super::models::RawModels,
    #[serde(default)]
    pub tenants: Vec<super::tenants::RawTenant>,
    #[serde(default)]
    pub routes: super::routes::RawRoutes,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClassifier {
    pub short_threshold_tokens: Option<i64>,
    pub tokenizer: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScrape {
    pub interval_ms: Option<i64>,
    pub stale_after_intervals: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEntries {
    #[serde(default)]
    pub short: RawEntry,
    #[serde(default)]
    pub long: RawEntry,
    #[serde(default)]
    pub debug: RawEntry,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEntry {
    pub strategy: Option<String>,
    pub listen: Option<String>,
    pub spread_connections: Option<i64>,
    pub ready_connections: Option<i64>,
    pub ready_max_idle_ms: Option<i64>,
    /// Debug entry only: served on the smart listener too (`/debug/...`).
    pub smart_listener: Option<bool>,
    /// Debug entry only: debug requests in flight per replica, 429 beyond.
    pub max_in_flight_per_replica: Option<i64>,
    #[serde(default)]
    pub slo: super::RawEntrySlo,
    #[serde(default)]
    pub variants: Vec<RawVariant>,
}

/// One canary variant of an entry: `[[entries.short.variants]]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVariant {
    pub name: Option<String>,
    pub strategy: Option<String>,
    pub policy: Option<String>,
    pub pool: Option<String>,
    pub weight: Option<i64>,
}

/// A named group of replicas a variant may target: `[[pools]]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPool {
    pub name: Option<String>,
    #[serde(default)]
    pub replicas: Vec<String>,
    /// Models every member serves (`[models]`).
    pub models: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCanary {
    pub sticky_header: Option<String>,
    pub window_seconds: Option<i64>,
    #[serde(default)]
    pub slo: RawSlo,
    pub alpha: Option<f64>,
    pub guard: Option<Vec<String>>,
    #[serde(default)]
    pub margins: std::collections::BTreeMap<String, f64>,
    pub min_pairs: Option<i64>,
    pub auto_rollback: Option<bool>,
    pub promote_step: Option<i64>,
    pub promote_max_weight: Option<i64>,
    pub promote_min_pairs: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSlo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub token: Option<String>,
    pub token_env: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReplica {
    pub name: Option<String>,
    pub url: Option<String>,
    pub node: Option<String>,
    /// Every node of a replica that spans several (`node` is the one-node form).
    pub nodes: Option<Vec<String>>,
    pub rack: Option<String>,
    pub capacity_rps: Option<f64>,
    /// Models this replica serves, instead of asking its `/v1/models`.
    pub models: Option<Vec<String>>,
}
