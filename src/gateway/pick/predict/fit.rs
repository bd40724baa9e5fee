//! A straight line `y = intercept + slope * x` fitted online by least squares in which
//! every new sample discounts the old ones by a constant factor, anchored by a weak prior
//! on the slope so that it is defined from the first sample and stays defined when every
//! sample has the same `x`.
//!
//! The prior pulls on the slope only. Counted as two pseudo-samples on the prior line (an
//! earlier form), it pulled on the level too: a replica measured well above the prior line
//! at a few counts saw those pseudo-samples as points far below its own, which tilted the
//! fitted slope down to its floor, so the line read the replica as barely slowing with load.

/// Weight each older sample keeps when a new one arrives: the last ~10 samples count most,
/// so a replica that slows down or recovers is followed within a few requests.
pub const DEFAULT_DECAY: f64 = 0.85;

/// A sample this far from the line's prediction (as a share of the prediction) suggests
/// the replica changed speed rather than noise: the past is then forgotten faster.
pub const CHANGE_RATIO: f64 = 0.5;
/// How many ordinary decays a changed-looking sample applies at once.
const CHANGE_DECAYS: i32 = 3;

/// Share of the prior's slope that the fitted slope never falls below.
pub const MIN_SLOPE_SHARE: f64 = 0.25;

/// A decayed least-squares line with a prior.
#[derive(Debug, Clone, PartialEq)]
pub struct DecayedLine {
    decay: f64,
    prior_intercept: f64,
    prior_slope: f64,
    /// The prior's pull on the slope: as much as `prior_weight` samples at each end of its
    /// span, in least-squares terms (weight x squared distance from the span's middle).
    prior_spread: f64,
    /// The least slope the line keeps: a share of the prior's, because samples taken over
    /// a narrow, noisy range often show none, and a replica whose latency seems not to grow
    /// with its load would be sent every request.
    min_slope: f64,
    /// Decayed sums of the samples: weight, x, y, x*x, x*y.
    sums: [f64; 5],
    samples: u64,
}

impl DecayedLine {
    /// A line that reads `intercept + slope * x` until samples say otherwise. The slope
    /// prior weighs as much as `prior_weight` samples at each of `x_low` and `x_high` (the
    /// span the slope is expected over) would; it never decays, so it only matters while
    /// the data are few or say little about the slope. The level is the samples' own from
    /// the first sample on.
    pub fn new(intercept: f64, slope: f64, (x_low, x_high): (f64, f64), prior_weight: f64) -> Self {
        let half_span = (x_high - x_low) / 2.0;
        Self {
            decay: DEFAULT_DECAY,
            prior_intercept: intercept,
            prior_slope: slope,
            prior_spread: 2.0 * prior_weight * half_span * half_span,
            min_slope: slope * MIN_SLOPE_SHARE,
            sums: [0.0; 5],
            samples: 0,
        }
    }

    pub fn with_decay(mut self, decay: f64) -> Self {
        self.decay = decay.clamp(0.0, 1.0);
        self
    }

