//! Which guarded metrics are worse, judged together rather than each at a split level:
//! closed testing over the mean of their e-values. The mean of e-processes that share one
//! stream of pairs is itself an e-process, so "some metric of the set is worse" is rejected
//! when the set's mean evidence reaches 1/alpha, and a metric is called worse when every
//! set that contains it is rejected. The chance of calling any not-worse metric worse,
//! ever, stays within alpha (Ville's inequality applied to the mean over the not-worse
//! ones), and the rule is never weaker than splitting alpha evenly: a metric whose own
//! evidence reaches (guarded metrics)/alpha passes every set. It is stronger when several
//! metrics see the same regression (a tail shows in TTFT p95, E2E p95 and goodput alike).

/// The guarded metrics' verdicts on "worse", from their e-values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorseJudgement {
    /// Some guarded metric is worse (the mean of all their e-values reached 1/alpha).
    pub any: bool,
    /// Per metric, in the order given: this one is worse.
    pub each: Vec<bool>,
}

/// Judges e-values (each against "this metric is not worse beyond its margin") at level
/// `alpha` for the family.
pub fn judge_worse(evidence: &[f64], alpha: f64) -> WorseJudgement {
    let bar = 1.0 / alpha;
    let count = evidence.len();
    if count == 0 {
        return WorseJudgement { any: false, each: Vec::new() };
    }
    let any = evidence.iter().sum::<f64>() / count as f64 >= bar;
    let each = (0..count)
        .map(|index| {
            let mut others: Vec<f64> = evidence
                .iter()
                .enumerate()
                .filter(|&(other, _)| other != index)
                .map(|(_, &e)| e)
                .collect();
            others.sort_by(f64::total_cmp);
            // For each size, the set containing this metric with the least mean evidence
            // adds the weakest others; all of them must be rejected.
            let mut sum = evidence[index];
            (1..=count).all(|size| {
                if size > 1 {
                    sum += others[size - 2];
                }
                sum / size as f64 >= bar
            })
        })
        .collect();
    WorseJudgement { any, each }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn one_metric_alone_needs_what_an_even_split_needs() {
        // Seven metrics at 5%: an even split asks 140 of one metric.
        let mut evidence = [0.0; 7];
        evidence[1] = 139.0;
        assert!(!judge_worse(&evidence, 0.05).any);
        evidence[1] = 140.0;
        let judged = judge_worse(&evidence, 0.05);
        assert!(judged.any);
        assert_eq!(judged.each, [false, true, false, false, false, false, false]);
    }

    #[test]
    fn evidence_spread_over_several_metrics_adds_up() {
        // No metric reaches 140 alone; together their mean passes 20.
        let evidence = [90.0, 30.0, 1.0, 0.5, 60.0, 0.0, 1.0];
        let judged = judge_worse(&evidence, 0.05);
        assert!(judged.any);
        // The strongest passes every set it is in: with the four weakest others (2.5 in
        // all) its mean over five is 18.5 < 20, so it is not named alone.
        assert_eq!(judged.each, [false; 7]);
        let strong = [110.0, 30.0, 1.0, 0.5, 60.0, 0.0, 1.0];
        let judged = judge_worse(&strong, 0.05);
        assert!(judged.any);
        assert_eq!(judged.each, [true, false, false, false, false, false, false]);
    }

    #[test]
    fn null_e_values_raise_the_alarm_within_alpha() {
        // Seven independent e-values that are 1/alpha' with probability alpha' (mean 1):
        // the family's false alarms stay within 5%.
        let mut rng = StdRng::seed_from_u64(5);
        let trials = 20_000;
        let alarms = (0..trials)
            .filter(|_| {
                let evidence: Vec<f64> =
                    (0..7).map(|_| if rng.random_bool(0.01) { 100.0 } else { 0.0 }).collect();
                judge_worse(&evidence, 0.05).any
            })
            .count();
        assert!(alarms * 20 <= trials, "{alarms} of {trials}");
    }
}
