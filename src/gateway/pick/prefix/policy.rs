//! The `prefix_aware` pick and the default, `prefix_latency`, which differ in how a
//! candidate's TTFT is estimated (configured speeds, or measured ones and the SLO: see
//! [`super::measured`]), and in three rules of `prefix_latency`'s: a replica no pick has
//! chosen for a while is measured again ([`stale_equal`]), a prompt whose cache tells no
//! candidate apart is judged one spread above each prediction ([`OneSpreadAbove`]) and,
//! where each holds it, by load within a quarter of the fastest ([`INDIFFERENT_TIE`]), and a
//! copy of a computed
//! prefix is charged for the streams it stalls
//! ([`Choice::charges_copies`]).
//!
//! Every candidate's TTFT is estimated with its own expected cache hit (the uncached tail
//! is what it must prefill) and the fastest wins; among equals, the longest hit, then
//! chance. A conversation's turn ([`conversation`]: a named session's, or a sessionless
//! chat's next turn) goes home (where its previous turn went and its history is cached, or
//! for a session this gateway has not placed, its rendezvous replica) while home is not
//! overloaded; otherwise the same estimate decides between home and the replica bounded
//! load would send it to. So a conversation moves only when a miss elsewhere is faster
//! than its overloaded home (moving on load alone threw the cache away, and the next turn,
//! back home, missed the moved turn).
//!
//! That is the rule "take the longest cached prefix unless its predicted TTFT is worse than
//! the least-loaded replica's by more than the prefill the cache saves", written as one
//! comparison: a hit never costs more than a miss elsewhere. It is also the hot-spot
//! guard: once a popular prefix's replica is busier than the prefill it saves, the next
//! request goes elsewhere and that replica caches the prefix too, so a hot prefix spreads
//! over as many replicas as its load needs.

use std::sync::Arc;

use super::PromptPick;
use super::conversation::{self, Contenders};
use super::cost::{Choice, INDIFFERENT_TIE, MEASURED_TIE, Tie, fastest};
use super::engine_held::with_engine_caches;
use super::index::Held;
use super::measured::{MeasuredTtft, OneSpreadAbove};
use super::placement_trace;
use super::ttft::{QueueTtft, TtftEstimate};
use crate::gateway::clock;
use crate::gateway::pick::draw::Draws;
use crate::gateway::pick::least_queue::{self, LeastQueue};
use crate::gateway::pick::policy::{PickContext, Policy, RequestShape};
use crate::gateway::pick::replica::Replica;

#[derive(Debug)]
pub struct PrefixAware {
    /// For requests whose prompt the gateway does not read.
    by_load: LeastQueue,
    /// Breaks ties between equally fast candidates.
    ties: Draws,
    /// Whether candidates are judged by their measured latency (`prefix_latency`, see
    /// [`super::measured`]) or by the configured prefill speed (`prefix_aware`).
    measured: bool,
}

impl PrefixAware {
    /// `prefix_aware`: draws (ties, and `least_queue` without a prompt) from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { by_load: LeastQueue::new(seed), ties: Draws::new(!seed), measured: false }
    }

    /// `prefix_latency`: the same affinity, judged by measured latency and the SLO.
    pub fn measured(seed: u64) -> Self {
        Self { measured: true, ..Self::new(seed) }
    }

    /// `chosen` was picked on its estimate, not to measure it again: under
    /// `prefix_latency`, its measure-again interval starts over.
    fn chosen(&self, replicas: &[Arc<Replica>], chosen: usize) -> usize {
        if self.measured {
            replicas[chosen].latency.remeasure().chosen();
        }
        chosen
    }
}

