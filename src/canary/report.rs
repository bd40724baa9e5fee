//! The side-by-side comparison an operator reads: per entry and variant, over the sliding
//! window and since start, the field's figures and a verdict against the entry's baseline.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::compare::{CompareSettings, Verdict, compare};
use super::guard::{Decision, MetricVerdict};
use super::sequential::Comparison;
use super::series::Series;
use super::tally::{Slo, Tally};

/// The field's figures for one variant over one span.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub span_seconds: f64,
    pub requests: u64,
    pub failures: u64,
    pub e2e_p95_s: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p95_ms: Option<f64>,
    pub tpot_p50_ms: Option<f64>,
    pub qpm: f64,
    pub tpm: f64,
    pub tokens_per_s: f64,
    pub goodput_per_s: f64,
    /// Points `[quantile, ms]` of the TTFT and TPOT distributions, for charts.
    pub ttft_cdf_ms: Vec<[f64; 2]>,
    pub tpot_cdf_ms: Vec<[f64; 2]>,
}

/// The quantiles a chart is drawn through.
const CDF_POINTS: [f64; 12] = [0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 0.995, 1.0];

/// A candidate's sequential verdict against its baseline since the comparison began.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judgement {
    /// Worse if any guarded metric is worse beyond its margin.
    pub verdict: Decision,
    pub pairs: u64,
    pub metrics: Vec<MetricVerdict>,
    /// While undecided: about how many more pairs the guarded metrics together need to
    /// read worse, if the difference stays as it looks.
    pub more_pairs_needed_for_worse: Option<u64>,
}

/// Something done on a verdict (automation), as the report lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CanaryAction {
    pub unix_seconds: f64,
    pub entry: String,
    pub variant: String,
    /// `rollback` or `promote`.
    pub action: &'static str,
    pub from_weight: u32,
    pub to_weight: u32,
    pub verdict: Decision,
    pub pairs: u64,
}

/// A variant's name, recorded series and comparison, as the report reads them.
pub type VariantData<'a> = (&'a str, Option<&'a Series>, Option<&'a Comparison>);

/// TTFT and TPOT verdicts of a variant against its entry's baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdicts {
    pub ttft: Verdict,
    pub tpot: Verdict,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VariantReport {
    pub variant: String,
    pub window: Summary,
    pub since_start: Summary,
    /// Absent for the baseline itself.
    pub window_vs_baseline: Option<Verdicts>,
    pub since_start_vs_baseline: Option<Verdicts>,
    /// The anytime-valid verdict; absent for the baseline.
    pub judgement: Option<Judgement>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntryReport {
    pub entry: String,
    pub baseline: String,
    pub variants: Vec<VariantReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub window_seconds: f64,
    pub slo: Slo,
    pub entries: Vec<EntryReport>,
    /// Outcomes the recorder could not keep up with (never expected; counted if it happens).
    pub dropped_outcomes: u64,
    /// Weight changes made on verdicts, oldest first.
    pub actions: Vec<CanaryAction>,
}

/// Summarises tallies measured over `span`.
pub fn summarise<'a>(tallies: impl Iterator<Item = &'a Tally>, span: Duration) -> Summary {
    let empty = || Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds");
    let (mut e2e, mut ttft, mut tpot) = (empty(), empty(), empty());
    let (mut requests, mut failures, mut good, mut tokens) = (0, 0, 0, 0);
    for tally in tallies {
        requests += tally.requests;
        failures += tally.failures;
        good += tally.good;
        tokens += tally.prompt_tokens + tally.completion_tokens;
        e2e.add(&tally.e2e_us).expect("same bounds");
        ttft.add(&tally.ttft_us).expect("same bounds");
        tpot.add(&tally.tpot_us).expect("same bounds");
    }
    let quantile = |histogram: &Histogram<u64>, q: f64, scale: f64| {
        (!histogram.is_empty()).then(|| histogram.value_at_quantile(q) as f64 / scale)
    };
    let cdf = |histogram: &Histogram<u64>| {
        if histogram.is_empty() {
            return Vec::new();
        }
        CDF_POINTS.map(|q| [q, histogram.value_at_quantile(q) as f64 / 1e3]).to_vec()
    };
    let seconds = span.as_secs_f64().max(1e-9);
    Summary {
        span_seconds: span.as_secs_f64(),
        requests,
        failures,
        e2e_p95_s: quantile(&e2e, 0.95, 1e6),
        ttft_p50_ms: quantile(&ttft, 0.5, 1e3),
        ttft_p95_ms: quantile(&ttft, 0.95, 1e3),
        tpot_p50_ms: quantile(&tpot, 0.5, 1e3),
        qpm: requests as f64 / seconds * 60.0,
        tpm: tokens as f64 / seconds * 60.0,
        tokens_per_s: tokens as f64 / seconds,
        goodput_per_s: good as f64 / seconds,
        ttft_cdf_ms: cdf(&ttft),
        tpot_cdf_ms: cdf(&tpot),
    }
}

