//! Deciding whether one variant is slower than another from two samples of a latency
//! (TTFT or TPOT): a Mann-Whitney rank test for "is there a difference at all", and a
//! bootstrap interval of the ratio of medians for "how large, and is it large enough to
//! matter". Both are distribution-free: latencies are skewed and heavy-tailed.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// How a comparison is judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompareSettings {
    /// Fewer samples than this on either side: "not enough data".
    pub min_samples: usize,
    /// The rank test's significance level.
    pub alpha: f64,
    /// Differences in median within this share (0.1 = 10%) count as no difference.
    pub equivalence_margin: f64,
    /// Bootstrap resamples.
    pub resamples: usize,
    pub seed: u64,
}

impl Default for CompareSettings {
    fn default() -> Self {
        Self { min_samples: 30, alpha: 0.01, equivalence_margin: 0.10, resamples: 400, seed: 0 }
    }
}

/// The answer, worded for an operator.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// One side has fewer than `min_samples` samples.
    NotEnoughData {
        baseline_samples: usize,
        candidate_samples: usize,
        needed: usize,
    },
    /// The medians differ by less than the margin, with 95% confidence (checked first).
    NoDifference {
        median_ratio: f64,
        ratio_low: f64,
        ratio_high: f64,
        p_value: f64,
    },
    /// The candidate is slower (ratio > 1) or faster (ratio < 1), significantly and by more
    /// than could be within the margin.
    Slower {
        median_ratio: f64,
        ratio_low: f64,
        ratio_high: f64,
        p_value: f64,
    },
    Faster {
        median_ratio: f64,
        ratio_low: f64,
        ratio_high: f64,
        p_value: f64,
    },
    /// The data cannot tell yet.
    Inconclusive {
        median_ratio: f64,
        ratio_low: f64,
        ratio_high: f64,
        p_value: f64,
    },
}

/// Compares a candidate's latency samples with a baseline's; lower is better.
pub fn compare(baseline: &[f64], candidate: &[f64], settings: &CompareSettings) -> Verdict {
    if baseline.len() < settings.min_samples || candidate.len() < settings.min_samples {
        return Verdict::NotEnoughData {
            baseline_samples: baseline.len(),
            candidate_samples: candidate.len(),
            needed: settings.min_samples,
        };
    }
    let p_value = mann_whitney_p_value(baseline, candidate);
    let median_ratio = ratio(median(&mut baseline.to_vec()), median(&mut candidate.to_vec()));
    let (ratio_low, ratio_high) = bootstrap_ratio_interval(baseline, candidate, settings);
    let margin_high = 1.0 + settings.equivalence_margin;
    let margin_low = 1.0 / margin_high;
    // A difference proven to lie within the margin is no difference, however significant:
    // with enough samples the rank test finds 1% shifts an operator should not act on.
    if ratio_low >= margin_low && ratio_high <= margin_high {
        Verdict::NoDifference { median_ratio, ratio_low, ratio_high, p_value }
    } else if p_value < settings.alpha && ratio_low > 1.0 {
        Verdict::Slower { median_ratio, ratio_low, ratio_high, p_value }
    } else if p_value < settings.alpha && ratio_high < 1.0 {
        Verdict::Faster { median_ratio, ratio_low, ratio_high, p_value }
    } else {
        Verdict::Inconclusive { median_ratio, ratio_low, ratio_high, p_value }
    }
}

fn ratio(baseline: f64, candidate: f64) -> f64 {
    if baseline > 0.0 {
        candidate / baseline
    } else if candidate > 0.0 {
        f64::INFINITY
    } else {
        1.0
    }
}

fn median(values: &mut [f64]) -> f64 {
    let middle = values.len() / 2;
    let (_, upper, _) = values.select_nth_unstable_by(middle, f64::total_cmp);
    let upper = *upper;
    if values.len() % 2 == 1 {
        upper
    } else {
        let lower = values[..middle].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lower + upper) / 2.0
    }
}

