//! The figures of one target's run, computed from its records with HDR histograms (three
//! significant digits, microsecond units) as the field defines them: latency percentiles
//! over successful requests, throughput over the run's wall time, failures by kind, and
//! goodput against the given SLOs.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::record::RequestRecord;

/// Service-level objectives a request must all meet to count towards goodput.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Slo {
    #[serde(serialize_with = "option_ms")]
    pub ttft: Option<Duration>,
    #[serde(serialize_with = "option_ms")]
    pub tpot: Option<Duration>,
    #[serde(serialize_with = "option_ms")]
    pub e2el: Option<Duration>,
}

impl Slo {
    pub fn is_set(&self) -> bool {
        self.ttft.is_some() || self.tpot.is_some() || self.e2el.is_some()
    }

    /// Whether a successful request met every objective that is set.
    pub fn is_met_by(&self, record: &RequestRecord) -> bool {
        let within = |limit: Option<Duration>, value: Option<Duration>| match (limit, value) {
            (None, _) => true,
            (Some(limit), Some(value)) => value <= limit,
            (Some(_), None) => false,
        };
        record.outcome.is_success()
            && within(self.ttft, record.ttft)
            // A one-token output has no TPOT; it cannot miss a TPOT objective.
            && (self.tpot.is_none() || record.tpot().is_none_or(|tpot| Some(tpot) <= self.tpot))
            && within(self.e2el, Some(record.e2e))
    }
}

/// Percentiles of one latency figure, in milliseconds with microsecond resolution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// Everything the report shows for one target.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    pub requests: u64,
    pub successes: u64,
    pub failures: u64,
    pub failures_by_kind: BTreeMap<&'static str, u64>,
    /// Wall time of the target's rounds, added up.
    pub elapsed_s: f64,
    /// Requests sent per second. Open loop: over the time from each round's start to its
    /// last send (the achieved arrival rate; a slow drain does not lower it). Closed loop:
    /// over the whole wall time, as sends follow completions there.
    pub achieved_rate: f64,
    /// Requests whose send a concurrency cap delayed by more than a millisecond.
    pub late_requests: u64,
    pub ttft: Percentiles,
    pub tpot: Percentiles,
    pub itl: Percentiles,
    pub e2e: Percentiles,
    /// Successful requests per minute.
    pub qpm: f64,
    /// Prompt plus completion tokens of successful requests, per minute.
    pub tpm: f64,
    pub total_tokens_per_s: f64,
    pub completion_tokens_per_s: f64,
    /// Successful requests per second that met every SLO (none when no SLO was given).
    pub goodput_rps: Option<f64>,
    /// Fewest and most choice chunks a successful stream carried.
    pub chunks_min: u64,
    pub chunks_max: u64,
    /// The target's reported prefix-cache hit ratio: `usage.prompt_tokens_details
    /// .cached_tokens` over prompt tokens, for the successes that reported it (none when
    /// none did).
    pub prefix_cache_hit_ratio: Option<f64>,
}

/// A histogram wide enough for an hour in microseconds.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_max(3_600_000_000, 3).expect("static bounds are valid")
}

fn micros(duration: Duration) -> u64 {
    duration.as_micros().min(3_600_000_000) as u64
}

fn percentiles(histogram: &Histogram<u64>) -> Percentiles {
    if histogram.is_empty() {
        return Percentiles::default();
    }
    let ms = |quantile: f64| histogram.value_at_quantile(quantile) as f64 / 1000.0;
    Percentiles {
        count: histogram.len(),
        mean_ms: histogram.mean() / 1000.0,
        p50_ms: ms(0.5),
        p90_ms: ms(0.9),
        p95_ms: ms(0.95),
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        max_ms: histogram.max() as f64 / 1000.0,
    }
}

/// Summarises the records of one target measured over `elapsed` of wall time.
pub fn summarise(
    records: &[RequestRecord],
    elapsed: Duration,
    slo: &Slo,
    open_loop: bool,
) -> Summary {
    let (mut ttft, mut tpot, mut itl, mut e2e) =
        (histogram(), histogram(), histogram(), histogram());
    let mut summary = Summary { requests: records.len() as u64, ..Summary::default() };
    let (mut prompt_tokens, mut completion_tokens, mut good) = (0u64, 0u64, 0u64);
    // Over the successes whose usage said how much of the prompt was cached.
    let (mut cached_tokens, mut cache_prompt_tokens) = (0u64, 0u64);
    let mut last_send_by_round: BTreeMap<u32, Duration> = BTreeMap::new();
    for record in records {
        let last_send = last_send_by_round.entry(record.round).or_default();
        *last_send = (*last_send).max(record.sent_at);
        if record.sent_at.saturating_sub(record.scheduled_at) > Duration::from_millis(1) {
            summary.late_requests += 1;
        }
        if !record.outcome.is_success() {
            summary.failures += 1;
            *summary.failures_by_kind.entry(record.outcome.label()).or_default() += 1;
            continue;
        }
        summary.chunks_min = if summary.successes == 0 {
            record.chunks
        } else {
            summary.chunks_min.min(record.chunks)
        };
        summary.chunks_max = summary.chunks_max.max(record.chunks);
        summary.successes += 1;
        prompt_tokens += record.prompt_tokens;
        completion_tokens += record.output_tokens;
        if let Some(cached) = record.cached_tokens {
            cached_tokens += cached;
            cache_prompt_tokens += record.prompt_tokens;
        }
        e2e.saturating_record(micros(record.e2e));
        if let Some(value) = record.ttft {
            ttft.saturating_record(micros(value));
        }
        if let Some(value) = record.tpot() {
            tpot.saturating_record(micros(value));
        }
        for gap in &record.itl {
            itl.saturating_record(micros(*gap));
        }
        if slo.is_met_by(record) {
            good += 1;
        }
    }
    let seconds = elapsed.as_secs_f64().max(1e-9);
    summary.elapsed_s = elapsed.as_secs_f64();
    let sending: Duration = if open_loop { last_send_by_round.values().sum() } else { elapsed };
    summary.achieved_rate = summary.requests as f64 / sending.as_secs_f64().max(1e-9);
    summary.ttft = percentiles(&ttft);
    summary.tpot = percentiles(&tpot);
    summary.itl = percentiles(&itl);
    summary.e2e = percentiles(&e2e);
    summary.qpm = summary.successes as f64 / seconds * 60.0;
    summary.total_tokens_per_s = (prompt_tokens + completion_tokens) as f64 / seconds;
    summary.tpm = summary.total_tokens_per_s * 60.0;
    summary.completion_tokens_per_s = completion_tokens as f64 / seconds;
    summary.goodput_rps = slo.is_set().then(|| good as f64 / seconds);
    summary.prefix_cache_hit_ratio =
        (cache_prompt_tokens > 0).then(|| cached_tokens as f64 / cache_prompt_tokens as f64);
    summary
}

fn option_ms<S: serde::Serializer>(
    value: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => serializer.serialize_some(&(value.as_secs_f64() * 1000.0)),
        None => serializer.serialize_none(),
    }
}
