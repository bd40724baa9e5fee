//! The TTFT estimate of `prefix_latency`, the default policy: prefix and session affinity
//! judged with what the gateway measured on each replica rather than with configured
//! speeds. A candidate's first token is predicted by its learned latency model (see
//! `pick::predict`): the TTFT intercept for the requests it has in flight, plus its
//! measured prefill slope over the prefill placed ahead of this prompt (`ahead_of_next`,
//! whether its engine or an API process holds it) and the part of this prompt it does not
//! hold, scaled up while its waiting streams are late (`predict::overdue`). A candidate
//! predicted to miss the request's TPOT objective pays a whole TTFT objective on top: a hit
//! is worth nothing on a replica whose decode is too slow.
//!
//! Until every candidate has been measured ([`MIN_PREFILL_SAMPLES`] first tokens each),
//! the queue estimate ([`QueueTtft`]) judges them all: a comparison of one replica's
//! measurement with another's guess would favour whichever guess is kinder. It counts each
//! candidate's queued and new prefill at the speed its engine measured where every
//! candidate's engine has measured one (vLLM's counters: see `predict::engine_speed`), else
//! at the configured speed for all. At the configured speed, a fresh gateway in front of a
//! real replica eight times slower than the other two sent it a third of the first turns
//! of a conversation workload (0.8-2.0 s each), and their next turns stayed there.
//!
//! Where engines count their speed, one pick reads every candidate's alike
//! ([`EngineReading`]): by each engine's fit where every candidate's stands, else by each
//! one's line through the origin. Two real replicas of one speed, one read by its fit (46
//! us a token) and the other by its line (308), split a burst of first turns 26 to 6.
//! Engine speeds within [`ONE_SPEED`] of each other are read as one, their mean: a fresh
//! gateway reads them from the engines' history alone (a warm-up, another client), two
//! simulated replicas of one profile read 70 and 88 us a token there, and a burst of sixteen
//! first turns went 9 to 7 in three fresh starts of six; read as one, 8 to 8 in all six. (Two
//! real replicas split some fresh bursts 10 to 6 for another reason: one replica's last
//! scrape still reported a warm-up's streams running; `benches/results/2026-12-07-one-speed`.)

use std::sync::Arc;
use std::time::Instant;

use super::ttft::{FAILURE_PENALTY_US, QueueTtft, TtftEstimate};
use crate::gateway::pick::policy::{PickContext, RequestShape};
use crate::gateway::pick::predict::EngineReading;
use crate::gateway::pick::predict::headroom::FIT_SHARE;
use crate::gateway::pick::replica::Replica;

/// First tokens a replica must have been measured on before its model is trusted.
pub const MIN_PREFILL_SAMPLES: u64 = 8;

/// Speeds within this ratio of each other are one speed read with noise: well past the
/// spread of readings among replicas of one speed (70 against 88 us a token from engines'
/// histories), well under a slower model's (eight times). `conversation` reads a replica as
/// faster than a conversation's home only past it.
pub(super) const ONE_SPEED: f64 = 1.5;

/// The estimate one pick judges its candidates with.
pub enum MeasuredTtft<'a> {
    /// Every candidate measured: learned models, with the request's objectives, their
    /// engines' speeds read alike.
    Learned { request: &'a RequestShape, reading: EngineReading },
    /// Some candidate not yet measured, every candidate's engine measured: the queue
    /// estimate for all, each at its engine's prefill speed, read alike; `one_speed_us`,
    /// the speeds' mean where they are within [`ONE_SPEED`] of each other, for every one.
    EngineSpeeds { queue: QueueTtft, reading: EngineReading, one_speed_us: Option<f64> },
    /// Some candidate not yet measured: the configured queue estimate for all.
    Configured(QueueTtft),
}