impl Policy for PrefixAware {
    fn name(&self) -> &'static str {
        if self.measured { "prefix_latency" } else { "prefix_aware" }
    }

    /// Without a prompt (a path the gateway does not interpret): `least_queue`.
    fn pick(&self, replicas: &[Arc<Replica>], context: &PickContext) -> Option<usize> {
        self.by_load.pick(replicas, context)
    }

    fn reads_prompts(&self) -> bool {
        true
    }

    fn pick_prompt(
        &self,
        replicas: &[Arc<Replica>],
        context: &PickContext,
        prompt: &PromptPick<'_>,
        request: &RequestShape,
    ) -> Option<usize> {
        let all: Vec<usize> = (0..replicas.len()).filter(|&i| Some(i) != context.exclude).collect();
        if all.is_empty() {
            return None;
        }
        let names: Vec<&str> = all.iter().map(|&i| replicas[i].name.as_str()).collect();
        let guessed = prompt.router.index.lookup(&names, prompt.key.hittable());
        let held_by_all = with_engine_caches(replicas, &all, guessed, prompt.key);
        let configured = QueueTtft {
            prefill_us_per_token: prompt.config.prefill_us_per_token,
            request_us: prompt.config.request_us,
        };
        let estimate = if self.measured {
            MeasuredTtft::for_candidates(replicas, &all, request, configured)
        } else {
            MeasuredTtft::Configured(configured)
        };
        let followed = conversation::followed(replicas, &all, &held_by_all, prompt);
        let (candidates, held) = match followed {
            None => (all, held_by_all),
            Some(followed) => {
                let places = conversation::contenders(
                    replicas,
                    &all,
                    &held_by_all,
                    followed,
                    prompt,
                    &estimate,
                    context.now,
                )?;
                match places {
                    Contenders::Alone(home) => return Some(self.chosen(replicas, home)),
                    Contenders::Several { candidates, held } => (candidates, held),
                }
            }
        };
        if self.measured
            && let Some(stale) =
                stale_equal(replicas, &candidates, &held, prompt, &estimate, request, context)
        {
            if placement_trace::enabled() {
                placement_trace::emit_measured_again(
                    replicas,
                    prompt.key,
                    &candidates,
                    &held,
                    stale,
                );
            }
            replicas[stale].latency.remeasure().measured_again();
            return Some(stale);
        }
        let prefill_us_per_token = |replica: &Replica| estimate.prefill_us_per_token(replica);
        // A prompt whose cache tells no candidate apart (each holds as many of its blocks
        // as the others, mostly none), judged by the first token it risks rather than the
        // one it can expect.
        let risked = OneSpreadAbove(&estimate);
        let indifferent =
            self.measured && followed.is_none() && held.iter().all(|h| h.blocks == held[0].blocks);
        let chosen = Choice {
            key: prompt.key,
            estimate: if indifferent { &risked } else { &estimate },
            prefill_us_per_token: &prefill_us_per_token,
            recompute_weight: prompt.config.recompute_weight,
            // `prefix_latency` charges a copy for the streams it stalls; `prefix_aware`, as
            // configured, does not.
            charges_copies: self.measured,
            // Holders alike (a hot prefix copied to each): by load within a quarter. A prompt
            // new to every candidate keeps the narrow tie, so that a replica measured slower
            // takes fewer of a burst of new prompts.
            tie: if indifferent && held[0].blocks > 0 {
                INDIFFERENT_TIE
            } else if self.measured {
                MEASURED_TIE
            } else {
                Tie::Exact
            },
            ties: &self.ties,
            conversation: followed.is_some(),
        };
        fastest(replicas, &candidates, &held, &chosen, context).map(|i| self.chosen(replicas, i))
    }
}

