//! Replicas and a pick context for the policies' unit tests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::policy::PickContext;
use super::predict::EngineWork;
use super::replica::Replica;
use crate::gateway::config::ReplicaConfig;

/// `count` replicas named `r0`, `r1`, ... on one node, at an address nothing listens on.
pub fn replicas(count: usize) -> Vec<Arc<Replica>> {
    (0..count)
        .map(|i| {
            Arc::new(Replica::new(&ReplicaConfig {
                name: format!("r{i}"),
                authority: "127.0.0.1:1".into(),
                node: "n".into(),
                tls: false,
                placement: Default::default(),
            }))
        })
        .collect()
}

/// A context at this instant, nothing excluded, reports fresh for a second.
pub fn context() -> PickContext {
    let epoch = Instant::now();
    PickContext { epoch, now: epoch, fresh_for: Duration::from_secs(1), exclude: None }
}

/// A context at `now`, nothing excluded, with no report read (none is fresh before it).
pub fn context_at(now: Instant) -> PickContext {
    PickContext { epoch: now, now, fresh_for: Duration::from_secs(1), exclude: None }
}

/// Teaches `replica` a prefill of `us_per_token` (and 10 ms of intercept) and a decode of
/// `tpot_ms` per token, alone on it, over prompts of 500 to 4,000 tokens.
pub fn teach(replica: &Replica, us_per_token: f64, tpot_ms: f64) {
    for round in 0..4 {
        for prompt in [500u64, 1000, 2000, 4000] {
            let seconds = 0.010 + us_per_token * 1e-6 * prompt as f64 + round as f64 * 1e-5;
            replica.latency.observe_prefill((0, prompt), 0, true, Duration::from_secs_f64(seconds));
            replica.latency.observe_decode(1.0, Duration::from_secs_f64(tpot_ms / 1000.0));
        }
    }
}

/// Shows `replica` an engine that prefilled 32 prompts of 400 tokens at `us_per_token`
/// (and 5 ms a request) before this gateway's first scrape of it, as vLLM counts them.
pub fn teach_engine(replica: &Replica, us_per_token: f64) {
    let prefills = 32.0;
    let tokens = 400.0 * prefills;
    let work = EngineWork {
        prefill_seconds: 0.005 * prefills + us_per_token * 1e-6 * tokens,
        prefills,
        computed_tokens: tokens,
    };
    replica.latency.observe_engine_work(work, std::time::Instant::now());
}