    /// Adds one sample; non-finite ones are ignored.
    pub fn observe(&mut self, x: f64, y: f64) {
        if !x.is_finite() || !y.is_finite() {
            return;
        }
        let predicted = self.predict(x);
        let changed =
            self.samples > 0 && predicted > 0.0 && (y - predicted).abs() > CHANGE_RATIO * predicted;
        let decay = if changed { self.decay.powi(CHANGE_DECAYS) } else { self.decay };
        for sum in &mut self.sums {
            *sum *= decay;
        }
        self.sums[0] += 1.0;
        self.sums[1] += x;
        self.sums[2] += y;
        self.sums[3] += x * x;
        self.sums[4] += x * y;
        self.samples += 1;
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// `(intercept, slope)`: the intercept at least zero, the slope at least the floor
    /// (latency never falls, and keeps growing, as work grows). The slope is the samples'
    /// least-squares slope with the prior counted as one more group of samples of its own
    /// level; the line passes through the samples' weighted mean.
    pub fn coefficients(&self) -> (f64, f64) {
        let [n, sx, sy, sxx, sxy] = self.sums;
        if n <= f64::EPSILON {
            return (self.prior_intercept, self.prior_slope.max(self.min_slope));
        }
        let spread = self.prior_spread + (sxx - sx * sx / n).max(0.0);
        let covariance = self.prior_spread * self.prior_slope + (sxy - sx * sy / n);
        let fitted = if spread > f64::EPSILON { covariance / spread } else { self.prior_slope };
        let slope = fitted.max(self.min_slope);
        let intercept = (sy - slope * sx) / n;
        if intercept < 0.0 {
            // Through the origin instead: the best slope with no fixed cost.
            let through_origin = if sxx > f64::EPSILON { sxy / sxx } else { slope };
            return (0.0, through_origin.max(self.min_slope));
        }
        (intercept, slope)
    }

    pub fn predict(&self, x: f64) -> f64 {
        let (intercept, slope) = self.coefficients();
        intercept + slope * x
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance * b.abs().max(1e-9)
    }

    #[test]
    fn with_no_samples_the_prior_line_is_read() {
        let line = DecayedLine::new(0.05, 1e-5, (0.0, 10_000.0), 1.0);
        let (intercept, slope) = line.coefficients();
        assert!(close(intercept, 0.05, 1e-9) && close(slope, 1e-5, 1e-9));
        assert!(close(line.predict(5_000.0), 0.1, 1e-9));
    }

    #[test]
    fn noisy_samples_of_a_line_recover_it() {
        // TTFT = 30 ms + 7 us per token, with 5% noise, seeded.
        let mut rng = StdRng::seed_from_u64(7);
        let mut line = DecayedLine::new(0.05, 1e-5, (0.0, 16_384.0), 0.05);
        for _ in 0..200 {
            // The benchmark's mix: 70% short prompts, 30% long ones.
            let x = if rng.random_bool(0.7) { 1_000.0 } else { 9_000.0 };
            let y = (0.03 + 7e-6 * x) * rng.random_range(0.95..1.05);
            line.observe(x, y);
        }
        assert!(close(line.predict(1_000.0), 0.037, 0.1), "{}", line.predict(1_000.0));
        assert!(close(line.predict(9_000.0), 0.093, 0.1), "{}", line.predict(9_000.0));
    }

    #[test]
    fn samples_at_one_x_set_the_level_and_keep_the_prior_slope_shape() {
        let mut line = DecayedLine::new(0.01, 1e-3, (0.0, 10.0), 0.05);
        for _ in 0..50 {
            line.observe(4.0, 0.045);
        }
        assert!(close(line.predict(4.0), 0.045, 0.05), "{}", line.predict(4.0));
        assert!(line.predict(8.0) >= line.predict(4.0));
    }

    #[test]
    fn a_replica_far_above_the_prior_level_keeps_the_prior_slope_where_its_samples_say_none() {
        // The gateway's decode prior (15 ms + 0.5 ms a stream over 1..32 streams); the
        // replica decodes at 52 ms with 7 or 8 streams, three times the prior's level there.
        let mut line = DecayedLine::new(0.015, 5e-4, (1.0, 32.0), 0.05);
        for n in 0..60 {
            line.observe(f64::from(7 + n % 2), 0.052);
        }
        let (_, slope) = line.coefficients();
        // The samples span one stream and are flat: they say almost nothing about the
        // slope, so the prior's holds (a prior counted as points on its own, lower line
        // dragged it to the floor, a quarter of the prior's).
        assert!(slope > 0.8 * 5e-4, "{slope}");
        assert!(close(line.predict(7.5), 0.052, 0.01), "{}", line.predict(7.5));
        assert!(line.predict(24.0) > line.predict(7.5) + 0.8 * 5e-4 * 16.5);
    }

    #[test]
    fn a_change_of_speed_is_followed_within_a_few_samples() {
        let mut line = DecayedLine::new(0.015, 0.001, (1.0, 32.0), 0.05);
        for n in 0..100 {
            line.observe(f64::from(n % 8 + 1), 0.015 + 0.001 * f64::from(n % 8 + 1));
        }
        let before = line.predict(4.0);
        // Three times slower from now on.
        for n in 0..20 {
            line.observe(f64::from(n % 8 + 1), 3.0 * (0.015 + 0.001 * f64::from(n % 8 + 1)));
        }
        let after = line.predict(4.0);
        assert!(close(before, 0.019, 0.05), "{before}");
        assert!(after > 2.5 * before, "{after} vs {before}");
    }

    #[test]
    fn coefficients_never_go_negative_and_bad_samples_are_ignored() {
        let mut line = DecayedLine::new(0.0, 0.0, (0.0, 1.0), 0.1);
        // Falling samples: a flat line (this prior's slope is zero) instead of a
        // negative slope.
        for (x, y) in [(1.0, 5.0), (2.0, 4.0), (3.0, 3.0)] {
            line.observe(x, y);
        }
        line.observe(f64::NAN, 1.0);
        line.observe(1.0, f64::INFINITY);
        assert_eq!(line.samples(), 3);
        let (intercept, slope) = line.coefficients();
        assert_eq!(slope, 0.0);
        assert!(intercept > 0.0);
    }
}
