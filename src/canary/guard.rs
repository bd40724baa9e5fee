//! What a canary is judged on: the metrics (TTFT and TPOT at p50, p95 and p99, E2E p95,
//! error rate, goodput share), which of them guard the overall verdict, their margins, and
//! how one verdict per metric combines into one per variant.

use serde::Serialize;

/// A figure compared between a candidate and its baseline. For every one, higher is worse
/// except the goodput share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    TtftP50,
    TtftP95,
    TtftP99,
    TpotP50,
    TpotP95,
    TpotP99,
    E2eP95,
    ErrorRate,
    GoodputShare,
}

impl Metric {
    pub const ALL: [Metric; 9] = [
        Metric::TtftP50,
        Metric::TtftP95,
        Metric::TtftP99,
        Metric::TpotP50,
        Metric::TpotP95,
        Metric::TpotP99,
        Metric::E2eP95,
        Metric::ErrorRate,
        Metric::GoodputShare,
    ];

    /// The name used in the config and the JSON report.
    pub fn name(self) -> &'static str {
        match self {
            Metric::TtftP50 => "ttft_p50",
            Metric::TtftP95 => "ttft_p95",
            Metric::TtftP99 => "ttft_p99",
            Metric::TpotP50 => "tpot_p50",
            Metric::TpotP95 => "tpot_p95",
            Metric::TpotP99 => "tpot_p99",
            Metric::E2eP95 => "e2e_p95",
            Metric::ErrorRate => "error_rate",
            Metric::GoodputShare => "goodput_share",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|metric| metric.name() == name)
    }

    /// The name in the text report.
    pub fn label(self) -> &'static str {
        match self {
            Metric::TtftP50 => "TTFT p50",
            Metric::TtftP95 => "TTFT p95",
            Metric::TtftP99 => "TTFT p99",
            Metric::TpotP50 => "TPOT p50",
            Metric::TpotP95 => "TPOT p95",
            Metric::TpotP99 => "TPOT p99",
            Metric::E2eP95 => "E2E p95",
            Metric::ErrorRate => "error rate",
            Metric::GoodputShare => "goodput share",
        }
    }

    /// The quantile of a latency metric; `None` for the two shares.
    pub fn quantile(self) -> Option<f64> {
        match self {
            Metric::TtftP50 | Metric::TpotP50 => Some(0.50),
            Metric::TtftP95 | Metric::TpotP95 | Metric::E2eP95 => Some(0.95),
            Metric::TtftP99 | Metric::TpotP99 => Some(0.99),
            Metric::ErrorRate | Metric::GoodputShare => None,
        }
    }

    /// Latency quantiles: a ratio (0.10 = 10% slower is still within); shares: a
    /// difference in points of share (0.01 = one percentage point).
    pub fn default_margin(self) -> f64 {
        match self {
            Metric::ErrorRate => 0.01,
            Metric::GoodputShare => 0.05,
            _ => 0.10,
        }
    }
}

/// How a variant is judged against its baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardSettings {
    /// The chance of a false "worse" (or a false "better") per variant: "worse" is judged
    /// over the guarded metrics together (see [`super::closure`]), "better" and the
    /// intervals at alpha split evenly over them.
    pub alpha: f64,
    pub guarded: Vec<Metric>,
    /// One margin per metric, in the order of [`Metric::ALL`].
    pub margins: [f64; 9],
    /// Pairs a metric needs before it may be called anything.
    pub min_pairs: u64,
}

impl Default for GuardSettings {
    fn default() -> Self {
        Self {
            alpha: 0.05,
            guarded: vec![
                Metric::TtftP50,
                Metric::TtftP95,
                Metric::TpotP50,
                Metric::TpotP95,
                Metric::E2eP95,
                Metric::ErrorRate,
                Metric::GoodputShare,
            ],
            margins: Metric::ALL.map(Metric::default_margin),
            min_pairs: 30,
        }
    }
}

impl GuardSettings {
    pub fn margin(&self, metric: Metric) -> f64 {
        let index = Metric::ALL.iter().position(|m| *m == metric).expect("listed");
        self.margins[index]
    }

