//! Per-request latency and token bookkeeping: fed a copy of the response bytes as they pass,
//! it derives TTFT, every inter-token gap, TPOT, E2E and token counts the way
//! `vllm bench serve` defines them, and records them once when the response ends.

use std::sync::Arc;
use std::time::Instant;

use prometheus::Histogram;

use super::metrics::GatewayMetrics;
use crate::gateway::entry::{Entry, Strategy};
use crate::openai::sse::{SseEvent, SseScanner, Usage};

/// Largest non-streamed JSON response kept to read its `usage`.
const MAX_JSON_BYTES: usize = 4 << 20;

/// The variant label until canaries exist.
pub const DEFAULT_VARIANT: &str = "default";

/// What the response body is, which decides what can be measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `text/event-stream` from an inference path: tokens are events.
    Stream,
    /// A JSON inference response: usage is read at the end.
    Json,
    /// Anything else (debug entry, other paths): E2E only.
    Opaque,
}

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Complete,
    /// The replica's body failed mid-way.
    UpstreamReset,
    /// The client went away before the end.
    ClientGone,
}

/// Labels shared by every sample of one request.
#[derive(Debug, Clone)]
pub struct RequestLabels {
    pub entry: Entry,
    pub strategy: Strategy,
    pub replica: String,
    pub status_class: &'static str,
}

/// Observes one response.
pub struct Recorder {
    metrics: Arc<GatewayMetrics>,
    labels: RequestLabels,
    kind: BodyKind,
    received_at: Instant,
    estimated_prompt_tokens: u64,
    scanner: SseScanner,
    json: Vec<u8>,
    itl: Option<Histogram>,
    first_token_at: Option<Instant>,
    last_token_at: Option<Instant>,
    token_events: u64,
    usage: Option<Usage>,
    finished: bool,
}

impl Recorder {
    pub fn new(
        metrics: Arc<GatewayMetrics>,
        labels: RequestLabels,
        kind: BodyKind,
        received_at: Instant,
        estimated_prompt_tokens: u64,
    ) -> Self {
        Self {
            metrics,
            labels,
            kind,
            received_at,
            estimated_prompt_tokens,
            scanner: SseScanner::new(),
            json: Vec::new(),
            itl: None,
            first_token_at: None,
            last_token_at: None,
            token_events: 0,
            usage: None,
            finished: false,
        }
    }

    pub fn kind(&self) -> BodyKind {
        self.kind
    }

    fn label_values(&self) -> [&str; 5] {
        [
            self.labels.entry.as_str(),
            self.labels.strategy.as_str(),
            DEFAULT_VARIANT,
            &self.labels.replica,
            self.labels.status_class,
        ]
    }

    /// Takes note of bytes that just passed to the client.
    pub fn on_data(&mut self, bytes: &[u8], now: Instant) {
        match self.kind {
            BodyKind::Opaque => {}
            BodyKind::Json => {
                if self.json.len() + bytes.len() <= MAX_JSON_BYTES {
                    self.json.extend_from_slice(bytes);
                }
            }
            BodyKind::Stream => {
                let mut scanner = std::mem::take(&mut self.scanner);
                scanner.feed(bytes, |event| self.on_event(event, now));
                self.scanner = scanner;
            }
        }
    }

    fn on_event(&mut self, event: SseEvent, now: Instant) {
        let SseEvent::Data { has_choices, usage, .. } = event else {
            return;
        };
        if let Some(usage) = usage {
            self.usage = Some(usage);
        }
        if !has_choices {
            return;
        }
        self.token_events += 1;
        match self.last_token_at {
            None => {
                self.first_token_at = Some(now);
                let ttft = now.duration_since(self.received_at).as_secs_f64();
                self.metrics.ttft.with_label_values(&self.label_values()).observe(ttft);
            }
            Some(previous) => {
                if self.itl.is_none() {
                    self.itl = Some(self.metrics.itl.with_label_values(&self.label_values()));
                }
                let gap = now.duration_since(previous).as_secs_f64();
                self.itl.as_ref().expect("set above").observe(gap);
            }
        }
        self.last_token_at = Some(now);
    }

