//! A replica's prefill speed as its engine counts it, over every request it prefilled (every
//! gateway's and client's), not only this gateway's share.
//!
//! vLLM's `/metrics` sums, per finished request, the seconds from its first scheduling to
//! its first token (`vllm:request_prefill_time_seconds`: no queue in it) and the prompt
//! tokens it computed, those not found cached (`vllm:request_prefill_kv_computed_tokens`).
//! Over windows of a few prefills,
//! `seconds = a * requests + b * uncached tokens`, fitted by least squares in which each new
//! window discounts the old ones: `b` is the engine's seconds per uncached prompt token.
//!
//! A gateway's own first tokens teach the same slope ([`super::envelope`]) when it sends
//! most of a replica's traffic. Behind three gateways each saw a third of it, its first
//! tokens were too few and too often queued behind the others' prefills, and the slope it
//! read fell from the engine's 80 us a token to 2.5-10: a cache hit looked barely faster
//! than a miss, and load moved cached prefixes away. The engine's count has no such share.
//!
//! The fit is published once its windows hold [`MIN_PREFILLS`] prefills. The engine's count
//! since it started, read at the gateway's first scrape, is its first window, weighed as one
//! window of four prefills however many it holds and counted as enough to publish: a gateway
//! started beside replicas that have served (a restart, a warm-up, another client) knows
//! their speeds from its first scrape. Counting windows instead, a replica whose requests
//! finish in bursts (two waves of 16 streams: two windows) had no speed after 32 prefills,
//! and a fresh gateway sent a slow replica its share of a first burst at the configured
//! speed. Where their shares of cached tokens differ enough to tell the two terms apart and
//! the fitted `b` stands clear of the windows' noise ([`MIN_T_STATISTIC`]), `b` is the
//! fitted slope; where they do not (every request about one size: a conversation's turns;
//! the first few windows of hits and misses sharing steps), it is the line through the
//! origin, `seconds / tokens` over the windows, each request's fixed cost spread over its
//! tokens. That overstates the cost of a token by a request's fixed cost over its size and
//! by the decoding streams that shared its steps (197 us a counted token on a real
//! conversation workload, predicting 370-490 ms for first tokens that came in 135 ms at the
//! median), but alike on every replica that reads it. Two replicas of one speed can read
//! differently: on 32 real conversations, one read the fit (46 us a token) while the other
//! read the line (308), and a burst of first turns went 26 to 6
//! (`benches/results/2026-12-07-conversations-32x8`). So both are published, and a pick
//! reads all its candidates alike ([`EngineReading`]): by their fits where every one
//! stands, else by their lines. The gateway's own first tokens, the only other source, read
//! 22 and 58 us a token on two real replicas of one speed, and the burst of a conversation
//! workload's first turns went two to one onto the one that looked faster. A replica
//! exporting none of these counters (SGLang, an older vLLM) keeps the gateway's own slope.
//!
//! Both readings are divided by the engine's prefill concurrency: the windows' prefill
//! seconds over the wall time they took, at least one ([`Fit::concurrency`]). Prefills that
//! share engine steps each count every step they shared, so their seconds sum to more than
//! the steps took; the gateway counts the prefill queued ahead of a request apart, and a
//! slope inflated so would count it twice. The real engine ran 1.0-1.2 prefills at a time
//! on 32 conversations x 8 turns and on mixed sizes at 1.5 a second: what stretches a
//! prefill there (the line's 250-300 us a token against about 50 alone) is the decoding
//! streams sharing its steps, which a new prompt on that replica shares too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

