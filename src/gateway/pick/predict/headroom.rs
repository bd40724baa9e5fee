//! `predicted_latency`: each candidate's TTFT and TPOT for this request are predicted from
//! the replica's learned estimate and its current queue, and the request goes to the least
//! loaded candidate among those predicted to meet its SLO.
//!
//! ```text
//! others   = requests in flight on the replica (this one not included)
//! ttft     = ttft_base[others] + prefill_slope * (engine_prefill_tokens + prompt_tokens)
//!          + ttft_spread[others]       (one spread above the mean; never falls as others grow)
//! tpot     = decode_intercept  + decode_slope  * (others + 1)
//! headroom = min(1 - ttft / slo.ttft, 1 - tpot / slo.tpot) - failures
//! fits     = headroom >= 1 - FIT_SHARE      (both predictions within 90% of the SLO)
//! ```
//! Every candidate is judged. Among those that fit, the lowest `least_queue` score wins (the
//! gateway's own in-flight counts, updated at each pick, so a scan does not herd the way
//! lagged latency estimates alone would); if none fits, the likeliest first token in time
//! among those predicted to meet the TPOT objective at all wins (`Margins::ttft_odds`: how
//! many spreads the objective lies above the predicted mean), else the widest headroom
//! overall. A first token predicted late by its queue's coin flips (a mean of 400 ms and a
//! spread of 300 against 500) is likelier in time than one late by the engine's own
//! prefill (590 ms, spread 30): ranked by mean plus spread, the second won, and on the
//! simulator's heterogeneous fleet 9,000-token prompts went to TP4 replicas where 29 in 30
//! missed, while TP8 replicas past their knee met 40% of theirs. So a replica
//! predicted to miss the SLO never takes a request from one predicted to meet it, and
//! replicas that all meet it share by load. Past capacity a predicted TTFT miss is
//! preferred to a predicted TPOT miss: TPOT is steady and its prediction near certain,
//! while TTFT on a busy replica is a coin flip (its API processes race for the connection);
//! comparing the sizes of the two misses sent a slowed replica the overflow, and most of it
//! missed TPOT. Ties go to the first candidate from a random start.
//!
//! Every `EXPLORE_EVERY`-th pick goes to the candidate whose estimate is stalest for the
//! request's size (the one placed a request of that power-of-two size longest ago),
//! whatever the predictions say, so a replica that nothing
//! else would pick is still measured, within a bounded number of picks, and wins its share
//! back when it recovers; at most that share of the traffic is spent on it. Exploration is
//! counted, not drawn: a run of unlucky draws could otherwise leave a healed replica
//! unmeasured for hundreds of requests. The start of each scan comes from a seeded
//! generator, so tests replay the picks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::gateway::pick::draw::Draws;
use crate::gateway::pick::least_queue;
use crate::gateway::pick::policy::{
    PickContext, Policy, RequestShape, candidate_count, nth_candidate,
};
use crate::gateway::pick::predict::{EngineReading, Predicted};
use crate::gateway::pick::replica::Replica;

/// One pick in this many goes to the stalest candidate, whatever the predictions say.
pub const EXPLORE_EVERY: u64 = 32;

/// Share of each objective a prediction must stay within to count as meeting it: a
/// prediction is a mean, and a mean right at the objective misses it half the time.
pub const FIT_SHARE: f64 = 0.9;

/// The least spread a first-token prediction is read with, as a share of the objective: a
/// replica measured as steady is still not certain to the millisecond.
pub const MIN_ODDS_SPREAD: f64 = 0.05;

/// The policy: its generator and its count of picks.
#[derive(Debug)]
pub struct PredictedLatency {
    rng: Draws,
    picks: AtomicU64,
    /// One pick in this many explores; zero never does.
    explore_every: u64,
}

impl PredictedLatency {
    pub fn new(seed: u64) -> Self {
        Self { rng: Draws::new(seed), picks: AtomicU64::new(0), explore_every: EXPLORE_EVERY }
    }

    /// The same policy exploring one pick in `every` (tests: 0 for pure predictions).
    pub fn with_explore_every(mut self, every: u64) -> Self {
        self.explore_every = every;
        self
    }

