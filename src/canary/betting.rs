//! Evidence that can be read at any time: a betting e-process on paired scores in
//! {-1, 0, +1}. A bettor starts with 1 and, before each pair, stakes a fixed fraction of
//! its wealth on the score exceeding an offset; under the null hypothesis ("the score's
//! mean is at most the offset") no bet is favourable, so the wealth is a nonnegative
//! supermartingale and, by Ville's inequality, reaches 1/alpha with probability at most
//! alpha, however often it is looked at. The wealth reported is the average of bettors
//! with stakes 0.05, 0.10, ... 0.95 (a mixture of supermartingales is one), so no stake
//! has to be chosen in advance.

use serde::Serialize;

/// The stakes of the mixture's bettors.
const STAKES: usize = 19;

fn stake(index: usize) -> f64 {
    (index + 1) as f64 / (STAKES + 1) as f64
}

/// Paired scores, counted: `up` pairs scored +1, `down` pairs -1, `even` pairs 0. The
/// wealth only depends on these counts, not on their order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Scores {
    pub up: u64,
    pub down: u64,
    pub even: u64,
}

impl Scores {
    pub fn pairs(&self) -> u64 {
        self.up + self.down + self.even
    }

    /// The same pairs scored the other way round.
    pub fn flipped(self) -> Self {
        Self { up: self.down, down: self.up, even: self.even }
    }

    pub fn add(&mut self, score: i8) {
        match score {
            1 => self.up += 1,
            -1 => self.down += 1,
            _ => self.even += 1,
        }
    }
}

/// The log-wealth of one bettor staking `lambda` on `score - offset`, per pair at the
/// given frequencies (or in all, given counts); `None` if the stake could lose everything.
fn log_growth(up: f64, down: f64, even: f64, lambda: f64, offset: f64) -> Option<f64> {
    let factor = |score: f64| 1.0 + lambda * (score - offset);
    let (gain, loss, still) = (factor(1.0), factor(-1.0), factor(0.0));
    if loss <= 0.0 || still <= 0.0 || gain <= 0.0 {
        return None;
    }
    Some(up * gain.ln() + down * loss.ln() + even * still.ln())
}

/// The natural log of the mixture's wealth after `scores`, betting against the null
/// "mean score <= offset" (offset in (-1, 1)). Reject at level alpha when it reaches
/// ln(1 / alpha).
pub fn log_wealth(scores: Scores, offset: f64) -> f64 {
    mixture_log_wealth(scores.up as f64, scores.down as f64, scores.even as f64, offset)
}

/// The mixture's log-wealth after `more` further pairs, if they score at the frequencies
/// seen so far (an estimate of where the evidence is heading, not evidence).
pub fn projected_log_wealth(scores: Scores, offset: f64, more: u64) -> f64 {
    let seen = scores.pairs();
    if seen == 0 {
        return 0.0;
    }
    let scale = (seen + more) as f64 / seen as f64;
    let (up, down, even) = (scores.up as f64, scores.down as f64, scores.even as f64);
    mixture_log_wealth(up * scale, down * scale, even * scale, offset)
}

fn mixture_log_wealth(up: f64, down: f64, even: f64, offset: f64) -> f64 {
    let logs: Vec<f64> = (0..STAKES)
        .map(|i| log_growth(up, down, even, stake(i), offset).unwrap_or(f64::NEG_INFINITY))
        .collect();
    let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if top == f64::NEG_INFINITY {
        return top;
    }
    // Bettors whose stake could lose everything hold nothing: they count as zero wealth.
    top + (logs.iter().map(|l| (l - top).exp()).sum::<f64>() / STAKES as f64).ln()
}

/// About how many more pairs the mixture needs to reach `log_target`, if the pairs keep
/// scoring at the frequencies seen so far: the best bettor's growth per pair, less the
/// mixture's cost of not knowing it in advance. `None` when the evidence is not growing.
pub fn pairs_needed(scores: Scores, offset: f64, log_target: f64) -> Option<u64> {
    let current = log_wealth(scores, offset);
    if current >= log_target {
        return Some(0);
    }
    let n = scores.pairs();
    if n == 0 {
        return None;
    }
    let total = n as f64;
    let (up, down, even) =
        (scores.up as f64 / total, scores.down as f64 / total, scores.even as f64 / total);
    let (best, rate) = (0..STAKES)
        .filter_map(|i| log_growth(up, down, even, stake(i), offset).map(|g| (i, g)))
        .fold((0, f64::NEG_INFINITY), |acc, (i, g)| if g > acc.1 { (i, g) } else { acc });
    if rate <= 1e-9 {
        return None;
    }
    let have =
        log_growth(scores.up as f64, scores.down as f64, scores.even as f64, stake(best), offset)
            .unwrap_or(f64::NEG_INFINITY);
    let target = log_target + (STAKES as f64).ln();
    Some(((target - have) / rate).ceil().max(1.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn nothing_observed_is_no_evidence() {
        assert_eq!(log_wealth(Scores::default(), 0.0), 0.0);
        let even = Scores { up: 0, down: 0, even: 500 };
        assert!(log_wealth(even, 0.0).abs() < 1e-12);
    }

    #[test]
    fn a_one_sided_run_builds_evidence_and_the_opposite_destroys_it() {
        let wins = Scores { up: 20, down: 0, even: 0 };
        assert!(log_wealth(wins, 0.0) > 20f64.ln(), "{}", log_wealth(wins, 0.0));
        assert!(log_wealth(wins.flipped(), 0.0) < 0.0);
        // An offset makes the same wins less telling: the null allows more of them.
        assert!(log_wealth(wins, 0.5) < log_wealth(wins, 0.0));
    }

    #[test]
    fn fair_coins_rarely_reach_the_threshold_however_often_they_are_read() {
        // 2000 sequences of 400 fair scores, looked at after every pair: Ville's inequality
        // bounds the share that ever reaches ln(20) by 5%.
        let mut rng = StdRng::seed_from_u64(11);
        let mut alarms = 0;
        for _ in 0..2000 {
            let mut scores = Scores::default();
            for _ in 0..400 {
                scores.add([1, -1, 0][rng.random_range(0..3)]);
                if log_wealth(scores, 0.0) >= 20f64.ln() {
                    alarms += 1;
                    break;
                }
            }
        }
        assert!(alarms <= 100, "{alarms} of 2000 sequences raised an alarm");
    }

    #[test]
    fn a_projection_scales_the_frequencies_seen() {
        let scores = Scores { up: 12, down: 4, even: 24 };
        assert_eq!(projected_log_wealth(scores, 0.0, 0), log_wealth(scores, 0.0));
        let doubled = Scores { up: 24, down: 8, even: 48 };
        assert!((projected_log_wealth(scores, 0.0, 40) - log_wealth(doubled, 0.0)).abs() < 1e-9);
        assert_eq!(projected_log_wealth(Scores::default(), 0.0, 100), 0.0);
    }

    #[test]
    fn the_estimate_of_pairs_needed_is_about_right() {
        let scores = Scores { up: 12, down: 4, even: 24 };
        let needed = pairs_needed(scores, 0.0, 20f64.ln()).unwrap();
        let projected =
            Scores { up: 12 + needed * 3 / 10, down: 4 + needed / 10, even: 24 + needed * 6 / 10 };
        assert!(log_wealth(projected, 0.0) >= 20f64.ln() - 0.5, "{needed}");
        assert_eq!(pairs_needed(scores.flipped(), 0.0, 20f64.ln()), None);
    }
}