/// Prefills a window holds before it becomes a point of the fit.
const WINDOW_PREFILLS: f64 = 4.0;
/// Weight each older window keeps when a new one closes: the last ~10 count most.
const DECAY: f64 = 0.9;
/// Prefills the windows must hold before a slope is published.
const MIN_PREFILLS: f64 = 3.0 * WINDOW_PREFILLS;
/// How far from collinear the windows must be (as a share of the product of the two
/// terms' spreads) for requests and tokens to be told apart. Each window's seconds carry
/// the noise of whatever else its engine steps ran (decoding streams, other prefills), and
/// the closer to collinear, the more the slope magnifies it. The turns of a conversation
/// workload (windows of 450-520 uncached tokens a request) read 0.02-0.05 on two simulated
/// replicas of one speed, and the slopes fitted were 50 and 216 us a token (23 modelled):
/// the second replica looked four times slower alone, and conversations left it for the
/// first. Shared prefixes (hits and misses in each window) and mixed sizes read 0.15-0.25.
/// Below it, the line through the origin is read instead (see the module).
const MIN_INDEPENDENCE: f64 = 0.08;
/// How many standard errors the fitted slope must stand above zero to be read. A request's
/// prefill time is the time of the engine steps it shared, so a cache hit scheduled beside
/// a miss's chunk took about as long as the miss: on three real replicas, fits of the first
/// three to five windows of a shared-prefix workload read 2.4-9 us a token (a miss looked
/// as cheap as a hit, and misses were placed as if free) before settling at 55-180. Below
/// it, the line through the origin is read instead: on that workload it read 270-290 us a
/// token until the fit stood clear, after about fifty requests on the replica.
const MIN_T_STATISTIC: f64 = 2.0;

/// The engine's cumulative counters of finished requests, summed over its engines, as one
/// scrape read them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineWork {
    /// `vllm:request_prefill_time_seconds_sum`.
    pub prefill_seconds: f64,
    /// `vllm:request_prefill_time_seconds_count`.
    pub prefills: f64,
    /// `vllm:request_prefill_kv_computed_tokens_sum`: prompt tokens computed, not cached.
    pub computed_tokens: f64,
}

impl EngineWork {
    /// `self - earlier`, `None` if any counter went back (the engine restarted).
    fn since(self, earlier: EngineWork) -> Option<EngineWork> {
        let delta = EngineWork {
            prefill_seconds: self.prefill_seconds - earlier.prefill_seconds,
            prefills: self.prefills - earlier.prefills,
            computed_tokens: self.computed_tokens - earlier.computed_tokens,
        };
        let counters = [delta.prefill_seconds, delta.prefills, delta.computed_tokens];
        counters.iter().all(|v| *v >= 0.0).then_some(delta)
    }

    fn add(&mut self, delta: EngineWork) {
        self.prefill_seconds += delta.prefill_seconds;
        self.prefills += delta.prefills;
        self.computed_tokens += delta.computed_tokens;
    }
}

/// How a pick reads its candidates' engine speeds: alike for every one of them. Two
/// replicas of one speed, one read by its fit and the other by its line, look several times
/// apart (46 and 308 us a token on 32 real conversations), and a burst of first turns went
/// 26 to 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineReading {
    /// Each engine's two-term fit where it stands, else its line through the origin: every
    /// candidate's engine reads its fit, or counts none.
    Fitted,
    /// Every engine's line through the origin: some candidate's engine reads only that.
    ThroughOrigin,
}

/// The slopes one fit reads, in seconds per uncached prompt token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slopes {
    /// `seconds / tokens` over the windows.
    pub through_origin: f64,
    /// `b` of the two-term fit, where it tells the terms apart and stands clear of the noise.
    pub fitted: Option<f64>,
    /// The engine's prefill concurrency both are divided by ([`Fit::concurrency`]).
    pub concurrency: f64,
}

/// One replica's fit; scrapes write it, picks read the published slopes.
#[derive(Debug, Default)]
pub struct EngineSpeed {
    fit: Mutex<Fit>,
    /// Seconds per uncached prompt token as `f64` bits, by the line through the origin and
    /// by the fit; 0: none (yet).
    through_origin_bits: AtomicU64,
    fitted_bits: AtomicU64,
    /// [`Fit::concurrency`] as `f64` bits, as of the last published fit; 0: none yet.
    concurrency_bits: AtomicU64,
}

