//! A replica's TTFT at zero prompt tokens (what is left of a TTFT once the prefill line's
//! slope times the prompt tokens is taken off) by the number of other requests in flight on
//! it when a request is placed. A line over prompt tokens alone cannot show what concurrency
//! does to a first token: API-server event loops busy streaming other requests' tokens
//! preprocess a new prompt late (on the simulator's `h20-tp8`, TTFT jumps once every API
//! process carries a stream), and a running batch shares each engine step with a prefill.
//!
//! One decayed mean per in-flight count (the last count stands for that many or more),
//! shrunk toward the count below it while its own samples are few or old, and read as never
//! falling as the count grows. A count the replica has not been seen at is predicted as the
//! highest below it: optimistic, so the policy tries it and learns.

/// In-flight counts told apart; the last stands for `COUNTS - 1` or more.
pub const COUNTS: usize = 32;
/// Weight every count's samples keep when the replica reports another sample: a count not
/// seen for a few hundred of the replica's requests fades back to the one below it.
const DECAY: f64 = 0.98;
/// How many samples the count below weighs against a count's own.
const NEIGHBOUR_WEIGHT: f64 = 1.0;

/// Decayed sums per in-flight count.
#[derive(Debug, Clone, PartialEq)]
pub struct TtftByConcurrency {
    /// Per count: decayed weight and decayed sum of the samples.
    weight: [f64; COUNTS],
    sum: [f64; COUNTS],
}

impl Default for TtftByConcurrency {
    fn default() -> Self {
        Self { weight: [0.0; COUNTS], sum: [0.0; COUNTS] }
    }
}

/// The count a number of requests in flight is kept under.
pub fn slot(in_flight: u64) -> usize {
    (in_flight as usize).min(COUNTS - 1)
}

impl TtftByConcurrency {
    /// A request placed with `others` requests already in flight had its first token
    /// `base` seconds plus what its prompt tokens explain after placement. Non-finite
    /// samples are ignored.
    pub fn observe(&mut self, others: u64, base: f64) {
        if !base.is_finite() {
            return;
        }
        for (weight, sum) in self.weight.iter_mut().zip(&mut self.sum) {
            *weight *= DECAY;
            *sum *= DECAY;
        }
        let at = slot(others);
        self.weight[at] += 1.0;
        self.sum[at] += base;
    }

    /// The base to expect at each count; `floor` (the prompt-token line's intercept) where
    /// nothing has been seen at or below a count.
    pub fn curve(&self, floor: f64) -> [f64; COUNTS] {
        let mut curve = [floor; COUNTS];
        let mut below = floor;
        for (at, value) in curve.iter_mut().enumerate() {
            let (weight, sum) = (self.weight[at], self.sum[at]);
            let shrunk = (sum + NEIGHBOUR_WEIGHT * below) / (weight + NEIGHBOUR_WEIGHT);
            below = shrunk.max(below);
            *value = below;
        }
        curve
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_seen_reads_the_floor_at_every_count() {
        let curve_of = TtftByConcurrency::default();
        assert!(curve_of.curve(0.05).iter().all(|&v| v == 0.05));
    }

    #[test]
    fn a_jump_at_a_count_is_learned_and_held_above_it() {
        let mut curve_of = TtftByConcurrency::default();
        // Up to 3 others: no excess; 4 or more: 0.6 s more.
        for n in 0..200u64 {
            let others = n % 7;
            curve_of.observe(others, if others >= 4 { 0.6 } else { 0.0 });
        }
        let curve = curve_of.curve(0.0);
        assert!(curve[2] < 0.05, "{curve:?}");
        assert!(curve[4] > 0.45 && curve[6] > 0.55, "{curve:?}");
        // Never seen beyond 6: read as at 6, not as nothing.
        assert!((curve[20] - curve[6]).abs() < 1e-9, "{curve:?}");
        assert!(curve.windows(2).all(|pair| pair[1] >= pair[0]), "never falls: {curve:?}");
    }

    #[test]
    fn a_count_not_seen_for_long_fades_to_the_one_below() {
        let mut curve_of = TtftByConcurrency::default();
        for _ in 0..20 {
            curve_of.observe(5, 1.0);
        }
        assert!(curve_of.curve(0.0)[5] > 0.9);
        // The replica healed and has been seen only at low counts since.
        for _ in 0..300 {
            curve_of.observe(1, 0.0);
        }
        assert!(curve_of.curve(0.0)[5] < 0.1, "{:?}", curve_of.curve(0.0));
        curve_of.observe(2, f64::NAN);
        assert!(curve_of.curve(0.0).iter().all(|v| v.is_finite()));
    }
}
