//! One latency quantile (say TTFT p95) compared on paired samples. Before each pair, the
//! threshold `t` is the baseline's quantile over the samples seen before it. The pair
//! scores `1{candidate > r t} - 1{baseline > t}`: if the candidate is no slower than the
//! baseline stretched by `r`, that score's mean is at most 0 whatever `t` is, so the betting
//! e-process (see [`super::betting`]) may bet against "ratio <= r". With `t` the baseline's
//! quantile, "ratio <= r" is "candidate's quantile <= r times the baseline's". Testing a
//! ladder of ratios gives the confidence sequence of the ratio; the margins give the
//! verdict.

use super::betting::{Scores, log_wealth, pairs_needed, projected_log_wealth};
use super::guard::{Decision, GuardSettings, Metric, MetricVerdict};

/// The ladder of ratios: 16 steps per doubling (4.4% apart), from 1/64 to 64.
const STEPS_PER_DOUBLING: i32 = 16;
const ONE: i32 = 6 * STEPS_PER_DOUBLING;
const BINS: usize = (2 * ONE + 1) as usize;

fn bin(ratio: f64) -> usize {
    let step = (ratio.max(1e-300).log2() * f64::from(STEPS_PER_DOUBLING)).floor();
    (step + f64::from(ONE)).clamp(0.0, (BINS - 1) as f64) as usize
}

fn rung(index: usize) -> f64 {
    2f64.powf(f64::from(index as i32 - ONE) / f64::from(STEPS_PER_DOUBLING))
}

#[derive(Debug, Clone)]
pub struct TailTest {
    pub metric: Metric,
    margin: f64,
    /// Scored against "ratio <= 1 + margin"; flipped, against "ratio >= 1 + margin".
    at_high: Scores,
    /// Scored against "ratio <= 1 / (1 + margin)"; flipped, against its reverse.
    at_low: Scores,
    /// Pairs by the candidate's ratio to the threshold, split by whether the baseline's
    /// sample was over it: enough to score any rung of the ladder.
    clear: Vec<u32>,
    over: Vec<u32>,
}

impl TailTest {
    pub fn new(metric: Metric, margin: f64) -> Self {
        Self {
            metric,
            margin,
            at_high: Scores::default(),
            at_low: Scores::default(),
            clear: vec![0; BINS],
            over: vec![0; BINS],
        }
    }

    pub fn quantile(&self) -> f64 {
        self.metric.quantile().unwrap_or(0.5)
    }

    /// One pair: whether the baseline's sample exceeded the threshold, and the candidate's
    /// sample divided by the threshold.
    pub fn add(&mut self, baseline_over: bool, ratio: f64) {
        let high = 1.0 + self.margin;
        let z = i8::from(baseline_over);
        self.at_high.add(i8::from(ratio > high) - z);
        self.at_low.add(i8::from(ratio > 1.0 / high) - z);
        let bins = if baseline_over { &mut self.over } else { &mut self.clear };
        bins[bin(ratio)] += 1;
    }

    /// The e-value against "not worse beyond the margin".
    pub fn worse_evidence(&self) -> f64 {
        log_wealth(self.at_high, 0.0).exp()
    }

    /// The same after `more` pairs like those seen so far.
    pub fn projected_worse_evidence(&self, more: u64) -> f64 {
        projected_log_wealth(self.at_high, 0.0, more).exp()
    }

    pub fn pairs(&self) -> u64 {
        self.at_high.pairs()
    }

    /// The metric's decision; whether it is worse is judged with the other guarded metrics
    /// (see [`super::closure`]) and passed in.
    pub fn decision(&self, settings: &GuardSettings, worse: bool) -> Decision {
        let target = settings.log_target();
        let rejects = |scores: Scores| log_wealth(scores, 0.0) >= target;
        if worse {
            Decision::Worse
        } else if self.pairs() < settings.min_pairs {
            Decision::NotEnoughData
        } else if rejects(self.at_low.flipped()) {
            Decision::Better
        } else if rejects(self.at_high.flipped()) && rejects(self.at_low) {
            Decision::NoDifference
        } else {
            Decision::Undecided
        }
    }

    /// Scores against "ratio <= rung(index)".
    fn scores_at(&self, index: usize) -> Scores {
        let up: u64 = self.clear[index..].iter().map(|&n| u64::from(n)).sum();
        let down: u64 = self.over[..index].iter().map(|&n| u64::from(n)).sum();
        Scores { up, down, even: self.pairs() - up - down }
    }

    /// The confidence sequence's ends, on the ladder: the highest rung rejected from below
    /// and the lowest rejected from above.
    fn interval(&self, target: f64) -> (Option<f64>, Option<f64>) {
        let mut low = None;
        let mut high = None;
        for index in 0..BINS {
            let scores = self.scores_at(index);
            if log_wealth(scores, 0.0) >= target {
                low = Some(rung(index));
            }
            if high.is_none() && log_wealth(scores.flipped(), 0.0) >= target {
                high = Some(rung(index));
            }
        }
        (low, high)
    }

    /// The verdict with its interval; `estimate` is the ratio of the two quantiles.
    pub fn verdict(
        &self,
        settings: &GuardSettings,
        estimate: Option<f64>,
        worse: bool,
    ) -> MetricVerdict {
        let target = settings.log_target();
        let decision = self.decision(settings, worse);
        let (low, high) = self.interval(target);
        let more_pairs_needed = match decision {
            Decision::Undecided | Decision::NotEnoughData => {
                let worse = pairs_needed(self.at_high, 0.0, target);
                let better = pairs_needed(self.at_low.flipped(), 0.0, target);
                let same = pairs_needed(self.at_high.flipped(), 0.0, target)
                    .zip(pairs_needed(self.at_low, 0.0, target))
                    .map(|(a, b)| a.max(b));
                let soonest = [worse, better, same].into_iter().flatten().min();
                let floor = settings.min_pairs.saturating_sub(self.pairs());
                soonest.map(|n| n.max(floor))
            }
            _ => None,
        };
        MetricVerdict {
            metric: self.metric,
            guarded: settings.is_guarded(self.metric),
            decision,
            estimate,
            low,
            high,
            margin: self.margin,
            pairs: self.pairs(),
            worse_evidence: self.worse_evidence(),
            worse_evidence_alone: settings.worse_evidence_alone(),
            more_pairs_needed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ladder_brackets_ratios() {
        assert_eq!(bin(1.0), ONE as usize);
        assert!((rung(ONE as usize + STEPS_PER_DOUBLING as usize) - 2.0).abs() < 1e-12);
        for ratio in [0.3, 0.99, 1.0, 1.7, 10.0] {
            let index = bin(ratio);
            assert!(rung(index) <= ratio && ratio < rung(index + 1), "{ratio}");
        }
        assert_eq!(bin(0.0), 0);
        assert_eq!(bin(1e9), BINS - 1);
    }

    #[test]
    fn a_candidate_always_over_twice_the_threshold_is_worse_with_a_bounded_interval() {
        let settings = GuardSettings::default();
        let mut test = TailTest::new(Metric::TtftP95, 0.1);
        for n in 0..200 {
            test.add(n % 20 == 0, 2.5);
        }
        assert!(test.worse_evidence() >= settings.worse_evidence_alone());
        let verdict = test.verdict(&settings, Some(2.5), true);
        assert_eq!(verdict.decision, Decision::Worse);
        let low = verdict.low.unwrap();
        assert!(low > 1.1 && low <= 2.5, "{verdict:?}");
    }
}