#[derive(Debug, Default)]
struct Fit {
    last: Option<EngineWork>,
    window: EngineWork,
    /// Decayed sums over windows of requests `n`, uncached tokens `u` and seconds `t`:
    /// n*n, n*u, u*u, n*t, u*t, t*t.
    sums: [f64; 6],
    /// The windows' decayed weights summed: how many the sums count.
    weight: f64,
    /// Prefills the windows have held, undecayed.
    prefills: f64,
    /// When the open window's wall time started: the scrape that closed the last window
    /// (or the first scrape).
    window_opened: Option<Instant>,
    /// Decayed sums over timed windows (not the engine's history) of their prefill seconds
    /// and of the wall seconds they took: the engine's prefill concurrency.
    timed_prefill_seconds: f64,
    wall_seconds: f64,
}

impl EngineSpeed {
    /// The engine's seconds per uncached prompt token, once measured: its fit where it
    /// stands, else its line through the origin.
    pub fn slope(&self) -> Option<f64> {
        self.slope_read(EngineReading::Fitted)
    }

    /// The engine's seconds per uncached prompt token as `reading` reads it, once measured.
    pub fn slope_read(&self, reading: EngineReading) -> Option<f64> {
        let load = |bits: &AtomicU64| {
            let slope = f64::from_bits(bits.load(Ordering::Relaxed));
            (slope > 0.0).then_some(slope)
        };
        let through_origin = load(&self.through_origin_bits)?;
        Some(match reading {
            EngineReading::Fitted => load(&self.fitted_bits).unwrap_or(through_origin),
            EngineReading::ThroughOrigin => through_origin,
        })
    }

    /// How many prefills the engine ran at once, as the slopes published last were divided
    /// by (at least one); `None` before any is published.
    pub fn concurrency(&self) -> Option<f64> {
        let concurrency = f64::from_bits(self.concurrency_bits.load(Ordering::Relaxed));
        (concurrency > 0.0).then_some(concurrency)
    }

    /// Whether the engine's slope is its fit (false: its line, or none yet).
    pub fn reads_fit(&self) -> bool {
        f64::from_bits(self.fitted_bits.load(Ordering::Relaxed)) > 0.0
    }

    /// A scrape read `work` at `at`; returns the slopes if this changed them.
    pub fn observe(&self, work: EngineWork, at: Instant) -> Option<Slopes> {
        let mut fit = self.fit.lock();
        let last = fit.last.replace(work);
        let (window, counted) = match last {
            // The first scrape: what the engine did before is a window of its own, of no
            // known wall time.
            None => {
                fit.window_opened = Some(at);
                fit.history_window(work)?
            }
            Some(last) => {
                let Some(delta) = work.since(last) else {
                    // The engine restarted: what it did since opens the next window (its
                    // wall time counted from the last window's close, a little long).
                    fit.window = work;
                    return None;
                };
                fit.window.add(delta);
                if fit.window.prefills < WINDOW_PREFILLS {
                    return None;
                }
                let window = std::mem::take(&mut fit.window);
                if let Some(opened) = fit.window_opened.replace(at) {
                    fit.add_wall_time(
                        window.prefill_seconds,
                        at.duration_since(opened).as_secs_f64(),
                    );
                }
                (window, window.prefills)
            }
        };
        fit.add_window(window, counted);
        let slopes = fit.slopes()?;
        self.concurrency_bits.store(slopes.concurrency.to_bits(), Ordering::Relaxed);
        self.fitted_bits.store(slopes.fitted.unwrap_or(0.0).to_bits(), Ordering::Relaxed);
        self.through_origin_bits.store(slopes.through_origin.to_bits(), Ordering::Relaxed);
        Some(slopes)
    }
}

impl Fit {
    /// The engine's counts since it started, read at the first scrape, as one window of
    /// [`WINDOW_PREFILLS`] prefills at their mean, weighed as any other window rather than as
    /// its thousands of requests (so that the windows after it outweigh it) and counted as
    /// [`MIN_PREFILLS`]: enough to publish. `None` if it holds fewer prefills than a window.
    fn history_window(&mut self, history: EngineWork) -> Option<(EngineWork, f64)> {
        if history.prefills < WINDOW_PREFILLS {
            // A replica new to traffic: its few prefills open the next window.
            self.window = history;
            return None;
        }
        let share = WINDOW_PREFILLS / history.prefills;
        let window = EngineWork {
            prefill_seconds: history.prefill_seconds * share,
            prefills: WINDOW_PREFILLS,
            computed_tokens: history.computed_tokens * share,
        };
        Some((window, MIN_PREFILLS))
    }