    /// The level each metric is tested at (Bonferroni over the guarded ones).
    pub fn metric_alpha(&self) -> f64 {
        self.alpha / self.guarded.len().max(1) as f64
    }

    /// The e-value one metric needs on its own evidence to be worse (alpha split evenly
    /// over the guarded metrics).
    pub fn worse_evidence_alone(&self) -> f64 {
        1.0 / self.metric_alpha()
    }

    /// The log-wealth a bettor must reach to reject a null at the metric level.
    pub fn log_target(&self) -> f64 {
        self.worse_evidence_alone().ln()
    }

    pub fn is_guarded(&self, metric: Metric) -> bool {
        self.guarded.contains(&metric)
    }
}

/// The answer for one metric, or for a variant as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Fewer pairs than the minimum.
    NotEnoughData,
    /// Neither worse, better, nor within the margin, yet.
    Undecided,
    /// Worse beyond the margin.
    Worse,
    /// Within the margin either way.
    NoDifference,
    /// Better beyond the margin.
    Better,
}

impl Decision {
    pub fn words(self) -> &'static str {
        match self {
            Decision::NotEnoughData => "not enough data",
            Decision::Undecided => "undecided",
            Decision::Worse => "worse",
            Decision::NoDifference => "no difference",
            Decision::Better => "better",
        }
    }
}

/// One metric's verdict, with how large the difference is and how sure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricVerdict {
    pub metric: Metric,
    /// Whether it counts towards the variant's verdict.
    pub guarded: bool,
    pub decision: Decision,
    /// Latency: the candidate's quantile over the baseline's (2.0 = twice as slow); shares:
    /// the candidate's share minus the baseline's.
    pub estimate: Option<f64>,
    /// The confidence sequence's ends as of now (`None`: unbounded so far).
    pub low: Option<f64>,
    pub high: Option<f64>,
    pub margin: f64,
    /// Paired samples (one of each variant) tested so far.
    pub pairs: u64,
    /// The e-value against "not worse beyond the margin".
    pub worse_evidence: f64,
    /// The e-value that names this metric worse on its own evidence (alpha split evenly
    /// over the guarded metrics, as the interval is); judged with the other guarded
    /// metrics, less can (see [`super::closure`]).
    pub worse_evidence_alone: f64,
    /// For an undecided metric: about how many more pairs a decision needs if the
    /// difference stays as it looks (an estimate, not a promise).
    pub more_pairs_needed: Option<u64>,
}

/// A variant's verdict from its guarded metrics' ones: worse if any is worse; no
/// difference only if all are; better if none is worse or undecided and one is better.
pub fn overall(decisions: impl IntoIterator<Item = Decision>) -> Decision {
    let decisions: Vec<Decision> = decisions.into_iter().collect();
    let any = |wanted: Decision| decisions.contains(&wanted);
    if decisions.is_empty() {
        Decision::NotEnoughData
    } else if any(Decision::Worse) {
        Decision::Worse
    } else if any(Decision::NotEnoughData) {
        Decision::NotEnoughData
    } else if any(Decision::Undecided) {
        Decision::Undecided
    } else if any(Decision::Better) {
        Decision::Better
    } else {
        Decision::NoDifference
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_alpha_is_split_over_guarded_metrics() {
        for metric in Metric::ALL {
            assert_eq!(Metric::parse(metric.name()), Some(metric));
        }
        let settings = GuardSettings::default();
        assert!((settings.metric_alpha() - 0.05 / 7.0).abs() < 1e-12, "seven guarded by default");
        assert_eq!(settings.margin(Metric::ErrorRate), 0.01);
    }

    #[test]
    fn one_worse_metric_makes_the_variant_worse() {
        use Decision::*;
        assert_eq!(overall([NoDifference, Worse, NotEnoughData]), Worse);
        assert_eq!(overall([NoDifference, Undecided]), Undecided);
        assert_eq!(overall([NoDifference, Better]), Better);
        assert_eq!(overall([NoDifference, NoDifference]), NoDifference);
        assert_eq!(overall([NoDifference, NotEnoughData]), NotEnoughData);
    }
}
