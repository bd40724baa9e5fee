//! A replica's TTFT model: a line over the prompt tokens a request has to get through, with
//! one intercept per number of other requests in flight on the replica when it was placed.
//!
//! A line over prompt tokens alone cannot show what concurrency does to a first token:
//! API-server event loops busy streaming other requests' tokens preprocess a new prompt late
//! (on the simulator's `h20-tp8`, TTFT jumps once every API process carries a stream), and a
//! running batch shares each engine step with a prefill. Fitted over all samples, such a line
//! puts that concurrency in its intercept, so a replica looks slow at every load after a busy
//! spell, and in its slope whenever long prompts meet more concurrency than short ones.
//!
//! So the slope is the engine's, read off the fastest recent first tokens of each prompt
//! size ([`PrefillEnvelope`]); until two sizes have been seen, it is fitted within each
//! in-flight count (least squares with one intercept per count: only how TTFT varies with
//! tokens at a given count informs it). Each count's intercept is its own samples' mean net
//! of that slope. Samples decay by a constant factor
//! per sample on the replica; a count's intercept is shrunk toward the count below it while
//! its own samples are few or old, and read as never falling as the count grows. A count
//! the replica has not been seen at is predicted as the highest below it: optimistic, so the
//! policy tries it and learns. The last count stands for that many or more.
//!
//! Each count also keeps how widely its samples spread around its intercept (a standard
//! deviation, net of the slope). A first token on such a replica is often bimodal: fast on
//! an idle API process, late on one that streams; a mean between the two can sit under an
//! objective that a third of the requests miss, and the spread is what shows it.

use super::envelope::PrefillEnvelope;

/// In-flight counts told apart; the last stands for `COUNTS - 1` or more.
pub const COUNTS: usize = 32;
/// Weight every sample keeps when the replica reports another: the samples are spread over
/// the counts, so they must be kept longer than a single line's (a few dozen requests).
const DECAY: f64 = 0.98;
/// How many samples the count below weighs against a count's own.
const NEIGHBOUR_WEIGHT: f64 = 1.0;
/// Share of the prior's slope that the fitted slope never falls below (as the line fit's).
const MIN_SLOPE_SHARE: f64 = 0.25;

/// Decayed sums per in-flight count, and the prior that anchors the fit.
#[derive(Debug, Clone, PartialEq)]
pub struct TtftByConcurrency {
    /// Per count: weight, tokens, TTFT, tokens^2, tokens x TTFT, TTFT^2.
    sums: [[f64; 6]; COUNTS],
    prior_intercept: f64,
    prior_slope: f64,
    /// The prior's pull on the slope: weight x spread of its span (see `slope`).
    prior_spread: f64,
    /// The fastest recent first tokens by size, whose line is the engine's prefill speed.
    envelope: PrefillEnvelope,
    samples: u64,
}

/// The count a number of requests in flight is kept under.
pub fn slot(in_flight: u64) -> usize {
    usize::try_from(in_flight).unwrap_or(usize::MAX).min(COUNTS - 1)
}

impl TtftByConcurrency {
    /// A model that reads `intercept + slope * tokens` at every count until samples say
    /// otherwise. The slope prior weighs as much as `prior_weight` samples at each end of
    /// `x_low..x_high` would; it never decays.
    pub fn new(intercept: f64, slope: f64, (x_low, x_high): (f64, f64), prior_weight: f64) -> Self {
        let half_span = (x_high - x_low) / 2.0;
        Self {
            sums: [[0.0; 6]; COUNTS],
            prior_intercept: intercept,
            prior_slope: slope,
            prior_spread: 2.0 * prior_weight * half_span * half_span,
            envelope: PrefillEnvelope::default(),
            samples: 0,
        }
    }

    /// A request placed with `others` requests already in flight, behind `tokens` prompt
    /// tokens (its own included), had its first token after `ttft` seconds. Non-finite
    /// samples are ignored.
    pub fn observe(&mut self, others: u64, tokens: f64, ttft: f64) {
        if !tokens.is_finite() || !ttft.is_finite() {
            return;
        }
        for sums in &mut self.sums {
            for sum in sums.iter_mut() {
                *sum *= DECAY;
            }
        }
        let sums = &mut self.sums[slot(others)];
        sums[0] += 1.0;
        sums[1] += tokens;
        sums[2] += ttft;
        sums[3] += tokens * tokens;
        sums[4] += tokens * ttft;
        sums[5] += ttft * ttft;
        self.samples += 1;
    }

