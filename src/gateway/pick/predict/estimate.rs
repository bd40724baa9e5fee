//! One replica's latency, learned online from the streams this gateway relays to it:
//! - prefill: TTFT against the prompt tokens it has to get through first (those queued in
//!   the replica's engine without a first token when the request reached it, plus its
//!   own), so that queueing behind other prompts is part of the model rather than noise in
//!   it, with one intercept per count of other requests in flight ([`TtftByConcurrency`]);
//! - decode: TPOT against the requests in flight on the replica while the stream decoded
//!   (the mean of the counts at its first token and at its end).
//!
//! Picks read the published coefficients (atomics); only the end of a stream's prefill or
//! decode takes the replica's short update lock, never a pick.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::concurrency::{TtftByConcurrency, slot};
use super::engine_speed::{EngineReading, EngineSpeed, EngineWork};
use super::envelope;
use super::fit::DecayedLine;
use super::overdue::Overdue;
use super::remeasure::Remeasure;
use super::token_scale::TokenScale;

mod probe;
mod published;
pub use probe::{EngineEntry, LatencyProbe};
use published::PublishedPrefill;

/// What a new replica is assumed to do before it has served anything: 50 ms plus 10 us a
/// prompt token to the first token, 15 ms plus 0.5 ms per stream in flight per token.
const PREFILL_PRIOR: (f64, f64) = (0.05, 1e-5);
const PREFILL_PRIOR_SPAN: (f64, f64) = (0.0, 16_384.0);
const DECODE_PRIOR: (f64, f64) = (0.015, 5e-4);
const DECODE_PRIOR_SPAN: (f64, f64) = (1.0, 32.0);
/// The prior weighs as much as this many samples at each end of its span: a few percent of
/// the data once there are any, enough to fix a slope the data cannot.
const PRIOR_WEIGHT: f64 = 0.05;

/// A prediction for one request on one replica, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Predicted {
    /// The mean TTFT.
    pub ttft: f64,
    /// How widely TTFTs at this count spread around that mean (a standard deviation).
    pub ttft_spread: f64,
    pub tpot: f64,
}

/// One replica's learned latency model and the prompt tokens it still owes a first token.
#[derive(Debug)]
pub struct LatencyEstimate {
    /// Prompt tokens of requests placed on the replica that have not had their first token.
    pending_prefill_tokens: AtomicU64,
    /// The part of those the replica's engine holds: prompts of streamed requests it has
    /// answered (an API process preprocessed them and handed them on), and of requests not
    /// streamed from their placement (their answer comes with the whole completion). A
    /// prompt still queued in a busy API process is not ahead of anybody's prefill: on a
    /// replica whose prefill is slow, counting it taught the TTFT line half its slope (fast
    /// first tokens "behind" 9,000 such tokens) and 9,000-token prompts were sent where
    /// they missed their objective.
    engine_prefill_tokens: AtomicU64,
    /// Streamed requests waiting for their first token, against their predictions: a
    /// slowdown shows there before any slow first token teaches the model.
    overdue: Overdue,
    /// Requests ever placed on the replica.
    placements: AtomicU64,
    /// When a request of each prompt size ([`envelope::bucket`]) was last placed
    /// ([`clock::now_micros`] scale, zero for never): exploration for a request goes to
    /// the replica whose estimate for its size is stalest. Explored by last placement
    /// alone, a replica whose first two long prompts met busy API processes read as slow
    /// for long prompts, was sent none again, and its estimate for them never recovered.
    last_placed_by_size: [AtomicU64; envelope::BUCKETS],
    /// How long the replica must go unpicked before a request measures it again.
    remeasure: Remeasure,
    /// The decode line's published `(intercept, slope)`, as `f64` bits.
    decode_published: [AtomicU64; 2],
    /// The prefill model published at the slope each [`EngineReading`] reads: the engine's
    /// fit where it stands (else its line), and its line through the origin. Both are this
    /// gateway's own slope where the engine counts none.
    prefill_fitted: PublishedPrefill,
    prefill_through_origin: PublishedPrefill,
    models: Mutex<Models>,
    /// The engine's own count of its prefill speed, where its `/metrics` has one.
    engine_speed: EngineSpeed,
    /// Engine tokens per token this gateway counts: the engine's slope is per engine token.
    token_scale: TokenScale,
}

