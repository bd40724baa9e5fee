//! The TOML file as written: every field optional and kept loosely typed (strings for
//! addresses and names) so that validation can name every bad field, not just the first.

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub listen: Option<String>,
    pub admin_listen: Option<String>,
    pub policy: Option<String>,
    pub body_limit_bytes: Option<i64>,
    pub drain_deadline_ms: Option<i64>,
    pub connect_timeout_ms: Option<i64>,
    #[serde(default)]
    pub classifier: RawClassifier,
    #[serde(default)]
    pub scrape: RawScrape,
    #[serde(default)]
    pub entries: RawEntries,
    #[serde(default)]
    pub replicas: Vec<RawReplica>,
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReplica {
    pub name: Option<String>,
    pub url: Option<String>,
    pub node: Option<String>,
}
