//! The replica's Prometheus metrics, with vLLM's names, labels and bucket bounds, in a
//! registry of its own so that several simulated replicas can live in one process.

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts, Registry,
    TextEncoder,
};

use super::clock::SimTime;

/// vLLM's buckets for prompt lengths (powers of two up to its 16k-token models' limit).
const PROMPT_TOKEN_BUCKETS: &[f64] =
    &[1.0, 8.0, 64.0, 256.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0, 65536.0];
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const INTER_TOKEN_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// Simulated times of a finished request.
#[derive(Debug, Clone, Copy)]
pub struct FinishedTiming {
    pub arrival: SimTime,
    /// The first event of a stream, or the first token of a complete response.
    pub first_output: SimTime,
    pub last_token: SimTime,
    /// The last token's event left, or the complete body was built.
    pub finished: SimTime,
    pub tokens: u64,
}

/// Every metric one replica exports. Latencies are observed in simulated seconds.
#[derive(Debug)]
pub struct SimMetrics {
    registry: Registry,
    pub num_requests_running: Gauge,
    pub num_requests_waiting: Gauge,
    pub kv_cache_usage_perc: Gauge,
    /// The older name of `kv_cache_usage_perc`, still scraped by some routers.
    pub gpu_cache_usage_perc: Gauge,
    pub prompt_tokens: IntCounter,
    pub generation_tokens: IntCounter,
    /// Prompt tokens looked up in the prefix cache (every prompt token of every admitted
    /// request while caching is on).
    pub prefix_cache_queries: IntCounter,
    /// Of those, the tokens found cached.
    pub prefix_cache_hits: IntCounter,
    pub request_success: IntCounterVec,
    pub time_to_first_token: Histogram,
    /// Per finished request, from its first scheduling to its first token (vLLM's
    /// `request_prefill_time_seconds`: queueing excluded), in wall-clock seconds.
    pub request_prefill_time: Histogram,
    /// Per finished request, its prompt tokens.
    pub request_prompt_tokens: Histogram,
    /// Per finished request, the prompt tokens it computed (not found cached).
    pub request_prefill_kv_computed_tokens: Histogram,
    pub inter_token_latency: Histogram,
    pub request_time_per_output_token: Histogram,
    pub e2e_request_latency: Histogram,
}

impl SimMetrics {
    pub fn new(model_name: &str) -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let opts = |name: &str, help: &str| {
            Opts::new(name, help).const_label("model_name", model_name).const_label("engine", "0")
        };
        let histogram = |name: &str, help: &str, buckets: &[f64]| {
            Histogram::with_opts(HistogramOpts::from(opts(name, help)).buckets(buckets.to_vec()))
        };
        let metrics = Self {
            num_requests_running: Gauge::with_opts(opts(
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
            ))?,
            num_requests_waiting: Gauge::with_opts(opts(
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
            ))?,
            kv_cache_usage_perc: Gauge::with_opts(opts(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
            ))?,
            gpu_cache_usage_perc: Gauge::with_opts(opts(
                "vllm:gpu_cache_usage_perc",
                "GPU KV-cache usage. 1 means 100 percent usage.",
            ))?,
            prompt_tokens: IntCounter::with_opts(opts(
                "vllm:prompt_tokens_total",
                "Number of prefill tokens processed.",
            ))?,
            generation_tokens: IntCounter::with_opts(opts(
                "vllm:generation_tokens_total",
                "Number of generation tokens processed.",
            ))?,
            prefix_cache_queries: IntCounter::with_opts(opts(
                "vllm:prefix_cache_queries_total",
                "Prefix cache queries, in terms of number of queried tokens.",
            ))?,
            prefix_cache_hits: IntCounter::with_opts(opts(
                "vllm:prefix_cache_hits_total",
                "Prefix cache hits, in terms of number of cached tokens.",
            ))?,
            request_success: IntCounterVec::new(
                opts("vllm:request_success_total", "Count of successfully processed requests."),
                &["finished_reason"],
            )?,
            time_to_first_token: histogram(
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                TTFT_BUCKETS,
            )?,
            request_prefill_time: histogram(
                "vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.",
                TTFT_BUCKETS,
            )?,
            request_prompt_tokens: histogram(
                "vllm:request_prompt_tokens",
                "Number of prefill tokens processed.",
                PROMPT_TOKEN_BUCKETS,
            )?,
            request_prefill_kv_computed_tokens: histogram(
                "vllm:request_prefill_kv_computed_tokens",
                "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
                PROMPT_TOKEN_BUCKETS,
            )?,
            inter_token_latency: histogram(
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                INTER_TOKEN_BUCKETS,
            )?,
            request_time_per_output_token: histogram(
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                INTER_TOKEN_BUCKETS,
            )?,
            e2e_request_latency: histogram(
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                E2E_BUCKETS,
            )?,
            registry,
        };
        metrics.register_all()?;
        Ok(metrics)
    }

    fn register_all(&self) -> Result<(), prometheus::Error> {
        let registry = &self.registry;
        registry.register(Box::new(self.num_requests_running.clone()))?;
        registry.register(Box::new(self.num_requests_waiting.clone()))?;
        registry.register(Box::new(self.kv_cache_usage_perc.clone()))?;
        registry.register(Box::new(self.gpu_cache_usage_perc.clone()))?;
        registry.register(Box::new(self.prompt_tokens.clone()))?;
        registry.register(Box::new(self.generation_tokens.clone()))?;
        registry.register(Box::new(self.prefix_cache_queries.clone()))?;
        registry.register(Box::new(self.prefix_cache_hits.clone()))?;
        registry.register(Box::new(self.request_success.clone()))?;
        registry.register(Box::new(self.time_to_first_token.clone()))?;
        registry.register(Box::new(self.request_prefill_time.clone()))?;
        registry.register(Box::new(self.request_prompt_tokens.clone()))?;
        registry.register(Box::new(self.request_prefill_kv_computed_tokens.clone()))?;
        registry.register(Box::new(self.inter_token_latency.clone()))?;
        registry.register(Box::new(self.request_time_per_output_token.clone()))?;
        registry.register(Box::new(self.e2e_request_latency.clone()))?;
        Ok(())
    }

    /// Records a request that produced all its `tokens`: E2E from `arrival` to `finished`,
    /// TPOT from its first output to its last token, and a success ("length").
    pub fn observe_finished(&self, timing: FinishedTiming) {
        let FinishedTiming { arrival, first_output, last_token, finished, tokens } = timing;
        self.e2e_request_latency.observe(finished.seconds_since(arrival));
        if tokens > 1 {
            let per_token = last_token.seconds_since(first_output) / (tokens - 1) as f64;
            self.request_time_per_output_token.observe(per_token);
        }
        self.request_success.with_label_values(&["length"]).inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        let encoder = TextEncoder::new();
        if let Err(error) = encoder.encode(&self.registry.gather(), &mut buffer) {
            tracing::warn!(%error, "cannot encode metrics");
        }
        String::from_utf8(buffer).unwrap_or_default()
    }
}