#[derive(Debug)]
struct Models {
    prefill: TtftByConcurrency,
    decode: DecayedLine,
}

impl Default for LatencyEstimate {
    fn default() -> Self {
        let models = Models {
            prefill: TtftByConcurrency::new(
                PREFILL_PRIOR.0,
                PREFILL_PRIOR.1,
                PREFILL_PRIOR_SPAN,
                PRIOR_WEIGHT,
            ),
            decode: DecayedLine::new(
                DECODE_PRIOR.0,
                DECODE_PRIOR.1,
                DECODE_PRIOR_SPAN,
                PRIOR_WEIGHT,
            ),
        };
        let publish = |line: &DecayedLine| {
            let (a, b) = line.coefficients();
            [AtomicU64::new(a.to_bits()), AtomicU64::new(b.to_bits())]
        };
        Self {
            pending_prefill_tokens: AtomicU64::new(0),
            engine_prefill_tokens: AtomicU64::new(0),
            overdue: Overdue::default(),
            placements: AtomicU64::new(0),
            last_placed_by_size: std::array::from_fn(|_| AtomicU64::new(0)),
            remeasure: Remeasure::default(),
            decode_published: publish(&models.decode),
            prefill_fitted: PublishedPrefill::new(&models.prefill),
            prefill_through_origin: PublishedPrefill::new(&models.prefill),
            models: Mutex::new(models),
            engine_speed: EngineSpeed::default(),
            token_scale: TokenScale::default(),
        }
    }
}

fn read(pair: &[AtomicU64; 2]) -> (f64, f64) {
    (
        f64::from_bits(pair[0].load(Ordering::Relaxed)),
        f64::from_bits(pair[1].load(Ordering::Relaxed)),
    )
}

fn publish(pair: &[AtomicU64; 2], line: &DecayedLine) {
    let (a, b) = line.coefficients();
    pair[0].store(a.to_bits(), Ordering::Relaxed);
    pair[1].store(b.to_bits(), Ordering::Relaxed);
}

/// Where a published TTFT slope comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlopeSource {
    /// The engine's counters, read by their two-term fit (its line through the origin too).
    EngineFit,
    /// The engine's counters, read by their line through the origin alone.
    EngineLine,
    /// This gateway's own first tokens: the engine counts none (yet).
    FirstTokens,
}

impl SlopeSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EngineFit => "engine_fit",
            Self::EngineLine => "engine_line",
            Self::FirstTokens => "first_tokens",
        }
    }
}

/// What an estimate holds, for the admin API (seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct EstimateView {
    /// The TTFT slope as [`EngineReading::Fitted`] reads it.
    pub ttft_seconds_per_token: f64,
    /// The TTFT slope as [`EngineReading::ThroughOrigin`] reads it.
    pub ttft_seconds_per_token_through_origin: f64,
    /// Where those come from.
    pub ttft_slope_source: SlopeSource,
    /// How many prefills the engine ran at once, as its slopes are divided by; `None` unless
    /// they are its.
    pub engine_prefill_concurrency: Option<f64>,
    /// Engine tokens per token this gateway counts ([`TokenScale`]), 1 until learned.
    pub engine_tokens_per_counted: f64,
    /// TTFT at zero prompt tokens by other requests in flight (index).
    pub ttft_intercepts: Vec<f64>,
    /// How widely TTFTs spread around those, by the same index (standard deviations).
    pub ttft_spreads: Vec<f64>,
    pub decode: (f64, f64),
    pub pending_prefill_tokens: u64,
    pub engine_prefill_tokens: u64,
    pub placements: u64,
    /// Samples each model has had: `(prefill, decode)`.
    pub samples: (u64, u64),
    /// Streamed requests waiting for their first token, and how many times later than
    /// predicted they are as picks see it (1: on time; [`Overdue::factor`]).
    pub waiting_streams: u64,
    pub late_factor: f64,
    /// How long the replica must go unpicked before a request measures it again.
    pub remeasure_after: Duration,
}

impl LatencyEstimate {
    pub fn pending_prefill_tokens(&self) -> u64 {
        self.pending_prefill_tokens.load(Ordering::Relaxed)
    }

