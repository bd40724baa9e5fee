//! The report: the field's table for each target, then every figure as a ratio to the
//! first target (Markdown, so it reads in a terminal and pastes into a README), the
//! overhead mode's microsecond table, and the `--json` document.

use std::fmt::Write;

use serde::Serialize;

use super::record::RequestRecord;
use super::stats::Summary;

/// One measured target, as reported.
#[derive(Debug, Serialize)]
pub struct TargetReport {
    pub name: String,
    pub url: String,
    pub summary: Summary,
    pub records: Vec<RequestRecord>,
}

/// The figures of the field's table, in its order: (heading, value, higher is better).
fn streaming_columns(summary: &Summary) -> [(&'static str, f64, bool); 12] {
    [
        ("P95 latency (s)", summary.e2e.p95_ms / 1000.0, false),
        ("TTFT p50 (ms)", summary.ttft.p50_ms, false),
        ("TTFT p95 (ms)", summary.ttft.p95_ms, false),
        ("TPOT p50 (ms)", summary.tpot.p50_ms, false),
        ("ITL p99 (ms)", summary.itl.p99_ms, false),
        ("QPM", summary.qpm, true),
        ("TPM", summary.tpm, true),
        ("total tok/s", summary.total_tokens_per_s, true),
        ("completion tok/s", summary.completion_tokens_per_s, true),
        ("goodput (req/s)", summary.goodput_rps.unwrap_or(f64::NAN), true),
        ("achieved req/s", summary.achieved_rate, true),
        ("cache hit %", summary.prefix_cache_hit_ratio.map_or(f64::NAN, |r| r * 100.0), true),
    ]
}

fn overhead_columns(summary: &Summary) -> [(&'static str, f64, bool); 7] {
    let us = |ms: f64| ms * 1000.0;
    [
        ("p50 (us)", us(summary.e2e.p50_ms), false),
        ("p90 (us)", us(summary.e2e.p90_ms), false),
        ("p99 (us)", us(summary.e2e.p99_ms), false),
        ("p99.9 (us)", us(summary.e2e.p999_ms), false),
        ("max (us)", us(summary.e2e.max_ms), false),
        ("achieved req/s", summary.achieved_rate, true),
        ("ok req/s", summary.successes as f64 / summary.elapsed_s.max(1e-9), true),
    ]
}

fn format_value(value: f64) -> String {
    if value.is_nan() {
        "-".to_string()
    } else if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

fn failures_text(summary: &Summary) -> String {
    if summary.failures == 0 {
        return "0".to_string();
    }
    let kinds: Vec<String> =
        summary.failures_by_kind.iter().map(|(kind, count)| format!("{kind} {count}")).collect();
    format!("{} ({})", summary.failures, kinds.join(", "))
}

fn table<const N: usize>(
    targets: &[TargetReport],
    columns: impl Fn(&Summary) -> [(&'static str, f64, bool); N],
) -> String {
    let mut out = String::new();
    let Some(first) = targets.first() else { return out };
    let headings: Vec<&str> = columns(&first.summary).iter().map(|column| column.0).collect();
    let _ = writeln!(out, "| target | successes | failures | {} |", headings.join(" | "));
    let _ = writeln!(out, "|---|---:|---|{}", "---:|".repeat(N));
    for target in targets {
        let values: Vec<String> =
            columns(&target.summary).iter().map(|column| format_value(column.1)).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            target.name,
            target.summary.successes,
            failures_text(&target.summary),
            values.join(" | ")
        );
    }
    if targets.len() > 1 {
        let _ = writeln!(out, "\nRatios to `{}` (lower is better for latencies):\n", first.name);
        let _ = writeln!(out, "| target | {} |", headings.join(" | "));
        let _ = writeln!(out, "|---|{}", "---:|".repeat(N));
        let base = columns(&first.summary);
        for target in &targets[1..] {
            let ratios: Vec<String> = columns(&target.summary)
                .iter()
                .zip(base.iter())
                .map(|(value, base)| format_ratio(value.1, base.1))
                .collect();
            let _ = writeln!(out, "| {} | {} |", target.name, ratios.join(" | "));
        }
    }
    out
}

fn format_ratio(value: f64, base: f64) -> String {
    if value.is_nan() || base.is_nan() || base == 0.0 {
        "-".to_string()
    } else {
        format!("{:.2}x", value / base)
    }
}

/// The field's table for streamed workloads, with ratios to the first target.
pub fn streaming_table(targets: &[TargetReport]) -> String {
    table(targets, streaming_columns)
}

/// The overhead mode's table: latency percentiles in microseconds, then what each target
/// adds over the first one (the direct connection, when run as documented).
pub fn overhead_table(targets: &[TargetReport]) -> String {
    let mut out = table(targets, overhead_columns);
    if let Some(first) = targets.first()
        && targets.len() > 1
    {
        let _ = writeln!(out, "\nAdded over `{}`:\n", first.name);
        let _ = writeln!(out, "| target | p50 added (us) | p99 added (us) |");
        let _ = writeln!(out, "|---|---:|---:|");
        for target in &targets[1..] {
            let added =
                |pick: fn(&Summary) -> f64| (pick(&target.summary) - pick(&first.summary)) * 1000.0;
            let _ = writeln!(
                out,
                "| {} | {:.0} | {:.0} |",
                target.name,
                added(|s| s.e2e.p50_ms),
                added(|s| s.e2e.p99_ms)
            );
        }
    }
    out
}
