//! The lowest-cost candidate of a prompt pick ([`fastest`]): each candidate's estimated
//! TTFT given what it holds of the prompt, plus what recomputing or copying a prefix another
//! candidate holds is charged, and when two costs count as equal ([`Tie`]).

use std::sync::Arc;

use super::PromptKey;
use super::index::Held;
use super::placement_trace::{self, Scored};
use super::ttft::TtftEstimate;
use crate::gateway::pick::draw::Draws;
use crate::gateway::pick::least_queue;
use crate::gateway::pick::policy::PickContext;
use crate::gateway::pick::replica::Replica;

/// Estimates closer than this (in microseconds) are taken as equal.
const TIE_US: f64 = 1.0;

/// The candidate with the lowest cost: its estimated TTFT given what it `held`, plus the
/// prefill it would recompute beyond the best-cached copy, at its own prefill speed times
/// [`Choice::recompute_weight`], unless a second copy pays: recomputing a copy still being
/// computed only duplicates work that the requests queued behind pay for, and a
/// conversation follows its history, so moving it throws its copy away; copying a computed
/// prompt that any request may send buys a second replica to hit on, and is charged only
/// for the streams it would stall there ([`Choice::charges_copies`]). Costs within
/// [`Choice::tie`] of the lowest are equal; among equals, the least loaded when the choice
/// balances ties, then the longest hit, then chance (so an idle fleet spreads new prefixes).
pub fn fastest(
    replicas: &[Arc<Replica>],
    candidates: &[usize],
    held: &[Held],
    choice: &Choice<'_>,
    context: &PickContext,
) -> Option<usize> {
    let (key, estimate) = (choice.key, choice.estimate);
    let uncached = |blocks: usize| key.prompt_tokens.saturating_sub(blocks as u64 * key.block_size);
    let most = held.iter().map(|h| h.blocks).max()?;
    let best_all_computing = held.iter().filter(|h| h.blocks == most).all(|h| h.computing);
    let a_copy_pays = !choice.conversation && !best_all_computing;
    let least_uncached = uncached(most);
    // Microseconds charged per token a candidate would prefill beyond the best-cached one,
    // at its own prefill speed: the extra prefill runs there.
    let extra_us_per_token = |replica: &Replica| {
        let prefill_us_per_token = (choice.prefill_us_per_token)(replica);
        if most == 0 {
            0.0
        } else if a_copy_pays {
            // Every stream on it counts, other gateways' and clients' too.
            let streams = context.requests_on(replica) as f64;
            if choice.charges_copies { prefill_us_per_token * streams } else { 0.0 }
        } else {
            choice.recompute_weight * prefill_us_per_token
        }
    };
    let scored: Vec<Scored> = candidates
        .iter()
        .zip(held)
        .map(|(&i, &held)| {
            let uncached = uncached(held.blocks);
            Scored {
                replica: i,
                held,
                ttft_us: estimate.ttft_us(&replicas[i], uncached, context),
                recompute_us: (uncached - least_uncached) as f64 * extra_us_per_token(&replicas[i]),
                prefill_us_per_token: (choice.prefill_us_per_token)(&replicas[i]),
            }
        })
        .collect();
    let chosen = lowest_cost(replicas, &scored, choice, context)?;
    if placement_trace::enabled() {
        placement_trace::emit(replicas, key, &scored, chosen, context);
    }
    Some(chosen)
}

/// The candidate [`fastest`] chooses among those `scored`.
fn lowest_cost(
    replicas: &[Arc<Replica>],
    scored: &[Scored],
    choice: &Choice<'_>,
    context: &PickContext,
) -> Option<usize> {
    let best = scored.iter().map(Scored::cost_us).fold(f64::INFINITY, f64::min);
    let mut equals: Vec<&Scored> =
        scored.iter().filter(|s| s.cost_us() <= best + choice.tie.us(best)).collect();
    if choice.tie.balances_load() && equals.len() > 1 {
        let load = |s: &&Scored| least_queue::score(&replicas[s.replica], context);
        let least = equals.iter().map(load).fold(f64::INFINITY, f64::min);
        equals.retain(|s| load(s) <= least);
    }
    let longest = equals.iter().map(|s| s.held.blocks).max()?;
    let ties: Vec<usize> =
        equals.iter().filter(|s| s.held.blocks == longest).map(|s| s.replica).collect();
    Some(ties[choice.ties.below(ties.len())])
}

/// When two candidates' costs count as equal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tie {
    /// Equal to the microsecond, broken by the longest hit (`prefix_aware`).
    Exact,
    /// Equal within the noise of a measured prediction: `share` of the lowest cost, at
    /// least `floor_us`, broken by load first (`prefix_latency`). Measured estimates never
    /// agree to the microsecond, and a prefix every prompt shares (a chat template's first
    /// block) otherwise sent every request of a lightly loaded fleet to one replica.
    Measured { share: f64, floor_us: f64 },
}