    /// A request of `tokens` prompt tokens that found no other prompt ahead of it in the
    /// engine had its first token after `ttft` seconds (also given to [`Self::observe`]):
    /// a point for the engine's own prefill speed.
    pub fn observe_alone(&mut self, tokens: f64, ttft: f64) {
        self.envelope.observe(tokens, ttft);
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Seconds per prompt token: the envelope's slope once it has one, else the within-count
    /// least-squares slope with the prior counted as one more group; never below a quarter
    /// of the prior's.
    pub fn slope(&self) -> f64 {
        let slope = self.envelope.slope().unwrap_or_else(|| self.fitted_slope());
        slope.max(self.prior_slope * MIN_SLOPE_SHARE)
    }

    /// The within-count least-squares slope, the prior counted as one more group.
    fn fitted_slope(&self) -> f64 {
        let (mut spread, mut covariance) =
            (self.prior_spread, self.prior_slope * self.prior_spread);
        for [weight, x, y, xx, xy, _] in self.sums {
            if weight > f64::EPSILON {
                spread += xx - x * x / weight;
                covariance += xy - x * y / weight;
            }
        }
        if spread > f64::EPSILON { covariance / spread } else { self.prior_slope }
    }

    /// TTFT at zero prompt tokens for each count of other requests in flight.
    pub fn intercepts(&self) -> [f64; COUNTS] {
        self.intercepts_at(self.slope())
    }

    /// [`Self::intercepts`] net of `slope` (the model's own, computed once by the caller).
    pub fn intercepts_at(&self, slope: f64) -> [f64; COUNTS] {
        let mut intercepts = [self.prior_intercept; COUNTS];
        // Count zero is shrunk toward the prior, every other count toward the one below,
        // which it never falls under.
        let (mut toward, mut floor) = (self.prior_intercept, f64::NEG_INFINITY);
        for (intercept, [weight, x, y, _, _, _]) in intercepts.iter_mut().zip(self.sums) {
            let own = y - slope * x;
            let shrunk = (own + NEIGHBOUR_WEIGHT * toward) / (weight + NEIGHBOUR_WEIGHT);
            *intercept = shrunk.max(floor);
            (toward, floor) = (*intercept, *intercept);
        }
        intercepts
    }

    /// The standard deviation of each count's TTFTs around its mean, net of the slope: each
    /// count's own, shrunk toward the count below while its samples are few or old (count
    /// zero toward none), and never under the count below's: more requests in flight never
    /// make a first token more certain. So `intercept + spread` grows with the count at
    /// least as the intercept does. Raised only as far as that sum needed to stay level,
    /// a count where every first token is late (spreading less than one where some are
    /// fast) read as no later than the count below: on a real replica serving shared
    /// prefixes, three requests in flight read as idle (61 ms), where the intercepts rose
    /// by 23 ms, while a replica with one request in flight read 79 ms and lost to it:
    /// 350 of 450 requests went to one of two replicas holding the same contexts.
    pub fn spreads(&self) -> [f64; COUNTS] {
        self.spreads_at(self.slope())
    }

    /// [`Self::spreads`] net of `slope` (the model's own).
    pub fn spreads_at(&self, slope: f64) -> [f64; COUNTS] {
        let mut spreads = [0.0; COUNTS];
        let (mut toward, mut below) = (0.0, 0.0);
        for (spread, [weight, x, y, xx, xy, yy]) in spreads.iter_mut().zip(self.sums) {
            // Sums of the residuals `ttft - slope * tokens` and of their squares.
            let residuals = y - slope * x;
            let squares = yy - 2.0 * slope * xy + slope * slope * xx;
            let scatter = if weight > f64::EPSILON {
                (squares - residuals * residuals / weight).max(0.0)
            } else {
                0.0
            };
            let variance = (scatter + NEIGHBOUR_WEIGHT * toward) / (weight + NEIGHBOUR_WEIGHT);
            *spread = variance.sqrt().max(below);
            (toward, below) = (variance, *spread);
        }
        spreads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> TtftByConcurrency {
        TtftByConcurrency::new(0.05, 1e-5, (0.0, 16_384.0), 0.05)
    }

    #[test]
    fn nothing_seen_reads_the_prior_at_every_count() {
        let model = model();
        assert!(model.intercepts().iter().all(|&v| v == 0.05));
        assert!((model.slope() - 1e-5).abs() < 1e-12);
    }

    #[test]
    fn a_jump_at_a_count_is_learned_and_held_above_it_without_bending_the_slope() {
        let mut model = model();
        // 100 ms + 50 us a token while up to 3 others are in flight; 600 ms more from 4 on.
        // Long prompts come more often at high counts: a single line would blame them.
        for n in 0..280u64 {
            let others = n % 7;
            let tokens = if others >= 4 || n % 3 == 0 { 9000.0 } else { 1000.0 };
            let jump = if others >= 4 { 0.6 } else { 0.0 };
            model.observe(others, tokens, 0.1 + 5e-5 * tokens + jump);
        }
        assert!((model.slope() - 5e-5).abs() < 2e-6, "{}", model.slope());
        let intercepts = model.intercepts();
        assert!((intercepts[2] - 0.1).abs() < 0.02, "{intercepts:?}");
        assert!(intercepts[4] > 0.55 && intercepts[6] > 0.65, "{intercepts:?}");
        // Never seen beyond 6: read as at 6, not as nothing.
        assert!((intercepts[20] - intercepts[6]).abs() < 1e-9, "{intercepts:?}");
        assert!(intercepts.windows(2).all(|pair| pair[1] >= pair[0]), "{intercepts:?}");
    }

    #[test]
    fn a_count_whose_first_tokens_are_fast_or_late_spreads_wide_and_a_steady_one_does_not() {
        let mut model = model();
        // Count 2: always 100 ms. Count 5: 100 ms on two requests of three, 900 ms on the
        // third (a busy API process), whatever the prompt.
        for n in 0..300u64 {
            let tokens = if n % 2 == 0 { 1000.0 } else { 9000.0 };
            let line = 5e-5 * tokens;
            model.observe(2, tokens, 0.1 + line);
            model.observe(5, tokens, if n % 3 == 0 { 0.9 } else { 0.1 } + line);
        }
        let spreads = model.spreads();
        assert!(spreads[2] < 0.01, "{spreads:?}");
        // Two values 0.8 apart, one third at the top: sqrt(1/3 * 2/3) * 0.8 = 0.377.
        assert!((spreads[5] - 0.377).abs() < 0.03, "{spreads:?}");
        // The mean alone reads 367 ms at count 5; a spread above it says a third miss 500 ms.
        assert!((model.intercepts()[5] - 0.367).abs() < 0.03, "{:?}", model.intercepts());
        // Never seen beyond 5: read as 5.
        assert!((spreads[12] - spreads[5]).abs() < 0.01, "{spreads:?}");
    }

    #[test]
    fn the_spread_never_falls_and_mean_plus_spread_grows_with_the_mean() {
        let mut model = model();
        // Count 5 fast or late (367 ms mean, 377 ms spread); count 8 late every time
        // (600 ms, no spread of its own): more in flight must not read as safer, nor as
        // no later than count 5.
        for n in 0..300u64 {
            model.observe(5, 1000.0, if n % 3 == 0 { 0.9 } else { 0.1 });
            model.observe(8, 1000.0, 0.6);
        }
        let (intercepts, spreads) = (model.intercepts(), model.spreads());
        assert!(spreads.windows(2).all(|pair| pair[1] >= pair[0]), "{spreads:?}");
        let upper: Vec<f64> = intercepts.iter().zip(spreads).map(|(i, s)| i + s).collect();
        assert!(upper.windows(2).all(|pair| pair[1] >= pair[0] - 1e-12), "{upper:?}");
        let rise = intercepts[8] - intercepts[5];
        assert!(rise > 0.1, "{intercepts:?}");
        assert!(upper[8] - upper[5] >= rise - 1e-12, "{upper:?} against a rise of {rise}");
    }

    #[test]
    fn a_count_not_seen_for_long_fades_to_the_one_below() {
        let mut model = model();
        for _ in 0..20 {
            model.observe(5, 1000.0, 1.0);
        }
        assert!(model.intercepts()[5] > 0.9);
        // The replica has been seen only at low counts since.
        for _ in 0..300 {
            model.observe(1, 1000.0, 0.1);
        }
        let intercepts = model.intercepts();
        assert!(intercepts[5] < 0.15, "{intercepts:?}");
        model.observe(2, f64::NAN, 1.0);
        model.observe(2, 1000.0, f64::INFINITY);
        assert!(model.intercepts().iter().all(|v| v.is_finite()));
    }
}