    pub fn engine_prefill_tokens(&self) -> u64 {
        self.engine_prefill_tokens.load(Ordering::Relaxed)
    }

    /// The prefill a request placed now would wait behind: every prompt placed before it
    /// that has not had its first token, in the engine or still in an API process (each
    /// stage serves in arrival order, so those reach the engine first). What a prediction
    /// reads; the model learns from [`Self::engine_prefill_tokens`] at each request's entry
    /// into the engine, which is what this becomes by then. Read as the engine's part only,
    /// a burst of prompts placed faster than the replica answered saw none of each other:
    /// on a simulated pair, 15 of 16 conversations opened at once went to the replica whose
    /// model looked 20% faster.
    pub fn ahead_of_next(&self) -> u64 {
        self.pending_prefill_tokens().max(self.engine_prefill_tokens())
    }

    pub fn placements(&self) -> u64 {
        self.placements.load(Ordering::Relaxed)
    }

    /// The published TTFT slope as `reading` reads it: seconds per prompt token of prefill.
    pub fn ttft_slope(&self, reading: EngineReading) -> f64 {
        self.published(reading).slope()
    }

    /// Seconds per prompt token (as this gateway counts tokens) of the replica's prefill as
    /// its engine counts it and `reading` reads it, if its counters have given one
    /// ([`EngineSpeed`]).
    pub fn engine_slope(&self, reading: EngineReading) -> Option<f64> {
        let per_engine_token = self.engine_speed.slope_read(reading)?;
        Some(per_engine_token * self.token_scale.engine_per_counted())
    }

    /// Whether the engine's slope is its two-term fit ([`EngineSpeed::reads_fit`]).
    pub fn engine_reads_fit(&self) -> bool {
        self.engine_speed.reads_fit()
    }

    fn published(&self, reading: EngineReading) -> &PublishedPrefill {
        match reading {
            EngineReading::Fitted => &self.prefill_fitted,
            EngineReading::ThroughOrigin => &self.prefill_through_origin,
        }
    }

    /// When a request of about `prompt_tokens` was last placed on the replica (zero: never).
    pub fn last_placed_for(&self, prompt_tokens: u64) -> u64 {
        self.last_placed_by_size[envelope::bucket(prompt_tokens as f64)].load(Ordering::Relaxed)
    }

    /// The replica's measure-again interval ([`Remeasure`]).
    pub fn remeasure(&self) -> &Remeasure {
        &self.remeasure
    }

    /// [`Self::predict_read`] for a pick at `now`: the TTFT scaled by how late the
    /// replica's waiting streams are ([`Overdue::factor`]).
    pub fn predict_at(
        &self,
        now: Instant,
        reading: EngineReading,
        queued_ahead: u64,
        prompt_tokens: u64,
        in_flight: u64,
    ) -> Predicted {
        let mut predicted = self.predict_read(reading, queued_ahead, prompt_tokens, in_flight);
        predicted.ttft *= self.overdue.factor(now);
        predicted
    }

    /// How many times later than predicted the replica's waiting streams are (1: on time).
    pub fn late_factor(&self, now: Instant) -> f64 {
        self.overdue.factor(now)
    }

    /// TTFT for `prompt_tokens` placed behind `queued_ahead` prompt tokens, and TPOT with
    /// `in_flight` streams (this one included) on the replica, from the model alone, its
    /// engine's speed read by its fit where it stands.
    pub fn predict(&self, queued_ahead: u64, prompt_tokens: u64, in_flight: u64) -> Predicted {
        self.predict_read(EngineReading::Fitted, queued_ahead, prompt_tokens, in_flight)
    }

    /// [`Self::predict`] with the engine's speed as `reading` reads it.
    pub fn predict_read(
        &self,
        reading: EngineReading,
        queued_ahead: u64,
        prompt_tokens: u64,
        in_flight: u64,
    ) -> Predicted {
        let prefill = self.published(reading);
        let (c, d) = read(&self.decode_published);
        let (intercept, spread) = prefill.at(slot(in_flight.saturating_sub(1)));
        Predicted {
            ttft: intercept + prefill.slope() * (queued_ahead + prompt_tokens) as f64,
            ttft_spread: spread,
            tpot: c + d * in_flight as f64,
        }
    }

