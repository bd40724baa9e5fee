//! The gateway's configuration: a TOML file (schema in [`raw`]) validated once into the
//! typed [`GatewayConfig`] the rest of the gateway reads, with every bad field reported
//! by its path (`replicas[2].url: ...`).

pub mod auth;
mod canary;
mod capacity;
pub mod demo;
pub mod discovery;
mod entry;
mod issues;
mod kv_events;
mod models;
mod prefix;
mod quota_store;
mod raw;
pub mod reference;
pub mod reliability;
mod routes;
mod slo;
mod tenants;
mod validate;
mod verdicts;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::gateway::tls::TlsConfig;
use crate::gateway::tls::upstream::UpstreamTlsConfig;

pub use auth::ApiKeys;
pub use canary::{AdminConfig, CanaryConfig, DEFAULT_VARIANT_NAME, PoolConfig, VariantConfig};
pub use capacity::{CapacityConfig, Placement};
pub use discovery::{DiscoveryConfig, DnsDiscovery, KubernetesDiscovery, Resolver};
pub use entry::{Entry, Strategy, UnknownEntry};
pub use issues::{ConfigError, ConfigIssue, Issues};
pub use kv_events::{EventSource, KvEventsConfig};
pub use models::{ModelsConfig, UnknownModel};
pub use prefix::PrefixConfig;
pub use quota_store::QuotaStoreConfig;
pub use routes::RoutesConfig;
pub use slo::{EntrySlo, RawEntrySlo};
pub use tenants::{DEFAULT_BAND, Flow, MAX_BAND, TenantConfig, TenantLimits};
pub use verdicts::Automation;

/// Which policy picks a replica for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Power-of-two choices on the queue-depth score.
    LeastQueue,
    /// Each replica in turn: the baseline to compare against.
    RoundRobin,
    /// Where the prompt's prefix is cached, unless load makes a miss elsewhere faster, by a
    /// configured prefill speed.
    PrefixAware,
    /// The default: `prefix_aware`'s session and prefix affinity, each candidate judged by
    /// the latency the gateway measured on it and the request's SLO.
    PrefixLatency,
    /// Where the request's predicted TTFT and TPOT leave the most room under its SLO.
    PredictedLatency,
}

impl PolicyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LeastQueue => "least_queue",
            Self::RoundRobin => "round_robin",
            Self::PrefixAware => "prefix_aware",
            Self::PrefixLatency => "prefix_latency",
            Self::PredictedLatency => "predicted_latency",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "least_queue" => Some(Self::LeastQueue),
            "round_robin" => Some(Self::RoundRobin),
            "prefix_aware" => Some(Self::PrefixAware),
            "prefix_latency" => Some(Self::PrefixLatency),
            "predicted_latency" => Some(Self::PredictedLatency),
            _ => None,
        }
    }
}

/// One upstream replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaConfig {
    pub name: String,
    /// `host:port` of its HTTP endpoint.
    pub authority: String,
    /// Fault domain: replicas on one node fail together.
    pub node: String,
    /// `https://`: reached over TLS (`[upstream_tls]`), its certificate verified against
    /// the host of `authority`.
    pub tls: bool,
    /// Nodes beyond `node`, rack and configured capacity (fault units and N-1).
    pub placement: Placement,
}

impl ReplicaConfig {
    /// The URL scheme: `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }

    /// Every node it runs on, `node` first.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.node.as_str())
            .chain(self.placement.other_nodes.iter().map(String::as_str))
    }
}

/// How one entry reaches its replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryConfig {
    pub strategy: Strategy,
    /// A dedicated listener for this entry only, if any.
    pub listen: Option<SocketAddr>,
    /// Connections per replica under the `spread` strategy.
    pub spread_connections: usize,
    /// Connections per replica opened ahead of the requests under `force_close` (0: each
    /// request connects on its own path).
    pub ready_connections: usize,
    /// Ready connections are kept while a replica's requests come closer together than
    /// this, and one unused this long is closed.
    pub ready_max_idle: Duration,
    /// The latency the entry's requests should meet (`[entries.X.slo]`); predicted-latency
    /// placement aims at it, and requests may tighten it with `x-laneway-slo-*` headers.
    pub slo: EntrySlo,
    /// Canary variants; empty means one implicit variant (see [`EntryConfig::effective_variants`]).
    pub variants: Vec<VariantConfig>,
}

