//! The gateway's Prometheus metrics, in a registry it owns (several gateways may share a
//! process, as tests do). Names are a contract: dashboards and the load generator read them.

use std::time::Instant;

use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use super::series::SeriesCache;
use crate::gateway::pick::Picker;

/// vLLM's TTFT bucket bounds, in seconds.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's inter-token bucket bounds (also used for TPOT), in seconds.
pub const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM's end-to-end bucket bounds, in seconds.
pub const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// Gateway overhead bounds, in microseconds.
pub const OVERHEAD_BUCKETS: &[f64] =
    &[10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 25000.0, 100000.0];

/// Prediction error bounds, as a ratio of the measured value.
pub const PREDICTION_ERROR_BUCKETS: &[f64] =
    &[0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0];

const REQUEST_LABELS: &[&str] = &["entry", "strategy", "variant", "replica", "status_class"];
const TOKEN_LABELS: &[&str] = &["entry", "variant", "replica"];

/// Every metric the gateway exports.
pub struct GatewayMetrics {
    registry: Registry,
    pub ttft: HistogramVec,
    pub itl: HistogramVec,
    pub tpot: HistogramVec,
    pub e2e: HistogramVec,
    pub requests: IntCounterVec,
    pub prompt_tokens: IntCounterVec,
    pub completion_tokens: IntCounterVec,
    pub request_errors: IntCounterVec,
    pub classified: IntCounterVec,
    /// Requests per API key label; only fed when `auth.count_by_key` is on.
    pub requests_by_key: IntCounterVec,
    /// Inference requests per served model (`other`: not known to be served).
    pub requests_by_model: IntCounterVec,
    pub overhead: HistogramVec,
    /// `overhead`'s two phases, resolved once.
    overhead_request: Histogram,
    overhead_first_byte: Histogram,
    /// The request-labelled handles, by label combination.
    pub series: SeriesCache,
    pub canary_fallbacks: IntCounterVec,
    pub canary_actions: IntCounterVec,
    /// `|predicted - measured| / measured` of each stream's TTFT under predicted-latency
    /// placement's estimate of its replica.
    pub predicted_ttft_error: HistogramVec,
    replica_in_flight: IntGaugeVec,
    replica_in_flight_prompt_tokens: IntGaugeVec,
    replica_reported_waiting: IntGaugeVec,
    replica_reported_running: IntGaugeVec,
    replica_kv_cache_usage: GaugeVec,
    replica_scrape_age: GaugeVec,
}

fn histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
    labels: &[&str],
) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    let metric = HistogramVec::new(opts, labels).expect("valid histogram");
    registry.register(Box::new(metric.clone())).expect("unique name");
    metric
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let metric = IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter");
    registry.register(Box::new(metric.clone())).expect("unique name");
    metric
}

fn int_gauge(registry: &Registry, name: &str, help: &str) -> IntGaugeVec {
    let metric = IntGaugeVec::new(Opts::new(name, help), &["replica"]).expect("valid gauge");
    registry.register(Box::new(metric.clone())).expect("unique name");
    metric
}

