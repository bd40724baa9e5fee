//! A share of requests (errors, or requests missing an SLO) compared on paired requests:
//! each pair scores `1{candidate's is bad} - 1{baseline's is bad}`, whose mean is the
//! difference of the two shares, so the betting e-process (see [`super::betting`]) tests
//! "the difference is at most d" directly, and a ladder of `d` gives its confidence
//! sequence.

use super::betting::{Scores, log_wealth, pairs_needed, projected_log_wealth};
use super::guard::{Decision, GuardSettings, Metric, MetricVerdict};

/// The ladder of differences, in half points of share.
const STEP: f64 = 0.005;

#[derive(Debug, Clone)]
pub struct RateTest {
    pub metric: Metric,
    margin: f64,
    scores: Scores,
}

impl RateTest {
    pub fn new(metric: Metric, margin: f64) -> Self {
        Self { metric, margin, scores: Scores::default() }
    }

    pub fn add(&mut self, baseline_bad: bool, candidate_bad: bool) {
        self.scores.add(i8::from(candidate_bad) - i8::from(baseline_bad));
    }

    /// The e-value against "not worse beyond the margin".
    pub fn worse_evidence(&self) -> f64 {
        log_wealth(self.scores, self.margin).exp()
    }

    /// The same after `more` pairs like those seen so far.
    pub fn projected_worse_evidence(&self, more: u64) -> f64 {
        projected_log_wealth(self.scores, self.margin, more).exp()
    }

    pub fn pairs(&self) -> u64 {
        self.scores.pairs()
    }

    /// As in [`super::tail`]: whether it is worse is judged with the other metrics.
    pub fn decision(&self, settings: &GuardSettings, worse: bool) -> Decision {
        let target = settings.log_target();
        let (s, d) = (self.scores, self.margin);
        if worse {
            Decision::Worse
        } else if self.pairs() < settings.min_pairs {
            Decision::NotEnoughData
        } else if log_wealth(s.flipped(), d) >= target {
            Decision::Better
        } else if log_wealth(s.flipped(), -d) >= target && log_wealth(s, -d) >= target {
            Decision::NoDifference
        } else {
            Decision::Undecided
        }
    }

    /// The difference of bad shares (candidate minus baseline): estimate and interval.
    fn difference(&self, target: f64) -> (Option<f64>, Option<f64>, Option<f64>) {
        let n = self.pairs();
        let estimate =
            (n > 0).then(|| (self.scores.up as f64 - self.scores.down as f64) / n as f64);
        let ladder = (1..400).map(|i| -1.0 + STEP * f64::from(i));
        let low = ladder.clone().rev().find(|&d| log_wealth(self.scores, d) >= target);
        let high = ladder.clone().find(|&d| log_wealth(self.scores.flipped(), -d) >= target);
        (estimate, low, high)
    }

    pub fn verdict(&self, settings: &GuardSettings, worse: bool) -> MetricVerdict {
        let target = settings.log_target();
        let decision = self.decision(settings, worse);
        let (s, d) = (self.scores, self.margin);
        let (mut estimate, mut low, mut high) = self.difference(target);
        // The goodput share is scored on requests missing it; report the share itself.
        if self.metric == Metric::GoodputShare {
            estimate = estimate.map(|e| -e);
            (low, high) = (high.map(|h| -h), low.map(|l| -l));
        }
        let more_pairs_needed = match decision {
            Decision::Undecided | Decision::NotEnoughData => {
                let same = pairs_needed(s.flipped(), -d, target)
                    .zip(pairs_needed(s, -d, target))
                    .map(|(a, b)| a.max(b));
                let options =
                    [pairs_needed(s, d, target), pairs_needed(s.flipped(), d, target), same];
                let floor = settings.min_pairs.saturating_sub(self.pairs());
                options.into_iter().flatten().min().map(|n| n.max(floor))
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
    fn a_candidate_failing_one_in_five_is_worse_and_equal_shares_are_no_difference() {
        let settings = GuardSettings::default();
        let mut failing = RateTest::new(Metric::ErrorRate, 0.01);
        let mut same = RateTest::new(Metric::ErrorRate, 0.01);
        for n in 0..1000 {
            failing.add(false, n % 5 == 0);
            same.add(false, false);
        }
        assert!(failing.worse_evidence() >= settings.worse_evidence_alone());
        let verdict = failing.verdict(&settings, true);
        assert_eq!(verdict.decision, Decision::Worse);
        assert!((verdict.estimate.unwrap() - 0.2).abs() < 1e-9);
        assert!(verdict.low.unwrap() > 0.01 && verdict.high.unwrap() > 0.2, "{verdict:?}");
        assert_eq!(same.decision(&settings, false), Decision::NoDifference);
    }
}