impl EntryConfig {
    /// The configured variants, or the implicit `default` one: the entry's strategy, the
    /// global policy, every replica. Resolved late so that a strategy changed after
    /// validation (as tests do) is the one used.
    pub fn effective_variants(&self) -> Vec<VariantConfig> {
        if !self.variants.is_empty() {
            return self.variants.clone();
        }
        vec![VariantConfig {
            name: DEFAULT_VARIANT_NAME.to_string(),
            strategy: self.strategy,
            policy: None,
            pool: None,
            weight: 1,
        }]
    }
}

/// The debug entry reaches one named replica with nothing in between, control endpoints
/// included (vLLM's `/reset_prefix_cache`, `/sleep`, ...), so it is fenced: off the smart
/// listener unless configured, a few requests per replica at once, and with `[auth]` only
/// for keys allowed to debug.
#[derive(Debug, Clone, PartialEq)]
pub struct DebugAccess {
    /// `/debug/...` and `x-laneway-entry: debug` are served on the smart listener too.
    pub on_smart_listener: bool,
    /// Debug requests in flight per replica; more get 429.
    pub max_in_flight_per_replica: u64,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayConfig {
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub policy: PolicyKind,
    pub short_threshold_tokens: u64,
    pub scrape_interval: Duration,
    /// Reported replica figures older than this many intervals are ignored by the score.
    pub stale_after_intervals: u32,
    pub body_limit_bytes: usize,
    pub drain_deadline: Duration,
    pub connect_timeout: Duration,
    /// One `laneway::access` line per request (`access_log = true`); off by default, as
    /// formatting and writing a line per request is most of a tiny request's cost.
    pub access_log: bool,
    pub short: EntryConfig,
    pub long: EntryConfig,
    pub debug: EntryConfig,
    /// Where and how much the debug entry may be used.
    pub debug_access: DebugAccess,
    pub replicas: Vec<ReplicaConfig>,
    /// Named groups of replicas that canary variants may target.
    pub pools: Vec<PoolConfig>,
    pub canary: CanaryConfig,
    pub admin: AdminConfig,
    /// TLS on the inference listeners (`[tls]`), off when `None`.
    pub tls: Option<TlsConfig>,
    /// API keys required on the inference listeners (`[auth]`), none when `None`.
    pub auth: Option<ApiKeys>,
    /// TLS to `https://` replicas (`[upstream_tls]`): roots and client certificate.
    pub upstream_tls: UpstreamTlsConfig,
    /// Replica sources beyond `[[replicas]]` (`[discovery]`).
    pub discovery: DiscoveryConfig,
    /// Health, retries, timeouts, admission and limits.
    pub reliability: reliability::ReliabilityConfig,
    /// The `prefix_aware` policy and session affinity (`[prefix]`).
    pub prefix: PrefixConfig,
    /// The replicas' KV-cache events, followed for prefix placement (`[kv_events]`).
    pub kv_events: KvEventsConfig,
    /// Capacity at SLO and N-1 headroom (`[capacity]`).
    pub capacity: CapacityConfig,
    /// Which replicas serve which model names (`[models]`).
    pub models: ModelsConfig,
    /// Paths the public listeners forward beyond the inference routes (`[routes]`).
    pub routes: RoutesConfig,
    /// Named keys and their limits (`[[tenants]]`).
    pub tenants: Vec<TenantConfig>,
    /// Where the tenants' counters are shared between gateways (`[limits] store`); `None`:
    /// each gateway counts alone.
    pub quota_store: Option<QuotaStoreConfig>,
}

/// The configuration used when none is given; replicas are added by the caller.
pub const DEFAULT_TOML: &str = include_str!("default.toml");

impl GatewayConfig {
    /// Parses and validates a TOML document.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        validate::parse_and_validate(text)
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError {
            issues: vec![ConfigIssue {
                path: path.display().to_string(),
                message: format!("cannot read: {error}"),
            }],
        })?;
        Self::from_toml(&text)
    }

    /// The embedded default with the given replicas (each on its own node).
    pub fn with_replicas(replicas: Vec<ReplicaConfig>) -> Self {
        let mut config = Self::from_toml(DEFAULT_TOML).expect("embedded default is valid");
        config.replicas = replicas;
        config
    }

    pub fn entry(&self, entry: Entry) -> &EntryConfig {
        match entry {
            Entry::Short => &self.short,
            Entry::Long => &self.long,
            Entry::Debug => &self.debug,
        }
    }

    pub fn pool(&self, name: &str) -> Option<&PoolConfig> {
        self.pools.iter().find(|pool| pool.name == name)
    }

    pub fn entry_mut(&mut self, entry: Entry) -> &mut EntryConfig {
        match entry {
            Entry::Short => &mut self.short,
            Entry::Long => &mut self.long,
            Entry::Debug => &mut self.debug,
        }
    }
}
