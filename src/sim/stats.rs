//! Counters behind `SimHandle::stats()` and `GET /sim/stats`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// A snapshot of what a replica has seen. `requests_*` count inference requests
/// (`POST /v1/chat/completions`, `POST /v1/completions`) that arrived, whatever their outcome;
/// health checks, metrics scrapes and admin calls are not counted.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SimStats {
    pub connections_accepted: u64,
    pub requests_total: u64,
    pub requests_per_worker: Vec<u64>,
    pub connections_per_worker: Vec<u64>,
    /// Sequences in the engine's running batch.
    pub running: u64,
    /// Requests queued for the engine (not yet admitted).
    pub waiting: u64,
    /// Requests being preprocessed (or queued for it) on each API worker.
    #[serde(default)]
    pub preprocessing_per_worker: Vec<u64>,
    /// Streamed events with a choice in them (role and token events) handed to clients: what
    /// a client that lost nothing counts as choice events.
    #[serde(default)]
    pub choice_events_sent: u64,
    /// Prompt tokens looked up in the prefix cache (`vllm:prefix_cache_queries_total`).
    #[serde(default)]
    pub prefix_cache_queries: u64,
    /// Prompt tokens found there (`vllm:prefix_cache_hits_total`).
    #[serde(default)]
    pub prefix_cache_hits: u64,
}

/// Per-replica request counters.
#[derive(Debug, Default)]
pub struct RequestCounters {
    pub connections_accepted: AtomicU64,
    pub requests_total: AtomicU64,
    /// Inference requests being served (headers or body not finished): `/load`.
    pub in_flight: AtomicU64,
    /// Source of response ids.
    pub next_request_id: AtomicU64,
    pub choice_events_sent: AtomicU64,
}

impl RequestCounters {
    pub fn next_id(&self) -> u64 {
        self.next_request_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// Keeps a request counted in `in_flight` until dropped (for streams: when the body ends).
#[derive(Debug)]
pub struct InFlightGuard {
    counters: Arc<RequestCounters>,
}

impl InFlightGuard {
    pub fn new(counters: Arc<RequestCounters>) -> Self {
        counters.in_flight.fetch_add(1, Ordering::Relaxed);
        Self { counters }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