impl<'a> MeasuredTtft<'a> {
    /// Learned if every candidate has been measured enough, else `configured` at the
    /// engines' speeds if every candidate's engine has measured one, else as configured.
    pub fn for_candidates(
        replicas: &[Arc<Replica>],
        candidates: &[usize],
        request: &'a RequestShape,
        configured: QueueTtft,
    ) -> Self {
        let measured = |&index: &usize| {
            let (prefills, _) = replicas[index].latency.samples();
            prefills >= MIN_PREFILL_SAMPLES
        };
        let engine_measured =
            |&index: &usize| replicas[index].latency.engine_slope(EngineReading::Fitted).is_some();
        if candidates.iter().all(measured) {
            Self::Learned { request, reading: Self::reading(replicas, candidates) }
        } else if candidates.iter().all(engine_measured) {
            let reading = Self::reading(replicas, candidates);
            let slopes: Option<Vec<f64>> = candidates
                .iter()
                .map(|&index| replicas[index].latency.engine_slope(reading))
                .collect();
            let one_speed_us = slopes.as_deref().and_then(one_speed_us);
            Self::EngineSpeeds { queue: configured, reading, one_speed_us }
        } else {
            Self::Configured(configured)
        }
    }

    /// How the candidates' engine speeds are read: by their fits if no candidate's engine
    /// reads only its line through the origin (a candidate whose engine counts none is read
    /// at this gateway's own slope either way), else by their lines.
    fn reading(replicas: &[Arc<Replica>], candidates: &[usize]) -> EngineReading {
        let line_only = |&index: &usize| {
            let estimate = &replicas[index].latency;
            estimate.engine_slope(EngineReading::ThroughOrigin).is_some()
                && !estimate.engine_reads_fit()
        };
        if candidates.iter().any(line_only) {
            EngineReading::ThroughOrigin
        } else {
            EngineReading::Fitted
        }
    }

    /// Microseconds `replica` takes to prefill `uncached_tokens` at its learned speed (its
    /// prefill slope, or its engine's), scaled while its streams are late: how fast it is
    /// alone. `None` on the configured estimate, which knows no speed of its own per
    /// replica. The fixed part of a first token is left out: it is learned per count of
    /// requests in flight, and at none in flight (rare on a busy replica) it rests on a few
    /// old samples. With it, two real replicas of one speed read 12-39 ms and 117-124 ms
    /// alone for the same turns, and conversations at home on the second contended with the
    /// first 28 times in one round.
    pub fn alone_us(&self, replica: &Replica, uncached_tokens: u64, now: Instant) -> Option<f64> {
        match self {
            Self::Configured(_) => None,
            Self::Learned { .. } | Self::EngineSpeeds { .. } => {
                let prefill = self.prefill_us_per_token(replica) * uncached_tokens as f64;
                Some(prefill * replica.latency.late_factor(now))
            }
        }
    }

    /// Microseconds a token of prefill costs on `replica`, for the recompute and copy
    /// charges: its measured slope, its engine's, or the configured one. The prefill those
    /// charges count runs on that replica, at its speed: charged at the candidates' mean
    /// instead, a conversation whose history sat on a real replica eight times slower than
    /// the other was charged 1.2 s for the 608 history tokens the fast one prefills in
    /// 0.2 s, stayed, and took 1.4 s for its first token.
    pub fn prefill_us_per_token(&self, replica: &Replica) -> f64 {
        match self {
            Self::Configured(queue) => queue.prefill_us_per_token,
            Self::EngineSpeeds { queue, reading, one_speed_us } => {
                one_speed_us.unwrap_or_else(|| {
                    replica
                        .latency
                        .engine_slope(*reading)
                        .map_or(queue.prefill_us_per_token, |s| s * 1e6)
                })
            }
            Self::Learned { reading, .. } => replica.latency.ttft_slope(*reading) * 1e6,
        }
    }
}

/// The mean of engine slopes (seconds a token), in microseconds, if they are within
/// [`ONE_SPEED`] of each other.
fn one_speed_us(slopes: &[f64]) -> Option<f64> {
    let fastest = slopes.iter().copied().fold(f64::INFINITY, f64::min);
    let slowest = slopes.iter().copied().fold(0.0, f64::max);
    let alike = !slopes.is_empty() && fastest > 0.0 && slowest <= fastest * ONE_SPEED;
    alike.then(|| slopes.iter().sum::<f64>() / slopes.len() as f64 * 1e6)
}