    /// A request's first token came `ttft` after it was placed, its `own` prompt tokens
    /// behind `ahead` others in the engine, with `others` other requests on the replica;
    /// `alone`: nothing was ahead of it, not even a request another gateway sent (the
    /// engine reported none this gateway did not know), so it shows the engine's own
    /// prefill speed ([`super::envelope`]). Behind three gateways, first tokens taken as
    /// alone by one gateway's count were often queued behind the others' prefills, and
    /// the slope read from them fell to a third of the engine's: a cache hit looked
    /// barely faster than a miss, and load moved cached prefixes away.
    pub fn observe_prefill(
        &self,
        (ahead, own): (u64, u64),
        others: u64,
        alone: bool,
        ttft: Duration,
    ) {
        let mut models = self.models.lock();
        let seconds = ttft.as_secs_f64();
        models.prefill.observe(others, (ahead + own) as f64, seconds);
        if alone {
            models.prefill.observe_alone(own as f64, seconds);
        }
        self.publish_prefill(&models);
    }

    /// An answer's `usage.prompt_tokens` (`engine`) for a prompt this gateway counted as
    /// `counted`: the scale the engine's slope is read at.
    pub fn observe_prompt_count(&self, counted: u64, engine: u64) {
        self.token_scale.observe(counted, engine);
    }

    /// A scrape at `at` read the engine's counters: where they give its prefill speed, that
    /// is the slope, and each count's intercept is read net of it.
    pub fn observe_engine_work(&self, work: EngineWork, at: Instant) {
        if self.engine_speed.observe(work, at).is_some() {
            self.publish_prefill(&self.models.lock());
        }
    }

    /// Publishes the prefill model at each reading's slope: the engine's if it counts one,
    /// else the one learned from this gateway's first tokens; the intercepts and spreads
    /// net of it.
    fn publish_prefill(&self, models: &Models) {
        let slope_read =
            |reading| self.engine_slope(reading).unwrap_or_else(|| models.prefill.slope());
        let fitted = slope_read(EngineReading::Fitted);
        self.prefill_fitted.store(&models.prefill, fitted);
        let through_origin = slope_read(EngineReading::ThroughOrigin);
        if through_origin == fitted {
            self.prefill_through_origin.copy_from(&self.prefill_fitted);
        } else {
            self.prefill_through_origin.store(&models.prefill, through_origin);
        }
    }

    /// A stream that had `in_flight` streams on the replica (on average) decoded at `tpot`.
    pub fn observe_decode(&self, in_flight: f64, tpot: Duration) {
        let mut models = self.models.lock();
        models.decode.observe(in_flight, tpot.as_secs_f64());
        publish(&self.decode_published, &models.decode);
    }

    /// Samples each model has had: `(prefill, decode)`.
    pub fn samples(&self) -> (u64, u64) {
        let models = self.models.lock();
        (models.prefill.samples(), models.decode.samples())
    }

    /// The published coefficients and counters, as of `now`.
    pub fn view(&self, now: Instant) -> EstimateView {
        EstimateView {
            ttft_seconds_per_token: self.prefill_fitted.slope(),
            ttft_seconds_per_token_through_origin: self.prefill_through_origin.slope(),
            ttft_slope_source: if self.engine_speed.reads_fit() {
                SlopeSource::EngineFit
            } else if self.engine_speed.slope().is_some() {
                SlopeSource::EngineLine
            } else {
                SlopeSource::FirstTokens
            },
            engine_prefill_concurrency: self.engine_speed.concurrency(),
            engine_tokens_per_counted: self.token_scale.engine_per_counted(),
            ttft_intercepts: self.prefill_fitted.intercepts(),
            ttft_spreads: self.prefill_fitted.spreads(),
            decode: read(&self.decode_published),
            pending_prefill_tokens: self.pending_prefill_tokens(),
            engine_prefill_tokens: self.engine_prefill_tokens(),
            placements: self.placements(),
            samples: self.samples(),
            waiting_streams: self.overdue.waiting(),
            late_factor: self.overdue.factor(now),
            remeasure_after: Duration::from_micros(self.remeasure.interval_us()),
        }
    }
}