impl Tie {
    fn us(self, best: f64) -> f64 {
        match self {
            Self::Exact => TIE_US,
            Self::Measured { share, floor_us } => (best * share).max(floor_us),
        }
    }

    fn balances_load(self) -> bool {
        matches!(self, Self::Measured { .. })
    }
}

/// `prefix_latency`'s tie: predictions within 10% or 2 ms of the fastest are equals.
pub const MEASURED_TIE: Tie = Tie::Measured { share: 0.10, floor_us: 2000.0 };

/// `prefix_latency`'s tie where every candidate holds as much of the prompt, and some (as
/// the holders of a hot prefix copied in the background do): predictions
/// within 25% or 5 ms of the fastest are equals, so load decides between replicas of one
/// speed, as `leastconn` does, and a replica several times slower stays out. Within 10%,
/// two real replicas holding the same contexts split their hits 350 to 100 on a few
/// milliseconds of predicted difference.
pub const INDIFFERENT_TIE: Tie = Tie::Measured { share: 0.25, floor_us: 5000.0 };

/// What [`fastest`] weighs a request by: its prompt, the TTFT estimate, the cost of
/// recomputing a prefix another candidate holds, and the tie-breaker.
pub struct Choice<'a> {
    pub key: &'a PromptKey,
    pub estimate: &'a dyn TtftEstimate,
    /// Microseconds a token of prefill takes on a candidate: the charges below count prefill
    /// that candidate would do, so they count it at its speed.
    pub prefill_us_per_token: &'a dyn Fn(&Replica) -> f64,
    /// How many times a candidate's prefill of the prompt tokens beyond the best-cached
    /// candidate's counts, when a second copy would not pay (see [`fastest`]).
    pub recompute_weight: f64,
    /// When a copy pays: whether it is charged its extra prefill once per request in flight
    /// on the candidate. A prefill holds up every stream already decoding on its replica
    /// (each engine step that carries a prefill chunk is that much longer), so a copy made
    /// on a busy replica costs its other requests what it saves this one; on an idle replica
    /// it costs nothing and spreads a hot prefix.
    pub charges_copies: bool,
    /// When costs count as equal, and how equals are told apart.
    pub tie: Tie,
    pub ties: &'a Draws,
    /// The prompt continues a conversation ([`super::conversation`]): moving it throws its
    /// copy away, and recomputing is charged flat ([`Choice::recompute_weight`]).
    pub conversation: bool,
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::gateway::config::EntrySlo;
    use crate::gateway::pick::policy::RequestShape;
    use crate::gateway::pick::predict::{EngineEntry, LatencyProbe};
    use crate::gateway::pick::prefix::measured::MeasuredTtft;
    use crate::gateway::pick::prefix::ttft::QueueTtft;
    use crate::gateway::pick::replica::ReportedLoad;
    use crate::gateway::pick::test_fleet::{context, context_at, replicas, teach};

    fn hundred_us_a_token(_: &Replica) -> f64 {
        100.0
    }

    /// `prefix_latency`'s choice with every candidate prefilling at 100 us a token.
    fn flat_prefill_choice<'a>(
        key: &'a PromptKey,
        estimate: &'a dyn TtftEstimate,
        tie: Tie,
        ties: &'a Draws,
    ) -> Choice<'a> {
        Choice {
            key,
            estimate,
            prefill_us_per_token: &hundred_us_a_token,
            recompute_weight: 1.0,
            charges_copies: true,
            tie,
            ties,
            conversation: false,
        }
    }

    /// A prompt of `tokens` tokens whose first `blocks` blocks of 128 can hit.
    fn prompt(blocks: u64, tokens: u64) -> PromptKey {
        PromptKey {
            hashes: (1..=blocks).collect(),
            engine_hashes: Vec::new(),
            max_hit_blocks: blocks as usize,
            prompt_tokens: tokens,
            block_size: 128,
            session: None,
            conversation: None,
            opens_conversation: false,
            messages: None,
        }
    }

    #[test]
    fn a_copy_is_charged_for_the_streams_it_would_stall_on_its_replica() {
        let set = replicas(2);
        teach(&set[0], 100.0, 5.0);
        teach(&set[1], 100.0, 5.0);
        // r0 holds the whole 3,000-token prompt, computed, behind 20,000 tokens of prefill.
        let now = Instant::now();
        let _queued: Vec<LatencyProbe> = (0..4)
            .map(|_| {
                let mut probe = LatencyProbe::begin(
                    set[0].clone(),
                    5000,
                    &context_at(now),
                    EngineEntry::AtAnswer,
                );
                probe.answered();
                probe
            })
            .collect();
        let key = PromptKey { hashes: vec![1, 2, 3, 4], ..prompt(23, 3000) };
        let held = [Held { blocks: 23, computing: false }, Held::default()];
        let slo = EntrySlo { ttft: Duration::from_secs(5), ..EntrySlo::default() };
        let request = RequestShape { prompt_tokens: 3000, slo };
        let configured = QueueTtft { prefill_us_per_token: 75.0, request_us: 1000.0 };
        let estimate = MeasuredTtft::for_candidates(&set, &[0, 1], &request, configured);
        assert!(matches!(estimate, MeasuredTtft::Learned { .. }));
        let ties = Draws::new(1);
        let choice = flat_prefill_choice(&key, &estimate, MEASURED_TIE, &ties);
        // An idle r1: a copy there (0.3 s) beats the hit behind 20,000 tokens (2 s).
        assert_eq!(fastest(&set, &[0, 1], &held, &choice, &context()), Some(1));
        // Eight streams decoding on r1: the copy's 2,944 extra tokens would stall each.
        set[1].load.in_flight.store(8, Ordering::Relaxed);
        assert_eq!(fastest(&set, &[0, 1], &held, &choice, &context()), Some(0));
        // The same eight streams sent by another gateway: the engine reports them.
        set[1].load.in_flight.store(0, Ordering::Relaxed);
        let at = context();
        let running = ReportedLoad { waiting: 0, running: 8, kv_cache_usage: 0.1 };
        set[1].load.record_scrape(running, at.epoch, at.now);
        assert_eq!(fastest(&set, &[0, 1], &held, &choice, &at), Some(0));
        // A move that does not pay (a session's conversation) pays the flat recompute
        // charge whatever r1 runs: 0.3 + 0.29 s, still under the 2 s hit.
        let choice = Choice { conversation: true, ..choice };
        assert_eq!(fastest(&set, &[0, 1], &held, &choice, &context()), Some(1));
    }

    /// First tokens predicted per replica, in microseconds, whatever the prompt.
    struct Predicted(Vec<f64>);

    impl TtftEstimate for Predicted {
        fn ttft_us(&self, replica: &Replica, _: u64, _: &PickContext) -> f64 {
            self.0[replica.name[1..].parse::<usize>().unwrap()]
        }
    }

    #[test]
    fn where_the_cache_tells_no_holder_apart_load_decides_within_a_quarter_of_the_fastest() {
        let set = replicas(2);
        let key = prompt(8, 1100);
        let both_hold_it = [Held { blocks: 8, computing: false }; 2];
        // r0 runs two requests, r1 none.
        set[0].load.in_flight.store(2, Ordering::Relaxed);
        let ties = Draws::new(1);
        let pick = |predicted: Vec<f64>, tie: Tie| {
            let estimate = Predicted(predicted);
            let choice = flat_prefill_choice(&key, &estimate, tie, &ties);
            fastest(&set, &[0, 1], &both_hold_it, &choice, &context()).unwrap()
        };
        // r0 predicted 20% sooner: a measured tie goes by the prediction, the indifferent
        // one by load.
        assert_eq!(pick(vec![40_000.0, 48_000.0], MEASURED_TIE), 0);
        assert_eq!(pick(vec![40_000.0, 48_000.0], INDIFFERENT_TIE), 1);
        // Three times slower, r1 stays out either way.
        assert_eq!(pick(vec![40_000.0, 120_000.0], INDIFFERENT_TIE), 0);
    }

    #[test]
    fn a_move_is_charged_its_recompute_at_the_speed_of_the_replica_that_would_do_it() {
        let set = replicas(2);
        // r0 eight times slower a token than r1, as the real `slow` model beside `tiny`.
        teach(&set[0], 2800.0, 5.0);
        teach(&set[1], 350.0, 5.0);
        let key = prompt(7, 1000);
        let slo = EntrySlo { ttft: Duration::from_secs(5), ..EntrySlo::default() };
        let request = RequestShape { prompt_tokens: 1000, slo };
        let configured = QueueTtft { prefill_us_per_token: 75.0, request_us: 1000.0 };
        let estimate = MeasuredTtft::for_candidates(&set, &[0, 1], &request, configured);
        let speed = |replica: &Replica| estimate.prefill_us_per_token(replica);
        let ties = Draws::new(1);
        let choice = Choice {
            key: &key,
            estimate: &estimate,
            prefill_us_per_token: &speed,
            recompute_weight: 1.0,
            charges_copies: true,
            tie: MEASURED_TIE,
            ties: &ties,
            conversation: true,
        };
        // A conversation's history (640 tokens) on the slow r0: its turn there prefills 360
        // tokens (about 1.0 s); on r1, 1,000 (0.36 s) and is charged the 640 recomputed at
        // r1's speed (0.22 s). Charged at the two replicas' mean speed (1,575 us), the 640
        // would have cost 1.0 s, and the turn stayed on the slow replica.
        let history_on_slow = [Held { blocks: 5, computing: false }, Held::default()];
        assert_eq!(fastest(&set, &[0, 1], &history_on_slow, &choice, &context()), Some(1));
    }
}