impl MeasuredTtft<'_> {
    /// [`TtftEstimate::ttft_us`], read `spreads` spreads above the predicted mean (the
    /// configured estimate has no spread and is read as it is).
    fn ttft_us_above(
        &self,
        replica: &Replica,
        uncached_tokens: u64,
        context: &PickContext,
        spreads: f64,
    ) -> f64 {
        let (request, reading) = match self {
            // Late waiting streams are evidence whatever judges the rest.
            Self::Configured(queue) | Self::EngineSpeeds { queue, .. } => {
                let at_its_speed = QueueTtft {
                    prefill_us_per_token: self.prefill_us_per_token(replica),
                    ..*queue
                };
                let late = replica.latency.late_factor(context.now);
                return at_its_speed.ttft_us(replica, uncached_tokens, context) * late;
            }
            Self::Learned { request, reading } => (request, *reading),
        };
        let estimate = &replica.latency;
        // Every gateway's requests count (the engine's report), as they do where the model
        // learns (`LatencyProbe`).
        let in_flight = context.requests_on(replica) + 1;
        let ahead = estimate.ahead_of_next();
        let predicted =
            estimate.predict_at(context.now, reading, ahead, uncached_tokens, in_flight);
        let ttft = predicted.ttft + spreads * predicted.ttft_spread;
        let mut us = ttft * 1e6 + FAILURE_PENALTY_US * replica.load.failures() as f64;
        let tpot_objective = request.slo.tpot.as_secs_f64();
        if tpot_objective > 0.0 && predicted.tpot > tpot_objective * FIT_SHARE {
            us += request.slo.ttft.as_secs_f64() * 1e6;
        }
        us
    }
}

impl TtftEstimate for MeasuredTtft<'_> {
    fn ttft_us(&self, replica: &Replica, uncached_tokens: u64, context: &PickContext) -> f64 {
        self.ttft_us_above(replica, uncached_tokens, context, 0.0)
    }
}

/// A [`MeasuredTtft`] read one spread above the predicted mean: the first token a request
/// risks on a candidate rather than the one it can expect, as `predicted_latency` judges
/// it. `prefix_latency` judges a prompt whose cache tells no candidate apart with it (see
/// `policy`): on a busy replica first tokens spread widely (its API processes race for the
/// connection), and a mean that looked faster than a slower, idle replica's missed the
/// objective.
pub struct OneSpreadAbove<'a>(pub &'a MeasuredTtft<'a>);