    /// A closed window's prefill seconds took `wall` seconds: into the concurrency's sums,
    /// decayed as the fit's are.
    fn add_wall_time(&mut self, prefill_seconds: f64, wall: f64) {
        self.timed_prefill_seconds = self.timed_prefill_seconds * DECAY + prefill_seconds;
        self.wall_seconds = self.wall_seconds * DECAY + wall;
    }

    /// How many prefills the engine ran at once, on average over the timed windows: their
    /// prefill seconds over their wall time, at least one (and one before any window is
    /// timed). An engine idle part of a window reads lower than it ran while busy, so the
    /// slopes divided by it stay at or above the engine's own cost.
    fn concurrency(&self) -> f64 {
        if self.wall_seconds > 0.0 {
            (self.timed_prefill_seconds / self.wall_seconds).max(1.0)
        } else {
            1.0
        }
    }

    /// Adds a closed window to the decayed sums, as `counted` prefills toward publishing.
    fn add_window(&mut self, window: EngineWork, counted: f64) {
        let (n, u, t) = (window.prefills, window.computed_tokens, window.prefill_seconds);
        for sum in &mut self.sums {
            *sum *= DECAY;
        }
        for (sum, term) in self.sums.iter_mut().zip([n * n, n * u, u * u, n * t, u * t, t * t]) {
            *sum += term;
        }
        self.weight = self.weight * DECAY + 1.0;
        self.prefills += counted;
    }

    /// The line through the origin, `t = b * u`, and `b` of `t = a * n + b * u` with `a` at
    /// least zero where the windows tell the terms apart and `b` stands [`MIN_T_STATISTIC`]
    /// standard errors above zero, each divided by the engine's [`Fit::concurrency`]. `None`
    /// before the windows hold [`MIN_PREFILLS`] prefills, or if the tokens took no time.
    fn slopes(&self) -> Option<Slopes> {
        if self.prefills < MIN_PREFILLS {
            return None;
        }
        let [nn, nu, uu, nt, ut, tt] = self.sums;
        if uu <= 0.0 {
            return None;
        }
        let concurrency = self.concurrency();
        let through_origin = ut / uu / concurrency;
        if through_origin <= 0.0 {
            return None;
        }
        let determinant = nn * uu - nu * nu;
        let independence = determinant / (nn * uu);
        if independence <= MIN_INDEPENDENCE {
            // One size of request: its fixed cost cannot be told from its tokens'.
            tracing::debug!(
                target: "laneway::engine_speed",
                independence,
                concurrency,
                through_origin_us = through_origin * 1e6,
                "engine prefill fit: one size of request"
            );
            return Some(Slopes { through_origin, fitted: None, concurrency });
        }
        let per_request = (uu * nt - nu * ut) / determinant;
        let per_token = (nn * ut - nu * nt) / determinant;
        // The residuals' variance over the windows' degrees of freedom, and the slope's
        // standard error from it.
        let residuals = (tt - per_request * nt - per_token * ut).max(0.0);
        let freedom = self.weight - 2.0;
        let standard_error = if freedom > 0.0 {
            (residuals / freedom * nn / determinant).sqrt()
        } else {
            f64::INFINITY
        };
        // No fixed cost per request, or none told apart from the steps' noise: the line.
        let fitted =
            per_request >= 0.0 && per_token > 0.0 && per_token >= MIN_T_STATISTIC * standard_error;
        tracing::debug!(
            target: "laneway::engine_speed",
            independence,
            per_request_ms = per_request * 1e3 / concurrency,
            per_token_us = per_token * 1e6 / concurrency,
            t = per_token / standard_error,
            concurrency,
            through_origin_us = through_origin * 1e6,
            fitted,
            "engine prefill fit"
        );
        let fitted = fitted.then_some(per_token / concurrency);
        Some(Slopes { through_origin, fitted, concurrency })
    }
}

#[cfg(test)]
mod tests;