    /// Whether this pick is an exploration (the first, then one in `explore_every`).
    fn explores(&self) -> bool {
        self.explore_every > 0
            && self.picks.fetch_add(1, Ordering::Relaxed).is_multiple_of(self.explore_every)
    }
}

/// The margins a request would have on `replica`, as shares of each objective; below
/// zero, a predicted miss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Margins {
    pub ttft: f64,
    pub tpot: f64,
    /// Connection and scrape failures, each worth a whole objective.
    pub failures: f64,
    /// How many of its spreads the predicted mean first token lies under the TTFT
    /// objective (failures taking a whole objective each); below zero, over it. The
    /// spread counts as at least `MIN_ODDS_SPREAD` of the objective.
    pub ttft_odds: f64,
}

impl Margins {
    /// `request`'s margins on `replica` at `context.now`.
    pub fn of(replica: &Replica, request: &RequestShape, context: &PickContext) -> Self {
        let predicted = predicted_for(replica, request, context);
        // The TTFT judged is a spread above the mean: where first tokens are fast or late
        // by which API process takes the connection, the mean alone meets an objective
        // that many requests miss.
        let ttft = predicted.ttft + predicted.ttft_spread;
        let objective = request.slo.ttft.as_secs_f64().max(1e-6);
        let failures = replica.load.failures() as f64;
        let spread = predicted.ttft_spread.max(MIN_ODDS_SPREAD * objective);
        Self {
            ttft: 1.0 - ttft / objective,
            tpot: 1.0 - predicted.tpot / request.slo.tpot.as_secs_f64().max(1e-6),
            failures,
            ttft_odds: (objective * (1.0 - failures) - predicted.ttft) / spread,
        }
    }

    /// The narrower margin, less the failures.
    pub fn headroom(self) -> f64 {
        self.ttft.min(self.tpot) - self.failures
    }
}

/// What `replica`'s estimate predicts at `context.now` for one more request of this shape,
/// behind the prefill placed ahead of it and beside the requests on it (every gateway's, as
/// its engine reports them: [`PickContext::requests_on`]).
pub fn predicted_for(
    replica: &Replica,
    request: &RequestShape,
    context: &PickContext,
) -> Predicted {
    let in_flight = context.requests_on(replica) + 1;
    let estimate = &replica.latency;
    let (ahead, prompt) = (estimate.ahead_of_next(), request.prompt_tokens);
    estimate.predict_at(context.now, EngineReading::Fitted, ahead, prompt, in_flight)
}

/// Whether a headroom means both predictions are within `FIT_SHARE` of the SLO.
pub fn fits(headroom: f64) -> bool {
    headroom >= 1.0 - FIT_SHARE
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
        if self.explores() {
            let stalest = (0..count).min_by_key(|&n| {
                let latency = &replicas[nth_candidate(n, context)].latency;
                latency.last_placed_for(request.prompt_tokens)
            });
            return stalest.map(|n| nth_candidate(n, context));
        }
        let start = self.rng.below(count);
        // (score, index) of the least loaded fitting candidate; (odds, index) of the
        // likeliest first token in time among those whose TPOT fits; (headroom, index) of
        // the widest headroom overall.
        let mut least_loaded: Option<(f64, usize)> = None;
        let mut likeliest_tpot_fit: Option<(f64, usize)> = None;
        let mut widest: Option<(f64, usize)> = None;
        let wider = |best: Option<(f64, usize)>, room: f64| best.is_none_or(|(b, _)| room > b);
        for step in 0..count {
            let index = nth_candidate((start + step) % count, context);
            let replica = &replicas[index];
            let margins = Margins::of(replica, request, context);
            let room = margins.headroom();
            if fits(room) {
                let score = least_queue::score(replica, context);
                if least_loaded.is_none_or(|(best, _)| score < best) {
                    least_loaded = Some((score, index));
                }
            } else if least_loaded.is_none() {
                let odds = margins.ttft_odds;
                if margins.tpot - margins.failures >= 0.0 && wider(likeliest_tpot_fit, odds) {
                    likeliest_tpot_fit = Some((odds, index));
                }
                if wider(widest, room) {
                    widest = Some((room, index));
                }
            }
        }
        least_loaded.or(likeliest_tpot_fit).or(widest).map(|(_, index)| index)
    }
}