fn gauge(registry: &Registry, name: &str, help: &str) -> GaugeVec {
    let metric = GaugeVec::new(Opts::new(name, help), &["replica"]).expect("valid gauge");
    registry.register(Box::new(metric.clone())).expect("unique name");
    metric
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl GatewayMetrics {
    pub fn new() -> Self {
        let r = Registry::new();
        let overhead = histogram(
            &r,
            "laneway_overhead_microseconds",
            "Time the gateway adds, by phase",
            OVERHEAD_BUCKETS,
            &["phase"],
        );
        Self {
            ttft: histogram(
                &r,
                "laneway_ttft_seconds",
                "Time to first token (first event with choices)",
                TTFT_BUCKETS,
                REQUEST_LABELS,
            ),
            itl: histogram(
                &r,
                "laneway_itl_seconds",
                "Gap between consecutive token events",
                ITL_BUCKETS,
                REQUEST_LABELS,
            ),
            tpot: histogram(
                &r,
                "laneway_tpot_seconds",
                "(E2E - TTFT) / (completion tokens - 1)",
                ITL_BUCKETS,
                REQUEST_LABELS,
            ),
            e2e: histogram(
                &r,
                "laneway_e2e_seconds",
                "Request received to last response byte",
                E2E_BUCKETS,
                REQUEST_LABELS,
            ),
            requests: counter(
                &r,
                "laneway_requests_total",
                "Proxied requests, counted when the response ends",
                REQUEST_LABELS,
            ),
            prompt_tokens: counter(
                &r,
                "laneway_prompt_tokens_total",
                "Prompt tokens (usage, else estimated)",
                TOKEN_LABELS,
            ),
            completion_tokens: counter(
                &r,
                "laneway_completion_tokens_total",
                "Completion tokens (usage, else counted events)",
                TOKEN_LABELS,
            ),
            request_errors: counter(
                &r,
                "laneway_request_errors_total",
                "Requests that failed, by kind",
                &["entry", "kind"],
            ),
            classified: counter(
                &r,
                "laneway_classified_total",
                "Requests classified, by how the entry was decided",
                &["entry", "method"],
            ),
            requests_by_key: counter(
                &r,
                "laneway_requests_by_key_total",
                "Authenticated requests per API key (label: first 12 hex digits of its SHA-256)",
                &["key"],
            ),
            requests_by_model: counter(
                &r,
                "laneway_requests_by_model_total",
                "Inference requests per model the replicas serve (other: not known to be served)",
                &["model"],
            ),
            overhead_request: overhead.with_label_values(&[OverheadPhase::Request.as_str()]),
            overhead_first_byte: overhead.with_label_values(&[OverheadPhase::FirstByte.as_str()]),
            overhead,
            series: SeriesCache::default(),
            canary_fallbacks: counter(
                &r,
                "laneway_canary_fallbacks_total",
                "Requests whose variant's pool had no available replica, served by the entry's first variant",
                &["entry", "variant"],
            ),
            canary_actions: counter(
                &r,
                "laneway_canary_actions_total",
                "Weight changes made on canary verdicts (action: rollback or promote)",
                &["entry", "variant", "action"],
            ),
            predicted_ttft_error: histogram(
                &r,
                "laneway_predicted_ttft_error_ratio",
                "|predicted - measured| / measured TTFT of each stream, by replica",
                PREDICTION_ERROR_BUCKETS,
                &["replica"],
            ),
            replica_in_flight: int_gauge(
                &r,
                "laneway_replica_in_flight",
                "Requests in flight (until the body ends)",
            ),
            replica_in_flight_prompt_tokens: int_gauge(
                &r,
                "laneway_replica_in_flight_prompt_tokens",
                "Prompt tokens in flight",
            ),
            replica_reported_waiting: int_gauge(
                &r,
                "laneway_replica_reported_waiting",
                "vllm:num_requests_waiting, last scrape",
            ),
            replica_reported_running: int_gauge(
                &r,
                "laneway_replica_reported_running",
                "vllm:num_requests_running, last scrape",
            ),
            replica_kv_cache_usage: gauge(
                &r,
                "laneway_replica_kv_cache_usage",
                "vllm:kv_cache_usage_perc, last scrape",
            ),
            replica_scrape_age: gauge(
                &r,
                "laneway_replica_scrape_age_seconds",
                "Age of the last successful scrape (-1: never)",
            ),
            registry: r,
        }
    }

    /// The registry, for metrics other modules own.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts a failed request.
    pub fn record_error(&self, entry: &str, kind: &str) {
        self.request_errors.with_label_values(&[entry, kind]).inc();
    }

    /// Records one overhead sample in microseconds.
    pub fn record_overhead(&self, phase: OverheadPhase, since: Instant) {
        let micros = since.elapsed().as_secs_f64() * 1e6;
        match phase {
            OverheadPhase::Request => self.overhead_request.observe(micros),
            OverheadPhase::FirstByte => self.overhead_first_byte.observe(micros),
        }
    }

    /// The text exposition, with the per-replica gauges refreshed from the live counters.
    pub fn render(&self, picker: &Picker) -> String {
        let now = Instant::now();
        for replica in picker.snapshot().iter() {
            let name = [replica.name.as_str()];
            let load = &replica.load;
            self.replica_in_flight.with_label_values(&name).set(load.in_flight() as i64);
            self.replica_in_flight_prompt_tokens
                .with_label_values(&name)
                .set(load.in_flight_prompt_tokens() as i64);
            let reported = |a: &std::sync::atomic::AtomicU64| {
                a.load(std::sync::atomic::Ordering::Relaxed) as i64
            };
            self.replica_reported_waiting
                .with_label_values(&name)
                .set(reported(&load.reported_waiting));
            self.replica_reported_running
                .with_label_values(&name)
                .set(reported(&load.reported_running));
            self.replica_kv_cache_usage.with_label_values(&name).set(load.kv_cache_usage());
            let age = load.scrape_age(picker.epoch, now).map_or(-1.0, |age| age.as_secs_f64());
            self.replica_scrape_age.with_label_values(&name).set(age);
        }
        let mut buffer = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buffer)
            .expect("text encoding cannot fail");
        String::from_utf8(buffer).expect("exposition is UTF-8")
    }
}

/// The phases `laneway_overhead_microseconds` is labelled by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverheadPhase {
    /// From the request's arrival to its send to the replica.
    Request,
    /// From the replica's response head to the client's.
    FirstByte,
}

impl OverheadPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::FirstByte => "first_byte",
        }
    }
}

/// `2xx`, `4xx`, `5xx` from a status code.
pub fn status_class(status: http::StatusCode) -> &'static str {
    match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}