fn samples<'a>(tallies: impl Iterator<Item = &'a Tally>) -> (Vec<f64>, Vec<f64>) {
    let (mut ttft, mut tpot) = (Vec::new(), Vec::new());
    for tally in tallies {
        ttft.extend_from_slice(tally.ttft_samples.samples());
        tpot.extend_from_slice(tally.tpot_samples.samples());
    }
    (ttft, tpot)
}

fn verdicts(
    baseline: &(Vec<f64>, Vec<f64>),
    candidate: &(Vec<f64>, Vec<f64>),
    settings: &CompareSettings,
) -> Verdicts {
    Verdicts {
        ttft: compare(&baseline.0, &candidate.0, settings),
        tpot: compare(&baseline.1, &candidate.1, settings),
    }
}

/// Builds one entry's report; `variants` are in configured order, the first is the baseline.
/// A variant with no series yet reports zeros and "not enough data".
pub fn entry_report(
    entry: &str,
    variants: &[VariantData],
    settings: &CompareSettings,
    now: Instant,
) -> EntryReport {
    let window_samples = |series: Option<&Series>| {
        series.map(|s| samples(s.window_tallies(now))).unwrap_or_default()
    };
    let start_samples = |series: Option<&Series>| {
        series.map(|s| samples(std::iter::once(&s.since_start))).unwrap_or_default()
    };
    let baseline = variants.first().and_then(|(_, series, _)| *series);
    let (baseline_window, baseline_start) = (window_samples(baseline), start_samples(baseline));
    let reports = variants
        .iter()
        .enumerate()
        .map(|(index, (name, series, comparison))| {
            let (window, since_start) = match series {
                Some(series) => (
                    summarise(series.window_tallies(now), series.window_span(now)),
                    summarise(std::iter::once(&series.since_start), series.age(now)),
                ),
                None => (
                    summarise(std::iter::empty(), Duration::ZERO),
                    summarise(std::iter::empty(), Duration::ZERO),
                ),
            };
            let is_baseline = index == 0;
            VariantReport {
                variant: name.to_string(),
                window,
                since_start,
                window_vs_baseline: (!is_baseline)
                    .then(|| verdicts(&baseline_window, &window_samples(*series), settings)),
                since_start_vs_baseline: (!is_baseline)
                    .then(|| verdicts(&baseline_start, &start_samples(*series), settings)),
                judgement: (!is_baseline).then(|| match comparison {
                    Some(comparison) => Judgement {
                        verdict: comparison.decision(),
                        pairs: comparison.pairs(),
                        metrics: comparison.verdicts(),
                        more_pairs_needed_for_worse: comparison.more_pairs_needed_for_worse(),
                    },
                    None => Judgement {
                        verdict: Decision::NotEnoughData,
                        pairs: 0,
                        metrics: vec![],
                        more_pairs_needed_for_worse: None,
                    },
                }),
            }
        })
        .collect();
    EntryReport {
        entry: entry.to_string(),
        baseline: variants.first().map(|(name, _, _)| name.to_string()).unwrap_or_default(),
        variants: reports,
    }
}

/// The report as a plain-text table, one block per entry, over the sliding window.
pub fn render_text(report: &Report) -> String {
    let mut out = String::new();
    let cell = |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{v:.1}"));
    for entry in &report.entries {
        let _ = writeln!(
            out,
            "entry {} (baseline {}), last {:.0} s\n{:<16} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9} {:>8} {:>9}",
            entry.entry,
            entry.baseline,
            report.window_seconds,
            "variant",
            "requests",
            "failed",
            "p95 e2e s",
            "ttft p50",
            "ttft p95",
            "tpot p50",
            "qpm",
            "tpm",
            "tok/s",
            "goodput/s"
        );
        for variant in &entry.variants {
            let s = &variant.window;
            let _ = writeln!(
                out,
                "{:<16} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>8.1} {:>9.0} {:>8.1} {:>9.2}",
                variant.variant,
                s.requests,
                s.failures,
                s.e2e_p95_s.map_or("-".to_string(), |v| format!("{v:.3}")),
                cell(s.ttft_p50_ms),
                cell(s.ttft_p95_ms),
                cell(s.tpot_p50_ms),
                s.qpm,
                s.tpm,
                s.tokens_per_s,
                s.goodput_per_s
            );
        }
        for variant in &entry.variants {
            if let Some(judgement) = &variant.judgement {
                let _ = writeln!(out, "  {}", judgement_line(&variant.variant, judgement));
            }
        }
        for variant in &entry.variants {
            if let Some(verdicts) = &variant.window_vs_baseline {
                let _ = writeln!(
                    out,
                    "  window medians, a fixed-sample test for reference only: {} vs {}: TTFT {}; TPOT {}",
                    variant.variant,
                    entry.baseline,
                    describe(&verdicts.ttft),
                    describe(&verdicts.tpot)
                );
            }
        }
        out.push('\n');
    }
    for action in &report.actions {
        let _ = writeln!(
            out,
            "action: {} {} {} weight {} -> {} ({} after {} pairs)",
            action.entry,
            action.variant,
            action.action,
            action.from_weight,
            action.to_weight,
            action.verdict.words(),
            action.pairs
        );
    }
    out
}

