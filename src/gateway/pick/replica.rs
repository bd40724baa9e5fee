//! One replica as the picker sees it: its address and the lock-free load figures that the
//! request path, the in-flight guard and the metrics scraper update.

use super::addresses::ReplicaAddresses;
use super::answer_gate::AnswerGate;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::HeaderValue;
use rustls_pki_types::ServerName;

use super::freed::FreedProcesses;
use super::predict::LatencyEstimate;
use super::prefix::cache_granularity::CacheGranularity;
use super::replica_health::ReplicaHealth;
use crate::gateway::config::{Placement, ReplicaConfig};
use crate::gateway::kv_events::engine_cache::EngineCache;
use crate::gateway::tls::upstream as upstream_tls;

/// A replica and its load.
#[derive(Debug)]
pub struct Replica {
    pub name: String,
    /// A stable hash of the name ([`super::prefix::hash_bytes`]): session affinity's
    /// rendezvous weights and its memory of where a session went.
    pub name_hash: u64,
    /// The name as the `x-laneway-replica` response header, made once (`None` if the name
    /// cannot be a header value).
    pub name_header: Option<HeaderValue>,
    /// `host:port`.
    pub authority: String,
    /// What `authority` resolves to, kept between connects.
    pub addresses: ReplicaAddresses,
    /// Fault domain (the first, when it spans several nodes).
    pub node: String,
    /// Further nodes, rack and configured capacity at SLO.
    pub placement: Placement,
    /// For an `https://` replica, the name its certificate must carry; `None` for `http://`.
    pub server_name: Option<ServerName<'static>>,
    pub load: ReplicaLoad,
    /// Prefill and decode speed learned from this gateway's streams (predicted-latency
    /// placement).
    pub latency: LatencyEstimate,
    /// Set by an operator (admin API): no new requests, those in flight finish.
    pub draining: AtomicBool,
    /// Active checks and passive ejection; never touches `load`.
    pub health: ReplicaHealth,
    /// Model names (base model and LoRA adapters) its `/v1/models` last listed.
    pub served_models: ArcSwap<Vec<String>>,
    /// The blocks its engine holds, as its KV events say (`[kv_events]`).
    pub engine_cache: EngineCache,
    /// The unit its engine caches prompts in, as its `cached_tokens` reports teach it.
    pub cache_granularity: CacheGranularity,
}

impl Replica {
    pub fn new(config: &ReplicaConfig) -> Self {
        Self {
            name: config.name.clone(),
            name_hash: super::prefix::hash_bytes(config.name.as_bytes()),
            name_header: HeaderValue::from_str(&config.name).ok(),
            authority: config.authority.clone(),
            addresses: ReplicaAddresses::new(&config.authority),
            node: config.node.clone(),
            placement: config.placement.clone(),
            // Validation refused https URLs whose host is no server name.
            server_name: config.tls.then(|| upstream_tls::server_name(&config.authority)).flatten(),
            load: ReplicaLoad::default(),
            latency: LatencyEstimate::default(),
            draining: AtomicBool::new(false),
            health: ReplicaHealth::default(),
            served_models: ArcSwap::from_pointee(Vec::new()),
            engine_cache: EngineCache::default(),
            cache_granularity: CacheGranularity::default(),
        }
    }

    /// The URL scheme: `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        if self.server_name.is_some() { "https" } else { "http" }
    }

    /// Whether this is the replica `config` describes (same name, address, scheme, nodes,
    /// rack and configured capacity), so that a reload or a discovery round keeps its
    /// counters; a replica whose placement changed is built anew with the new one.
    pub fn is(&self, config: &ReplicaConfig) -> bool {
        self.name == config.name
            && self.authority == config.authority
            && self.server_name.is_some() == config.tls
            && self.node == config.node
            && self.placement == config.placement
    }

    /// Every node it runs on, `node` first.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.node.as_str())
            .chain(self.placement.other_nodes.iter().map(String::as_str))
    }

    /// Whether the picker may send this replica a new request (requests already on it
    /// finish): not drained by an operator, and in rotation by its health.
    pub fn accepts_new_requests(&self) -> bool {
        !self.is_draining() && self.health.in_rotation()
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    pub fn set_draining(&self, draining: bool) {
        self.draining.store(draining, Ordering::Relaxed);
    }
}

