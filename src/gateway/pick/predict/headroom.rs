//! `predicted_latency`: each candidate's TTFT and TPOT for this request are predicted from
//! the replica's learned estimate and its current queue; the request goes where the
//! tighter of its two SLO margins is widest.
//!
//! ```text
//! ttft = prefill_intercept + prefill_slope * (pending_prefill_tokens + prompt_tokens)
//! tpot = decode_intercept  + decode_slope  * (in_flight + 1)
//! headroom = min(1 - ttft / slo.ttft, 1 - tpot / slo.tpot) - failures
//! ```
//! Two distinct candidates are drawn at random and the one with more headroom wins (power
//! of two choices): a global best would take every request until its estimate caught up
//! with the load it was given, and estimates learned from streams lag by a TTFT at least. A slow replica keeps a
//! share that shrinks as its predictions worsen, and `EXPLORE_RATIO` of the requests go to
//! the candidate that has been placed the fewest requests, so a replica that nothing else
//! would pick is still measured and can win its share back (at most that ratio of the
//! traffic is spent on it). The draws come from a seeded generator, so tests can replay
//! them.

use std::sync::Arc;

use crate::gateway::pick::draw::Draws;
use crate::gateway::pick::policy::{
    PickContext, Policy, RequestShape, candidate_count, nth_candidate,
};
use crate::gateway::pick::replica::Replica;

/// Share of requests placed at random, whatever the predictions say.
pub const EXPLORE_RATIO: f64 = 1.0 / 32.0;

/// The policy; its generator is the only state.
#[derive(Debug)]
pub struct PredictedLatency {
    rng: Draws,
    explore_ratio: f64,
}

impl PredictedLatency {
    pub fn new(seed: u64) -> Self {
        Self { rng: Draws::new(seed), explore_ratio: EXPLORE_RATIO }
    }

    /// The same policy exploring `ratio` of its picks (tests: 0 for pure predictions).
    pub fn with_explore_ratio(mut self, ratio: f64) -> Self {
        self.explore_ratio = ratio.clamp(0.0, 1.0);
        self
    }
}

/// The margin a request would have on `replica`; below zero, a predicted SLO miss.
pub fn headroom(replica: &Replica, request: &RequestShape) -> f64 {
    let in_flight = replica.load.in_flight() + 1;
    let estimate = &replica.latency;
    let predicted =
        estimate.predict(estimate.pending_prefill_tokens(), request.prompt_tokens, in_flight);
    let ttft_margin = 1.0 - predicted.ttft / request.slo.ttft.as_secs_f64().max(1e-6);
    let tpot_margin = 1.0 - predicted.tpot / request.slo.tpot.as_secs_f64().max(1e-6);
    ttft_margin.min(tpot_margin) - replica.load.failures() as f64
}

impl Policy for PredictedLatency {
    fn name(&self) -> &'static str {
        "predicted_latency"
    }

    fn pick(&self, replicas: &[Arc<Replica>], context: &PickContext) -> Option<usize> {
        self.pick_for(replicas, context, &RequestShape::default())
    }

    fn pick_for(
        &self,
        replicas: &[Arc<Replica>],
        context: &PickContext,
        request: &RequestShape,
    ) -> Option<usize> {
        let count = candidate_count(replicas, context);
        match count {
            0 => return None,
            1 => return Some(nth_candidate(0, context)),
            _ => {}
        }
        if self.rng.unit() < self.explore_ratio {
            let least_placed = (0..count)
                .min_by_key(|&n| replicas[nth_candidate(n, context)].latency.placements());
            return least_placed.map(|n| nth_candidate(n, context));
        }
        let (first, second) = self.rng.two_of(count);
        let (a, b) = (nth_candidate(first, context), nth_candidate(second, context));
        let better = headroom(&replicas[b], request) > headroom(&replicas[a], request);
        Some(if better { b } else { a })
    }
}