/// `keep_alive worse: TTFT p95 x2.10 (interval x1.35..x3.17); ...`: the verdict and the
/// guarded metrics that decide it (all guarded ones when none does yet). A variant found
/// worse by its guarded metrics together, none of them named alone, lists those whose
/// evidence counted, strongest first, with their e-values.
pub fn judgement_line(variant: &str, judgement: &Judgement) -> String {
    let guarded: Vec<&MetricVerdict> = judgement.metrics.iter().filter(|m| m.guarded).collect();
    let named: Vec<&MetricVerdict> =
        guarded.iter().copied().filter(|m| m.decision == judgement.verdict).collect();
    let together = judgement.verdict == Decision::Worse && named.is_empty();
    let deciding: Vec<&MetricVerdict> = match judgement.verdict {
        Decision::Worse if together => {
            let mut counted: Vec<&MetricVerdict> =
                guarded.into_iter().filter(|m| m.worse_evidence > 1.0).collect();
            counted.sort_by(|a, b| b.worse_evidence.total_cmp(&a.worse_evidence));
            counted
        }
        Decision::Worse | Decision::Better => named,
        _ => guarded,
    };
    let metrics: Vec<String> = deciding.iter().map(|m| describe_metric(m, together)).collect();
    // Any guarded metric that reads "worse" decides the whole, and so do their evidences
    // together: name what is closest to a decision, at the rate the evidence has grown.
    let needed = match judgement.verdict {
        Decision::Undecided | Decision::NotEnoughData => {
            let guarded = judgement.metrics.iter().filter(|m| m.guarded);
            let soonest = guarded
                .filter_map(|m| m.more_pairs_needed.map(|n| (n, m.metric.label())))
                .chain(
                    judgement
                        .more_pairs_needed_for_worse
                        .map(|n| (n, "the guarded metrics together")),
                )
                .min_by_key(|&(n, _)| n);
            match soonest {
                Some((n, what)) => {
                    format!(" [{what} may decide in about {n} more requests a side]")
                }
                None => String::new(),
            }
        }
        _ => String::new(),
    };
    format!(
        "{variant} {}{} after {} pairs: {}{needed}",
        judgement.verdict.words(),
        if together { " (guarded metrics together)" } else { "" },
        judgement.pairs,
        metrics.join("; ")
    )
}

/// `TTFT p95 x2.10 (interval x1.35..x3.17, worse)`, with the e-value of "worse" if asked.
fn describe_metric(verdict: &MetricVerdict, with_evidence: bool) -> String {
    let ratio = verdict.metric.quantile().is_some();
    let value = |v: Option<f64>, open: &str| match v {
        Some(v) if ratio => format!("x{v:.2}"),
        Some(v) => format!("{:+.1}pt", v * 100.0),
        None => open.to_string(),
    };
    let estimate = value(verdict.estimate, "-");
    let (low, high) = (value(verdict.low, "0"), value(verdict.high, "inf"));
    let evidence = if with_evidence {
        format!(", evidence {:.0}", verdict.worse_evidence)
    } else {
        String::new()
    };
    let decision = match verdict.decision {
        Decision::Worse if verdict.worse_evidence < verdict.worse_evidence_alone => {
            "worse with the others"
        }
        decision => decision.words(),
    };
    format!("{} {estimate} (interval {low}..{high}, {decision}{evidence})", verdict.metric.label())
}

/// A verdict in words, with its confidence.
pub fn describe(verdict: &Verdict) -> String {
    let pct = |ratio: f64| (ratio - 1.0) * 100.0;
    match verdict {
        Verdict::NotEnoughData { baseline_samples, candidate_samples, needed } => {
            format!(
                "not enough data ({baseline_samples} vs {candidate_samples} samples, need {needed})"
            )
        }
        Verdict::NoDifference { median_ratio, ratio_low, ratio_high, .. } => format!(
            "no difference (median {:+.1}%, 95% CI {:+.1}%..{:+.1}%)",
            pct(*median_ratio),
            pct(*ratio_low),
            pct(*ratio_high)
        ),
        Verdict::Slower { median_ratio, ratio_low, ratio_high, p_value } => format!(
            "slower by {:.1}% (95% CI {:.1}%..{:.1}%, p={p_value:.2e})",
            pct(*median_ratio),
            pct(*ratio_low),
            pct(*ratio_high)
        ),
        Verdict::Faster { median_ratio, ratio_low, ratio_high, p_value } => format!(
            "faster by {:.1}% (95% CI {:.1}%..{:.1}%, p={p_value:.2e})",
            -pct(*median_ratio),
            -pct(*ratio_high),
            -pct(*ratio_low)
        ),
        Verdict::Inconclusive { median_ratio, p_value, .. } => {
            format!("inconclusive (median {:+.1}%, p={p_value:.2})", pct(*median_ratio))
        }
    }
}