    /// Records the request's figures; later calls do nothing.
    pub fn finish(&mut self, outcome: Outcome, now: Instant) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        if self.kind == BodyKind::Json {
            self.usage = usage_of_json(&self.json);
        }
        let entry = self.labels.entry.as_str();
        match outcome {
            Outcome::Complete => {}
            Outcome::UpstreamReset => self.metrics.record_error(entry, "upstream_reset"),
            Outcome::ClientGone => self.metrics.record_error(entry, "client_disconnect"),
        }
        let labels = self.label_values();
        let e2e = now.duration_since(self.received_at);
        self.metrics.e2e.with_label_values(&labels).observe(e2e.as_secs_f64());
        self.metrics.requests.with_label_values(&labels).inc();
        if self.kind == BodyKind::Opaque {
            return;
        }
        let completion_tokens = self.usage.map_or(self.token_events, |u| u.completion_tokens);
        let prompt_tokens = self.usage.map_or(self.estimated_prompt_tokens, |u| u.prompt_tokens);
        let token_labels = [entry, DEFAULT_VARIANT, self.labels.replica.as_str()];
        self.metrics.prompt_tokens.with_label_values(&token_labels).inc_by(prompt_tokens);
        self.metrics.completion_tokens.with_label_values(&token_labels).inc_by(completion_tokens);
        if let (Some(first), Some(last)) = (self.first_token_at, self.last_token_at)
            && completion_tokens > 1
            && outcome == Outcome::Complete
        {
            let tpot = last.duration_since(first).as_secs_f64() / (completion_tokens - 1) as f64;
            self.metrics.tpot.with_label_values(&labels).observe(tpot);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Dropped before the end: hyper drops the body when the client goes away.
        self.finish(Outcome::ClientGone, Instant::now());
    }
}

fn usage_of_json(body: &[u8]) -> Option<Usage> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        usage: Option<Usage>,
    }
    serde_json::from_slice::<Envelope>(body).ok()?.usage
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn recorder(metrics: &Arc<GatewayMetrics>, kind: BodyKind, at: Instant) -> Recorder {
        let labels = RequestLabels {
            entry: Entry::Short,
            strategy: Strategy::ForceClose,
            replica: "r0".into(),
            status_class: "2xx",
        };
        Recorder::new(metrics.clone(), labels, kind, at, 11)
    }

    fn labels() -> [&'static str; 5] {
        ["short", "force_close", "default", "r0", "2xx"]
    }

    #[test]
    fn a_stream_yields_ttft_one_gap_per_token_and_usage_tokens() {
        let metrics = Arc::new(GatewayMetrics::new());
        let start = Instant::now();
        let mut recorder = recorder(&metrics, BodyKind::Stream, start);
        let at = |ms| start + Duration::from_millis(ms);
        recorder
            .on_data(b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n", at(100));
        recorder.on_data(
            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"cho",
            at(120),
        );
        recorder.on_data(b"ices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n", at(140));
        recorder.on_data(
            b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n",
            at(150),
        );
        recorder.finish(Outcome::Complete, at(150));
        let ttft = metrics.ttft.with_label_values(&labels());
        assert_eq!(ttft.get_sample_count(), 1);
        assert!((ttft.get_sample_sum() - 0.1).abs() < 1e-9);
        let itl = metrics.itl.with_label_values(&labels());
        assert_eq!(itl.get_sample_count(), 2);
        let tpot = metrics.tpot.with_label_values(&labels());
        // (140 ms - 100 ms) / (3 - 1)
        assert!((tpot.get_sample_sum() - 0.02).abs() < 1e-9);
        let tokens = ["short", "default", "r0"];
        assert_eq!(metrics.prompt_tokens.with_label_values(&tokens).get(), 7);
        assert_eq!(metrics.completion_tokens.with_label_values(&tokens).get(), 3);
        drop(recorder);
        assert_eq!(metrics.requests.with_label_values(&labels()).get(), 1);
        assert_eq!(
            metrics.request_errors.with_label_values(&["short", "client_disconnect"]).get(),
            0
        );
    }

    #[test]
    fn a_json_response_reads_usage_and_a_dropped_one_counts_a_disconnect() {
        let metrics = Arc::new(GatewayMetrics::new());
        let start = Instant::now();
        let mut json = recorder(&metrics, BodyKind::Json, start);
        json.on_data(b"{\"choices\":[],\"usage\":{\"prompt_tokens\":5,", start);
        json.on_data(b"\"completion_tokens\":9}}", start);
        json.finish(Outcome::Complete, start);
        let tokens = ["short", "default", "r0"];
        assert_eq!(metrics.completion_tokens.with_label_values(&tokens).get(), 9);
        drop(recorder(&metrics, BodyKind::Stream, start));
        assert_eq!(
            metrics.request_errors.with_label_values(&["short", "client_disconnect"]).get(),
            1
        );
        // Without usage, the prompt estimate is used.
        assert_eq!(metrics.prompt_tokens.with_label_values(&tokens).get(), 5 + 11);
    }
}