/// Two-sided p-value of the Mann-Whitney U test, normal approximation with tie correction
/// (sound for the sample sizes the report requires).
pub fn mann_whitney_p_value(a: &[f64], b: &[f64]) -> f64 {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    let mut pooled: Vec<(f64, bool)> =
        a.iter().map(|&v| (v, true)).chain(b.iter().map(|&v| (v, false))).collect();
    pooled.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0;
    let mut start = 0;
    while start < pooled.len() {
        let mut end = start + 1;
        while end < pooled.len() && pooled[end].0 == pooled[start].0 {
            end += 1;
        }
        let ties = (end - start) as f64;
        let average_rank = (start + end + 1) as f64 / 2.0;
        rank_sum_a +=
            average_rank * pooled[start..end].iter().filter(|(_, in_a)| *in_a).count() as f64;
        tie_term += ties * ties * ties - ties;
        start = end;
    }
    let u = rank_sum_a - n1 * (n1 + 1.0) / 2.0;
    let mean = n1 * n2 / 2.0;
    let n = n1 + n2;
    let variance = n1 * n2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)));
    if variance <= 0.0 {
        return 1.0;
    }
    let z = (u - mean).abs() / variance.sqrt();
    (libm::erfc(z / std::f64::consts::SQRT_2)).min(1.0)
}

/// 95% percentile-bootstrap interval of median(candidate) / median(baseline).
fn bootstrap_ratio_interval(
    baseline: &[f64],
    candidate: &[f64],
    settings: &CompareSettings,
) -> (f64, f64) {
    let mut rng = StdRng::seed_from_u64(settings.seed);
    let mut ratios = Vec::with_capacity(settings.resamples);
    let mut scratch_a = vec![0.0; baseline.len()];
    let mut scratch_b = vec![0.0; candidate.len()];
    for _ in 0..settings.resamples {
        scratch_a.iter_mut().for_each(|v| *v = baseline[rng.random_range(0..baseline.len())]);
        scratch_b.iter_mut().for_each(|v| *v = candidate[rng.random_range(0..candidate.len())]);
        ratios.push(ratio(median(&mut scratch_a), median(&mut scratch_b)));
    }
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[((ratios.len() - 1) as f64 * q).round() as usize];
    (at(0.025), at(0.975))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_distr::{Distribution, LogNormal};

    fn lognormal_samples(median: f64, count: usize, seed: u64) -> Vec<f64> {
        let distribution = LogNormal::new(median.ln(), 0.3).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        (0..count).map(|_| distribution.sample(&mut rng)).collect()
    }

    #[test]
    fn a_clearly_slower_candidate_is_named_slower() {
        let baseline = lognormal_samples(0.25, 400, 1);
        let candidate = lognormal_samples(2.5, 400, 2);
        let verdict = compare(&baseline, &candidate, &CompareSettings::default());
        match verdict {
            Verdict::Slower { median_ratio, ratio_low, .. } => {
                assert!(median_ratio > 8.0 && ratio_low > 1.0, "{verdict:?}")
            }
            other => panic!("expected slower, got {other:?}"),
        }
        assert!(matches!(
            compare(&candidate, &baseline, &CompareSettings::default()),
            Verdict::Faster { .. }
        ));
    }

    #[test]
    fn identical_distributions_show_no_difference() {
        let baseline = lognormal_samples(0.25, 1000, 3);
        let candidate = lognormal_samples(0.25, 1000, 4);
        let verdict = compare(&baseline, &candidate, &CompareSettings::default());
        assert!(matches!(verdict, Verdict::NoDifference { .. }), "{verdict:?}");
    }

    #[test]
    fn a_significant_but_small_shift_is_no_difference() {
        // 2% slower on 8000 samples each: the rank test is sure, the margin says it does
        // not matter.
        let baseline = lognormal_samples(0.250, 8000, 5);
        let candidate = lognormal_samples(0.255, 8000, 6);
        let settings = CompareSettings::default();
        assert!(mann_whitney_p_value(&baseline, &candidate) < settings.alpha);
        let verdict = compare(&baseline, &candidate, &settings);
        assert!(matches!(verdict, Verdict::NoDifference { .. }), "{verdict:?}");
    }

    #[test]
    fn few_samples_are_not_enough() {
        let verdict = compare(&[1.0; 5], &[2.0; 100], &CompareSettings::default());
        assert_eq!(
            verdict,
            Verdict::NotEnoughData { baseline_samples: 5, candidate_samples: 100, needed: 30 }
        );
    }

    #[test]
    fn rank_test_matches_a_known_value() {
        // Two disjoint samples of 10: U = 0, z = 3.78, two-sided p = 0.000157.
        let a: Vec<f64> = (0..10).map(f64::from).collect();
        let b: Vec<f64> = (10..20).map(f64::from).collect();
        let p = mann_whitney_p_value(&a, &b);
        assert!((p - 0.000157).abs() < 0.00002, "p = {p}");
        // All values tied: no evidence of any difference.
        assert_eq!(mann_whitney_p_value(&[1.0; 10], &[1.0; 10]), 1.0);
    }

    #[test]
    fn median_of_odd_and_even_lengths() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
