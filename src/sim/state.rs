//! What every connection of one simulated replica shares.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;

use super::api_workers::ApiWorkers;
use super::clock::SimClock;
use super::config::SimConfig;
use super::engine::{EngineLoad, EngineRequest};
use super::fault::FaultSwitch;
use super::kv_events::KvEventPorts;
use super::metrics::SimMetrics;
use super::stats::{RequestCounters, SimStats};

/// One replica's shared state (no globals: several replicas live in one process).
#[derive(Debug)]
pub struct SimState {
    pub config: SimConfig,
    pub clock: SimClock,
    pub workers: Arc<ApiWorkers>,
    pub engine_inbox: mpsc::UnboundedSender<EngineRequest>,
    pub engine_load: Arc<EngineLoad>,
    pub metrics: Arc<SimMetrics>,
    pub faults: FaultSwitch,
    pub counters: Arc<RequestCounters>,
    /// Unix seconds at start: the `created` field of responses.
    pub created_unix: u64,
    /// Where KV-cache events are published (`None`: they are off).
    pub kv_events: Option<KvEventPorts>,
}

impl SimState {
    pub fn stats(&self) -> SimStats {
        SimStats {
            connections_accepted: self.counters.connections_accepted.load(Ordering::Relaxed),
            requests_total: self.counters.requests_total.load(Ordering::Relaxed),
            choice_events_sent: self.counters.choice_events_sent.load(Ordering::Relaxed),
            requests_per_worker: self.workers.requests_per_worker(),
            connections_per_worker: self.workers.connections_per_worker(),
            prefix_cache_queries: self.metrics.prefix_cache_queries.get(),
            prefix_cache_hits: self.metrics.prefix_cache_hits.get(),
            running: self.engine_load.running.load(Ordering::Relaxed),
            waiting: self.engine_load.waiting.load(Ordering::Relaxed),
            preprocessing_per_worker: (0..self.workers.len())
                .map(|worker| self.workers.preprocessing_pending(worker))
                .collect(),
        }
    }
}