/// Load figures, each an atomic so that picking never takes a lock.
#[derive(Debug, Default)]
pub struct ReplicaLoad {
    /// Requests this gateway sent that have not finished their response body.
    pub in_flight: AtomicU64,
    /// Signalled when `in_flight` falls to zero (shutdown waits on it).
    pub idle: tokio::sync::Notify,
    /// Estimated prompt tokens of those requests.
    pub in_flight_prompt_tokens: AtomicU64,
    /// Debug-entry requests among them, under their own limit.
    pub debug_in_flight: AtomicU64,
    /// Predicted uncached prompt tokens of `prefix_aware` requests before their first
    /// token: the prefill work queued on the replica.
    pub prefill_owed_tokens: AtomicU64,
    /// Refused connections and failed scrapes since the last success of either.
    failures: AtomicU64,
    /// Last scraped `vllm:num_requests_waiting` (or SGLang's equivalent).
    pub reported_waiting: AtomicU64,
    /// Last scraped `vllm:num_requests_running`.
    pub reported_running: AtomicU64,
    /// Last scraped KV-cache use, 0..1, as `f64` bits.
    kv_cache_usage_bits: AtomicU64,
    /// When the last successful scrape finished, in microseconds since the set's epoch
    /// plus one; zero means never.
    last_scrape_micros: AtomicU64,
    /// Requests sent to it, ever (counted at pick): the arrival rate capacity learning sees.
    pub arrivals: AtomicU64,
    /// Inference requests whose response ended, and those of them that met their SLO.
    pub finished: AtomicU64,
    pub good: AtomicU64,
    /// Streamed requests sent and not answered yet, under their limit.
    pub answer_gate: AnswerGate,
    /// Answered responses that ended while stuck requests were waiting for a free API
    /// process here.
    pub freed: FreedProcesses,
}

/// What the scraper read from a replica's `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReportedLoad {
    pub waiting: u64,
    pub running: u64,
    pub kv_cache_usage: f64,
}

impl ReplicaLoad {
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Resolves when no request of this gateway is left on the replica: at once if none
    /// is, else at the next time the count reaches zero.
    pub async fn idle(&self) {
        let idle = self.idle.notified();
        if self.in_flight() == 0 {
            return;
        }
        idle.await;
    }

    pub fn prefill_owed_tokens(&self) -> u64 {
        self.prefill_owed_tokens.load(Ordering::Relaxed)
    }

    /// Counts a finished inference request and whether it met its SLO.
    pub fn record_finished(&self, met_slo: bool) {
        self.finished.fetch_add(1, Ordering::Relaxed);
        if met_slo {
            self.good.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn in_flight_prompt_tokens(&self) -> u64 {
        self.in_flight_prompt_tokens.load(Ordering::Relaxed)
    }

    pub fn kv_cache_usage(&self) -> f64 {
        f64::from_bits(self.kv_cache_usage_bits.load(Ordering::Relaxed))
    }

    /// Stores a scrape's result, taken at `now`.
    pub fn record_scrape(&self, reported: ReportedLoad, epoch: Instant, now: Instant) {
        self.reported_waiting.store(reported.waiting, Ordering::Relaxed);
        self.reported_running.store(reported.running, Ordering::Relaxed);
        self.kv_cache_usage_bits.store(reported.kv_cache_usage.to_bits(), Ordering::Relaxed);
        let micros = now.saturating_duration_since(epoch).as_micros() as u64 + 1;
        self.last_scrape_micros.store(micros, Ordering::Release);
        self.clear_failures();
    }

    /// Counts a refused connection or a failed scrape.
    pub fn record_failure(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// A request or scrape got through: the replica is reachable again.
    pub fn clear_failures(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Age of the last successful scrape at `now`, `None` if there was none.
    pub fn scrape_age(&self, epoch: Instant, now: Instant) -> Option<Duration> {
        match self.last_scrape_micros.load(Ordering::Acquire) {
            0 => None,
            micros => {
                let at = epoch + Duration::from_micros(micros - 1);
                Some(now.saturating_duration_since(at))
            }
        }
    }

    /// The requests on the replica as best known at `now`: this gateway's in flight, or
    /// what its engine last reported running and waiting if the report is younger than
    /// `fresh_for` and says more (other gateways' and clients' requests included).
    pub fn requests_on(&self, epoch: Instant, now: Instant, fresh_for: Duration) -> u64 {
        let own = self.in_flight();
        self.fresh_report(epoch, now, fresh_for).map_or(own, |r| own.max(r.running + r.waiting))
    }

    /// The reported figures if they are younger than `fresh_for`, else `None`.
    pub fn fresh_report(
        &self,
        epoch: Instant,
        now: Instant,
        fresh_for: Duration,
    ) -> Option<ReportedLoad> {
        let age = self.scrape_age(epoch, now)?;
        (age <= fresh_for).then(|| ReportedLoad {
            waiting: self.reported_waiting.load(Ordering::Relaxed),
            running: self.reported_running.load(Ordering::Relaxed),
            kv_cache_usage: self.kv_cache_usage(),
        })
    }
}