/// The candidate to measure again, if any: one that holds as much of the prompt as the
/// best-cached candidate and is as lightly loaded as any candidate, refuses nothing, is
/// predicted to meet the request's TTFT objective (so the request loses nothing that
/// matters there, even if the prediction is right), and has had no request of this size
/// placed on it for its measure-again interval (a second at first, doubling with each such
/// request in a row: [`Remeasure`](crate::gateway::pick::predict::remeasure::Remeasure));
/// the stalest of them. None for a prompt mostly new to every candidate while recent
/// prompts were mostly found cached ([`super::RecentReuse`]): where it goes, the prompts
/// that share its prefix follow, and a replica measured again because it is slower would
/// keep them.
///
/// A replica that no pick chooses is never measured again, and its estimate stays what it
/// was: two replicas that learned high first-token intercepts while a third was out of
/// rotation lost every request to it when it came back slowed twenty-fold, until chance
/// measured them again. Where every replica takes traffic none is ever stale, so this costs
/// a busy fleet nothing; on an idle one it spreads requests. The objective keeps a slower
/// replica of a mixed fleet from being measured with prompts it is too slow for: a
/// 4,000-token prompt took 3.5-6 s on a real replica eight times slower than the other,
/// which would have answered it in 0.4 s; short prompts measure it as well, and less and
/// less often while they confirm that it is slower.
fn stale_equal(
    replicas: &[Arc<Replica>],
    candidates: &[usize],
    held: &[Held],
    prompt: &PromptPick<'_>,
    estimate: &dyn TtftEstimate,
    request: &RequestShape,
    context: &PickContext,
) -> Option<usize> {
    let key = prompt.key;
    let most = held.iter().map(|h| h.blocks).max()?;
    let uncached = key.prompt_tokens.saturating_sub(most as u64 * key.block_size);
    let starts_a_prefix = key.hittable().len() > most && 2 * uncached >= key.prompt_tokens;
    if starts_a_prefix && prompt.router.reuse.new_prompts_are_followed() {
        return None;
    }
    let now = clock::micros_at(context.now);
    let load = |i: usize| least_queue::score(&replicas[i], context);
    let least = candidates.iter().map(|&i| load(i)).fold(f64::INFINITY, f64::min);
    let objective_us = request.slo.ttft.as_secs_f64() * 1e6;
    let meets_objective =
        |i: usize| estimate.ttft_us(&replicas[i], uncached, context) <= objective_us;
    candidates
        .iter()
        .zip(held)
        .filter(|&(&i, h)| h.blocks == most && replicas[i].load.failures() == 0 && load(i) <= least)
        .filter(|&(&i, _)| meets_objective(i))
        .map(|(&i, _)| (replicas[i].latency.last_placed_for(uncached), i))
        .filter(|&(last, i)| {
            now.saturating_sub(last) > replicas[i].latency.remeasure().interval_us()
        })
        .min()
        .map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use super::*;
    use prometheus::Registry;

    use crate::gateway::config::{EntrySlo, PrefixConfig};
    use crate::gateway::pick::predict::{EngineEntry, LatencyProbe};
    use crate::gateway::pick::prefix::PrefixRouter;
    use crate::gateway::pick::prefix::PromptKey;
    use crate::gateway::pick::test_fleet::{context, context_at, replicas, teach};

    fn key() -> PromptKey {
        PromptKey {
            hashes: vec![1, 2, 3, 4],
            engine_hashes: Vec::new(),
            max_hit_blocks: 4,
            prompt_tokens: 600,
            block_size: 128,
            session: None,
            conversation: None,
            opens_conversation: false,
            messages: None,
        }
    }

    const BOTH_HOLD_IT: [Held; 2] = [Held { blocks: 4, computing: false }; 2];

    #[test]
    fn a_replica_holding_as_much_as_loaded_as_little_and_unpicked_for_a_second_is_measured_again() {
        let set = replicas(2);
        let base = context();
        // The uncached tail is 88 tokens: what both were last placed for.
        let placed = |replica: usize, tokens: u64, at: Instant| {
            drop(LatencyProbe::begin(
                set[replica].clone(),
                tokens,
                &context_at(at),
                EngineEntry::AtPlacement,
            ));
        };
        placed(0, 88, base.now);
        placed(1, 88, base.now);
        let at = |seconds: f64| PickContext {
            now: base.now + Duration::from_secs_f64(seconds),
            ..context()
        };
        // Neither measured yet: the configured estimate, 88 tokens well within the objective.
        let request = RequestShape { prompt_tokens: 600, slo: EntrySlo::default() };
        let configured =
            MeasuredTtft::Configured(QueueTtft { prefill_us_per_token: 75.0, request_us: 1000.0 });
        // A fresh router: no reuse known, so new prompts measure replicas again.
        let config = PrefixConfig::default();
        let router = PrefixRouter::new(&config, &Registry::new());
        let stale = |held: &[Held], key: &PromptKey, seconds: f64| {
            let prompt = PromptPick { key, router: &router, config: &config };
            stale_equal(&set, &[0, 1], held, &prompt, &configured, &request, &at(seconds))
        };
        assert_eq!(stale(&BOTH_HOLD_IT, &key(), 0.5), None);
        placed(0, 88, at(1.0).now);
        // At 1.8 s, r1 has had nothing for 1.8 s and r0 for 0.8 s: r1 is measured again.
        assert_eq!(stale(&BOTH_HOLD_IT, &key(), 1.8), Some(1));
        // Not if it holds less of the prompt: the request would lose its hit.
        let r1_holds_less = [BOTH_HOLD_IT[0], Held { blocks: 2, computing: false }];
        assert_eq!(stale(&r1_holds_less, &key(), 1.8), None);
        // Nor if it is busier than another candidate: the request would wait there.
        set[1].load.in_flight.store(2, Ordering::Relaxed);
        assert_eq!(stale(&BOTH_HOLD_IT, &key(), 1.8), None);
        set[1].load.in_flight.store(0, Ordering::Relaxed);
        // Nor if it refuses connections.
        set[1].load.record_failure();
        assert_eq!(stale(&BOTH_HOLD_IT, &key(), 1.8), None);
        set[1].load.clear_failures();
        assert_eq!(stale(&BOTH_HOLD_IT, &key(), 1.8), Some(1));

        // Measured: r1 prefills ten times slower than r0. Nothing cached, a 4,000-token
        // prompt would take it about 4 s, past the 1 s objective: not measured again with
        // this one, though r1 has had no prompt of its size for 1.8 s and r0 for 0.8 s.
        teach(&set[0], 100.0, 5.0);
        teach(&set[1], 1000.0, 5.0);
        let learned = MeasuredTtft::for_candidates(
            &set,
            &[0, 1],
            &request,
            QueueTtft { prefill_us_per_token: 75.0, request_us: 1000.0 },
        );
        let nothing_held = [Held { blocks: 0, computing: false }; 2];
        let long = PromptKey { prompt_tokens: 4000, ..key() };
        placed(0, 4000, at(1.0).now);
        let stale_in = |router: &PrefixRouter, key: &PromptKey| {
            let prompt = PromptPick { key, router, config: &config };
            stale_equal(&set, &[0, 1], &nothing_held, &prompt, &learned, &request, &at(1.8))
        };
        assert_eq!(stale_in(&router, &long), None);
        // A 300-token one it answers in about 0.3 s: measured again with that.
        let short = PromptKey { prompt_tokens: 300, ..key() };
        placed(0, 300, at(1.0).now);
        assert_eq!(stale_in(&router, &short), Some(1));

        // Where the prompts placed so far were mostly found cached, a new one likely starts
        // a group that will follow it: it measures nothing again, and goes where it is
        // fastest. A prompt both hold still measures r1 again.
        let reused = PrefixRouter::new(&config, &Registry::new());
        for _ in 0..64 {
            reused.reuse.observe(900, 1000);
        }
        assert_eq!(stale_in(&reused, &short), None);
        let prompt = PromptPick { key: &key(), router: &reused, config: &config };
        assert_eq!(
            stale_equal(&set, &[0, 1], &BOTH_HOLD_IT, &prompt, &learned, &request, &at(1.8)),
            Some(1)
        );
    }

    #[test]
    fn a_slower_replica_is_measured_again_less_and_less_often_until_it_answers_far_sooner() {
        let set = replicas(2);
        teach(&set[0], 100.0, 5.0);
        teach(&set[1], 1000.0, 5.0);
        let router = PrefixRouter::new(&PrefixConfig::default(), &Registry::new());
        let config = PrefixConfig::default();
        let policy = PrefixAware::measured(5);
        // 300 tokens, nothing cached: about 40 ms on r0, 310 ms on r1 (within the 1 s
        // objective). One request every 100 ms for 40 s, each placed where the pick says.
        let short = PromptKey { prompt_tokens: 300, ..key() };
        let request = RequestShape { prompt_tokens: 300, slo: EntrySlo::default() };
        let base = context().now;
        let at = |tenths: u64| context_at(base + Duration::from_millis(100 * tenths));
        // The times (in tenths of a second) at which the pick chose r1.
        let to_r1 = |times: std::ops::Range<u64>| -> Vec<u64> {
            times
                .filter(|&tenths| {
                    let context = at(tenths);
                    let prompt = PromptPick { key: &short, router: &router, config: &config };
                    let chosen = policy.pick_prompt(&set, &context, &prompt, &request).unwrap();
                    let placed = set[chosen].clone();
                    drop(LatencyProbe::begin(placed, 300, &context, EngineEntry::AtPlacement));
                    chosen == 1
                })
                .collect()
        };
        let measured_at = to_r1(0..400);
        // Once a second had gone by, then after 2, 4, 8 and 16 s: each measurement confirmed
        // the model (no first token came sooner), so each waits twice as long as the last.
        let gaps: Vec<u64> = measured_at.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps, [21, 41, 81, 161], "measured again at {measured_at:?}");
        assert_eq!(set[1].latency.remeasure().interval_us(), 32_000_000);

        // r1 answers in 20 ms: far sooner than predicted, so it is measured a second later.
        let mut probe = LatencyProbe::begin(set[1].clone(), 300, &at(400), EngineEntry::AtAnswer);
        probe.first_token(at(400).now + Duration::from_millis(20));
        drop(probe);
        assert_eq!(to_r1(401..430), [411], "one second after its fast first token");
        assert_eq!(set[1].latency.remeasure().interval_us(), 2_000_000);

        // r0 owes a 20,000-token prefill (about 2 s): r1 wins the pick on its estimate, and
        // its interval starts over.
        let queued =
            LatencyProbe::begin(set[0].clone(), 20_000, &at(430), EngineEntry::AtPlacement);
        assert_eq!(to_r1(430..431), [430]);
        assert_eq!(set[1].latency.remeasure().interval_us(), 1_000_000);
        drop(queued);
    }

    #[test]
    fn a_prompt_new_to_every_replica_is_judged_by_the_first_token_it_risks() {
        let set = replicas(2);
        teach(&set[0], 100.0, 5.0);
        teach(&set[1], 300.0, 5.0);
        // With two other requests on it, r0's first tokens for 1,000-token prompts came
        // after 50 or 450 ms, by turns: 250 ms on average, give or take 200.
        for turn in 0..16 {
            let ttft = if turn % 2 == 0 { 0.05 } else { 0.45 };
            set[0].latency.observe_prefill((0, 1000), 2, false, Duration::from_secs_f64(ttft));
        }
        set[0].load.in_flight.store(2, Ordering::Relaxed);
        let router = PrefixRouter::new(&PrefixConfig::default(), &Registry::new());
        let config = PrefixConfig::default();
        let policy = PrefixAware::measured(5);
        let new_prompt = PromptKey { prompt_tokens: 1000, ..key() };
        let request = RequestShape { prompt_tokens: 1000, slo: EntrySlo::default() };
        let pick = |key: &PromptKey| {
            let prompt = PromptPick { key, router: &router, config: &config };
            policy.pick_prompt(&set, &context(), &prompt, &request).unwrap()
        };
        // Idle r1, three times slower, answers in about 310 ms, steadily: sooner than
        // r0's 450 at one spread above its mean, though later than its 250 on average.
        assert_eq!(pick(&new_prompt), 1);
        // Once r0 holds the first 512 tokens the cache tells them apart, and the expected
        // first token decides: r0, with its hit.
        router.index.insert("r0", new_prompt.hittable());
        assert_eq!(pick(&new_prompt), 0);
    }

    #[test]
    fn prompts_placed_at_once_see_each_others_prefill_before_any_is_answered() {
        // r1 measured 30% slower than r0.
        let set = replicas(2);
        teach(&set[0], 100.0, 5.0);
        teach(&set[1], 130.0, 5.0);
        let router = PrefixRouter::new(&PrefixConfig::default(), &Registry::new());
        let config = PrefixConfig::default();
        let policy = PrefixAware::measured(5);
        let request = RequestShape { prompt_tokens: 1000, slo: EntrySlo::default() };
        let now = context().now;
        // Sixteen new 1,000-token prompts at once, each streamed and none answered yet.
        let mut placed = Vec::new();
        let mut per_replica = [0; 2];
        for prompt in 0..16 {
            let key = PromptKey {
                hashes: (0..7)
                    .map(|block| crate::prompt_tokens::mix(prompt * 10 + block))
                    .collect(),
                max_hit_blocks: 7,
                prompt_tokens: 1000,
                ..key()
            };
            let pick = PromptPick { key: &key, router: &router, config: &config };
            let chosen = policy.pick_prompt(&set, &context_at(now), &pick, &request).unwrap();
            per_replica[chosen] += 1;
            set[chosen].load.in_flight.fetch_add(1, Ordering::Relaxed);
            let replica = set[chosen].clone();
            placed.push(LatencyProbe::begin(
                replica,
                1000,
                &context_at(now),
                EngineEntry::AtAnswer,
            ));
        }
        // Each placed prompt is ahead of the next on its replica: r0 takes more, for its
        // speed, not all.
        assert!(per_replica[0] > per_replica[1] && per_replica[1] >= 5, "{per_replica:?}");
        assert_eq!(set[0].latency.ahead_of_next(), 1000 * per_replica[0]);
        assert_eq!(set[0].latency.engine_prefill_tokens(), 0);
    }
}
