//! The TTFT estimate that prefix-aware placement weighs a cache hit against load with,
//! behind a trait of its own so that a better predictor can replace it.
//!
//! # The queue estimate
//! ```text
//! ttft_us = prefill_us_per_token * (owed_prefill_tokens + uncached_tokens)
//!         + request_us * max(in_flight, running + waiting)
//!         + FAILURE_PENALTY_US * failures
//! ```
//! `owed_prefill_tokens` are the uncached prompt tokens of this gateway's requests on the
//! replica that have not had their first token yet: the prefill work queued ahead.
//! `request_us` charges each request already there for the decode steps and API work that
//! share the replica with a new prefill. Reported figures count only while fresh, as in
//! `least_queue`.

use super::super::policy::PickContext;
use super::super::replica::Replica;

/// A replica that refuses connections or scrapes looks this much slower per failure.
pub const FAILURE_PENALTY_US: f64 = 10_000_000.0;

/// Predicts a request's time to first token on a replica.
pub trait TtftEstimate {
    /// Microseconds until the first token of a request that must prefill `uncached_tokens`
    /// on `replica`.
    fn ttft_us(&self, replica: &Replica, uncached_tokens: u64, context: &PickContext) -> f64;
}

/// The queue estimate documented above.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueTtft {
    pub prefill_us_per_token: f64,
    pub request_us: f64,
}

impl TtftEstimate for QueueTtft {
    fn ttft_us(&self, replica: &Replica, uncached_tokens: u64, context: &PickContext) -> f64 {
        let load = &replica.load;
        let owed = load.prefill_owed_tokens() as f64;
        let requests = context.requests_on(replica) as f64;
        self.prefill_us_per_token * (owed + uncached_tokens as f64)
            + self.request_us * requests
            + FAILURE_PENALTY_US * load.failures() as f64
    }
}