impl TtftEstimate for OneSpreadAbove<'_> {
    fn ttft_us(&self, replica: &Replica, uncached_tokens: u64, context: &PickContext) -> f64 {
        self.0.ttft_us_above(replica, uncached_tokens, context, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::gateway::config::EntrySlo;
    use crate::gateway::pick::predict::{EngineEntry, LatencyProbe};
    use crate::gateway::pick::test_fleet::{context, context_at, replicas, teach, teach_engine};

    fn shape(tpot_ms: u64) -> RequestShape {
        let slo = EntrySlo {
            ttft: Duration::from_secs(1),
            tpot: Duration::from_millis(tpot_ms),
            ..EntrySlo::default()
        };
        RequestShape { prompt_tokens: 2000, slo }
    }

    const CONFIGURED: QueueTtft = QueueTtft { prefill_us_per_token: 75.0, request_us: 1000.0 };

    #[test]
    fn a_candidate_not_yet_measured_puts_every_candidate_on_the_configured_estimate() {
        let set = replicas(2);
        teach(&set[0], 100.0, 5.0);
        let request = shape(50);
        let estimate = MeasuredTtft::for_candidates(&set, &[0, 1], &request, CONFIGURED);
        assert!(matches!(estimate, MeasuredTtft::Configured(_)));
        teach(&set[1], 100.0, 5.0);
        let estimate = MeasuredTtft::for_candidates(&set, &[0, 1], &request, CONFIGURED);
        assert!(matches!(estimate, MeasuredTtft::Learned { .. }));
    }

    #[test]
    fn before_its_own_first_tokens_a_gateway_judges_every_candidate_at_its_engines_speed() {
        let set = replicas(2);
        let request = shape(50);
        teach_engine(&set[0], 80.0);
        // One engine measured and one not: the configured speed for both.
        let estimate = MeasuredTtft::for_candidates(&set, &[0, 1], &request, CONFIGURED);
        assert!(matches!(estimate, MeasuredTtft::Configured(_)));
        assert_eq!(estimate.alone_us(&set[0], 1000, context().now), None);
        // Both, the second eight times slower a token: each at its own.
        teach_engine(&set[1], 640.0);
        let estimate = MeasuredTtft::for_candidates(&set, &[0, 1], &request, CONFIGURED);
        assert!(matches!(estimate, MeasuredTtft::EngineSpeeds { .. }));
        let now = context().now;
        let alone = |i: usize| estimate.alone_us(&set[i], 1000, now).unwrap();
        // 400-token prompts: 5 ms a request spread over them, 12.5 us a token more.
        assert!((alone(0) - 92_500.0).abs() < 1.0, "{}", alone(0));
        assert!((alone(1) - 652_500.0).abs() < 1.0, "{}", alone(1));
        assert_eq!(estimate.prefill_us_per_token(&set[1]), alone(1) / 1000.0);
        // The queue estimate at those speeds: 1,000 new tokens, one request already on each.
        let context = context();
        for replica in &set {
            replica.load.in_flight.store(1, std::sync::atomic::Ordering::Relaxed);
        }
        let ttft = |i: usize| estimate.ttft_us(&set[i], 1000, &context);
        assert!((ttft(0) - 93_500.0).abs() < 1.0, "{}", ttft(0));
        assert!((ttft(1) - 653_500.0).abs() < 1.0, "{}", ttft(1));
        // Measured by its own first tokens on both, the gateway's model takes over.
        teach(&set[0], 100.0, 5.0);
        teach(&set[1], 100.0, 5.0);
        let estimate = MeasuredTtft::for_candidates(&set, &[0, 1], &request, CONFIGURED);
        assert!(matches!(estimate, MeasuredTtft::Learned { .. }));
    }

    #[test]
    fn engine_speeds_within_one_speed_of_each_other_are_read_as_their_mean() {
        let set = replicas(3);
        let request = shape(50);
        teach_engine(&set[0], 80.0);
        teach_engine(&set[1], 100.0);
        let now = context().now;
        let alone =
            |estimate: &MeasuredTtft<'_>, i: usize| estimate.alone_us(&set[i], 1000, now).unwrap();
        // 92.5 and 112.5 us a counted token (5 ms a request over its 400 tokens): one speed.
        let estimate = MeasuredTtft::for_candidates(&set, &[0, 1], &request, CONFIGURED);
        assert!((alone(&estimate, 0) - 102_500.0).abs() < 1.0, "{}", alone(&estimate, 0));
        assert_eq!(alone(&estimate, 0), alone(&estimate, 1));
        assert_eq!(estimate.prefill_us_per_token(&set[1]), 102.5);
        // With a candidate 1.9 times slower than the fastest, each is read at its own.
        teach_engine(&set[2], 160.0);
        let estimate = MeasuredTtft::for_candidates(&set, &[0, 1, 2], &request, CONFIGURED);
        assert!((alone(&estimate, 0) - 92_500.0).abs() < 1.0, "{}", alone(&estimate, 0));
        assert!((alone(&estimate, 1) - 112_500.0).abs() < 1.0, "{}", alone(&estimate, 1));
        assert!((alone(&estimate, 2) - 172_500.0).abs() < 1.0, "{}", alone(&estimate, 2));
    }

    #[test]
    fn measured_prefill_speeds_decide_and_a_tpot_miss_costs_a_whole_objective() {
        let set = replicas(2);
        teach(&set[0], 400.0, 5.0);
        teach(&set[1], 50.0, 5.0);
        let request = shape(50);
        let estimate = MeasuredTtft::for_candidates(&set, &[0, 1], &request, CONFIGURED);
        let slow = estimate.ttft_us(&set[0], 2000, &context());
        let fast = estimate.ttft_us(&set[1], 2000, &context());
        // 10 ms + 2,000 tokens at 400 us and at 50 us, within the fit's tolerance.
        assert!((slow - 810_000.0).abs() < 40_000.0, "{slow}");
        assert!((fast - 110_000.0).abs() < 20_000.0, "{fast}");
        // The slow one holding all but 100 tokens of the prompt beats a miss on the fast one.
        assert!(estimate.ttft_us(&set[0], 100, &context()) < fast);
        // Each at its own speed a token, for the charges.
        let slow_speed = estimate.prefill_us_per_token(&set[0]);
        let fast_speed = estimate.prefill_us_per_token(&set[1]);
        assert!((slow_speed - 400.0).abs() < 20.0, "{slow_speed}");
        assert!((fast_speed - 50.0).abs() < 5.0, "{fast_speed}");
        // Against a 4 ms TPOT objective both decode too slowly: each pays one objective more.
        let strict = shape(4);
        let estimate = MeasuredTtft::for_candidates(&set, &[0, 1], &strict, CONFIGURED);
        let penalised = estimate.ttft_us(&set[1], 2000, &context());
        assert!((penalised - fast - 1_000_000.0).abs() < 1.0, "{penalised} against {fast}");
    }

    #[test]
    fn alone_a_replica_is_as_fast_as_its_slope_whatever_its_first_tokens_fixed_part() {
        let set = replicas(3);
        teach(&set[0], 100.0, 5.0);
        teach(&set[2], 800.0, 5.0);
        // The same speed a token, and 100 ms more in every first token.
        for round in 0..4 {
            for prompt in [500u64, 1000, 2000, 4000] {
                let seconds = 0.110 + 100e-6 * prompt as f64 + round as f64 * 1e-5;
                let ttft = Duration::from_secs_f64(seconds);
                set[1].latency.observe_prefill((0, prompt), 0, true, ttft);
                set[1].latency.observe_decode(1.0, Duration::from_millis(5));
            }
        }
        let request = shape(50);
        let estimate = MeasuredTtft::for_candidates(&set, &[0, 1, 2], &request, CONFIGURED);
        let now = context().now;
        let alone = |i: usize| estimate.alone_us(&set[i], 500, now).unwrap();
        // 500 tokens at 100 us each on both; counted with the fixed parts, 60 and 160 ms.
        assert!((alone(0) - 50_000.0).abs() < 5_000.0, "{}", alone(0));
        assert!(
            alone(1) < alone(0) * 1.1 && alone(0) < alone(1) * 1.1,
            "{} {}",
            alone(0),
            alone(1)
        );
        // A replica eight times slower a token is.
        assert!(alone(2) > alone(0) * 6.0, "{} against {}", alone(2), alone(0));
    }

    #[test]
    fn streams_waiting_far_past_their_prediction_move_a_hit_to_a_miss_elsewhere() {
        let set = replicas(2);
        teach(&set[0], 100.0, 5.0);
        teach(&set[1], 100.0, 5.0);
        let request = shape(50);
        let estimate = MeasuredTtft::for_candidates(&set, &[0, 1], &request, CONFIGURED);
        let context = context();
        // Four seconds on: placements before the process's first clock read would not count.
        let later = PickContext { now: context.now + Duration::from_secs(4), ..context };
        let hit = |estimate: &MeasuredTtft<'_>| estimate.ttft_us(&set[0], 100, &later);
        let miss_elsewhere = estimate.ttft_us(&set[1], 2000, &later);
        let on_time = hit(&estimate);
        assert!(on_time * 5.0 < miss_elsewhere, "{on_time} against {miss_elsewhere}");
        // Two streams placed on it 4 s before, each predicted about 0.2 s, and no first token.
        let late: Vec<LatencyProbe> = (0..2)
            .map(|_| {
                LatencyProbe::begin(
                    set[0].clone(),
                    2000,
                    &context_at(context.now),
                    EngineEntry::AtAnswer,
                )
            })
            .collect();
        let factor = set[0].latency.late_factor(later.now);
        assert!(factor > 10.0, "{factor}");
        // The factor scales the whole prediction, their own prefill (still ahead) included.
        let owed_hit = estimate.ttft_us(&set[0], 100, &PickContext { now: context.now, ..later });
        let late_hit = hit(&estimate);
        assert!((late_hit / owed_hit - factor).abs() < 1e-6, "{late_hit} against {owed_hit}");
        assert!(late_hit > miss_elsewhere, "{late_hit} against {miss_elsewhere}");
        // Their first tokens (or their ends) take the evidence back.
        drop(late);
        assert_eq!(hit(&estimate), on_time);
        // An unstreamed request's wait is its whole completion: no evidence.
        let _unstreamed = LatencyProbe::begin(
            set[0].clone(),
            2000,
            &context_at(context.now),
            EngineEntry::AtPlacement,
        );
        assert_eq!(set[0].latency.late_factor(later.now), 1.0);
    }
}
