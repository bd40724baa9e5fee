//! Per-request latency and token bookkeeping: fed a copy of the response bytes as they pass,
//! it derives TTFT, every inter-token gap, TPOT, E2E and token counts the way
//! `vllm bench serve` defines them, and records them once when the response ends (in the
//! Prometheus metrics, and for inference requests as a canary outcome).

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::access_log::{self, AccessRecord};
use super::json_usage::JsonBody;
use super::metrics::GatewayMetrics;
use super::metrics::status_class;
use super::series::{RequestSeries, ResponseLabels};
use crate::canary::{self, CanaryRecorder, Slo};
use crate::gateway::config::Entry;
use crate::gateway::context::RequestCtx;
use crate::gateway::pick::Replica;
use crate::gateway::pick::predict::LatencyProbe;
use crate::gateway::pick::prefix::PrefixFeedback;
use crate::openai::sse::{SseEvent, SseScanner, Usage};

/// The variant label of an entry without configured variants.
pub const DEFAULT_VARIANT: &str = crate::gateway::config::DEFAULT_VARIANT_NAME;

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
    /// The gateway ended it: idle gap, total time or shutdown deadline.
    CutShort,
}

/// Observes one response.
pub struct Recorder {
    metrics: Arc<GatewayMetrics>,
    /// The request: its labels, its tenant's hold and what its access line says.
    ctx: RequestCtx,
    /// The replica that answered, and how.
    replica: Arc<Replica>,
    status: http::StatusCode,
    kind: BodyKind,
    scanner: SseScanner,
    json: JsonBody,
    /// The metric handles of the response's labels.
    series: Arc<RequestSeries>,
    first_token_at: Option<Instant>,
    last_token_at: Option<Instant>,
    token_events: u64,
    usage: Option<Usage>,
    /// When the stream's `data: [DONE]` passed to the client: its answer is whole, even if
    /// the client leaves before the upstream body's own end (the official client closes
    /// right after `[DONE]`, before the chunked terminator arrives).
    done_at: Option<Instant>,
    finished: bool,
    canary: Option<CanaryRecorder>,
    /// A `prefix_aware` prediction: released at the first token, checked at the end.
    prefix: Option<PrefixFeedback>,
    /// The replica that served it and the SLO it is judged by, for capacity learning.
    capacity: Option<(Arc<Replica>, Slo)>,
    placement: Option<LatencyProbe>,
}

impl Recorder {
    /// Observes `ctx`'s response from `replica`, which answered `status`.
    pub fn new(
        metrics: Arc<GatewayMetrics>,
        ctx: RequestCtx,
        (replica, status): (Arc<Replica>, http::StatusCode),
        kind: BodyKind,
    ) -> Self {
        let labels = ResponseLabels {
            entry: ctx.entry,
            strategy: ctx.strategy,
            variant: &ctx.variant,
            replica: &replica.name,
            status_class: status_class(status),
        };
        let series = metrics.series.get(&metrics, labels);
        Self {
            metrics,
            ctx,
            replica,
            status,
            kind,
            scanner: SseScanner::new(),
            json: JsonBody::default(),
            series,
            first_token_at: None,
            last_token_at: None,
            token_events: 0,
            usage: None,
            done_at: None,
            finished: false,
            canary: None,
            capacity: None,
            prefix: None,
            placement: None,
        }
    }

    /// Feeds this stream's TTFT and TPOT to the replica's latency estimate.
    pub fn set_placement(&mut self, placement: LatencyProbe) {
        self.placement = Some(placement);
    }

    /// Also reports the finished request to the canary comparison.
    pub fn set_canary(&mut self, canary: CanaryRecorder) {
        self.canary = Some(canary);
    }

    /// Checks a prefix-aware prediction against the usage the replica reports.
    pub fn set_prefix(&mut self, prefix: PrefixFeedback) {
        self.prefix = Some(prefix);
    }

    /// Counts the finished request, and whether it met `slo`, on the replica that served it.
    pub fn set_capacity(&mut self, replica: Arc<Replica>, slo: Slo) {
        self.capacity = Some((replica, slo));
    }

    pub fn kind(&self) -> BodyKind {
        self.kind
    }

    /// The observed request's id, for the lines logged about its response.
    pub fn request_id(&self) -> &str {
        self.ctx.request_id_text()
    }

    /// Takes note of bytes that just passed to the client.
    pub fn on_data(&mut self, bytes: &Bytes, now: Instant) {
        match self.kind {
            BodyKind::Opaque => {}
            BodyKind::Json => self.json.push(bytes),
            BodyKind::Stream => {
                let mut scanner = std::mem::take(&mut self.scanner);
                scanner.feed(bytes, |event| self.on_event(event, now));
                self.scanner = scanner;
            }
        }
    }

    fn on_event(&mut self, event: SseEvent, now: Instant) {
        let SseEvent::Data { has_choices, usage, .. } = event else {
            self.done_at.get_or_insert(now);
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
                if let Some(prefix) = &mut self.prefix {
                    prefix.prefill_done();
                }
                let ttft = now.duration_since(self.ctx.received_at).as_secs_f64();
                self.series.ttft.observe(ttft);
                if let Some(error) = self.placement.as_mut().and_then(|p| p.first_token(now)) {
                    let replica = [self.replica.name.as_str()];
                    self.metrics.predicted_ttft_error.with_label_values(&replica).observe(error);
                }
            }
            Some(previous) => {
                self.series.itl.observe(now.duration_since(previous).as_secs_f64());
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
            self.usage = self.json.usage();
        }
        if let Some(mut prefix) = self.prefix.take()
            && let Some(usage) = self.usage
            && let Some(details) = usage.prompt_tokens_details
        {
            prefix.report(details.cached_tokens, usage.prompt_tokens);
        }
        if let Some(usage) = self.usage {
            self.replica.latency.observe_prompt_count(self.ctx.prompt_tokens, usage.prompt_tokens);
        }
        let completion_tokens = self.usage.map_or(self.token_events, |u| u.completion_tokens);
        let prompt_tokens = self.usage.map_or(self.ctx.prompt_tokens, |u| u.prompt_tokens);
        if let Some(ticket) = self.ctx.quota.take() {
            ticket.settle(prompt_tokens, completion_tokens);
        }
        let entry = self.ctx.entry.as_str();
        match outcome {
            Outcome::Complete => {}
            Outcome::UpstreamReset => self.metrics.record_error(entry, "upstream_reset"),
            Outcome::ClientGone => self.metrics.record_error(entry, "client_disconnect"),
            Outcome::CutShort => self.metrics.record_error(entry, "upstream_timeout"),
        }
        let e2e = now.duration_since(self.ctx.received_at);
        self.series.e2e.observe(e2e.as_secs_f64());
        self.series.requests.inc();
        self.write_access_line(outcome, e2e, prompt_tokens, completion_tokens);
        if self.kind == BodyKind::Opaque {
            return;
        }
        self.series.prompt_tokens.inc_by(prompt_tokens);
        self.series.completion_tokens.inc_by(completion_tokens);
        let mut tpot = None;
        if let (Some(first), Some(last)) = (self.first_token_at, self.last_token_at)
            && completion_tokens > 1
            && outcome == Outcome::Complete
        {
            let per_token =
                last.duration_since(first).as_secs_f64() / (completion_tokens - 1) as f64;
            self.series.tpot.observe(per_token);
            tpot = Some(std::time::Duration::from_secs_f64(per_token));
            if let (Some(placement), Some(tpot)) = (self.placement.as_mut(), tpot) {
                placement.finished(tpot);
            }
        }
        let observed = canary::Outcome {
            entry: entry_name(self.ctx.entry),
            variant: self.ctx.variant.clone(),
            ok: outcome == Outcome::Complete && self.status.is_success(),
            ttft: self.first_token_at.map(|at| at.duration_since(self.ctx.received_at)),
            tpot,
            e2e,
            prompt_tokens,
            completion_tokens,
            finished_at: now,
        };
        if let Some((replica, slo)) = &self.capacity {
            replica.load.record_finished(slo.is_met_by(&observed));
        }
        if let Some(canary) = &self.canary {
            canary.record(observed);
        }
    }
}

impl Recorder {
    fn write_access_line(
        &self,
        outcome: Outcome,
        duration: Duration,
        prompt: u64,
        completion: u64,
    ) {
        if !self.ctx.access_log {
            return;
        }
        let opaque = self.kind == BodyKind::Opaque;
        access_log::emit(&AccessRecord {
            request_id: self.ctx.request_id_text(),
            method: self.ctx.method.as_str(),
            path: self.ctx.path(),
            entry: self.ctx.entry.as_str(),
            variant: &self.ctx.variant,
            replica: &self.replica.name,
            status: self.status.as_u16(),
            ttft: self.first_token_at.map(|first| first.duration_since(self.ctx.received_at)),
            prompt_tokens: if opaque { 0 } else { prompt },
            completion_tokens: if opaque { 0 } else { completion },
            duration,
            outcome: match outcome {
                Outcome::Complete => "complete",
                Outcome::UpstreamReset => "upstream_reset",
                Outcome::CutShort => "cut_short",
                Outcome::ClientGone => "client_gone",
            },
        });
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Dropped before the body's end: the client went away (the server drops the body
        // then), after its whole answer if the stream's `[DONE]` had passed.
        match self.done_at {
            Some(done_at) => self.finish(Outcome::Complete, done_at),
            None => self.finish(Outcome::ClientGone, Instant::now()),
        }
    }
}

/// An entry's name, shared: the canary report keys its series by it.
fn entry_name(entry: Entry) -> Arc<str> {
    static NAMES: LazyLock<[Arc<str>; 3]> = LazyLock::new(|| {
        [Entry::Short, Entry::Long, Entry::Debug].map(|entry| Arc::from(entry.as_str()))
    });
    let index = match entry {
        Entry::Short => 0,
        Entry::Long => 1,
        Entry::Debug => 2,
    };
    NAMES[index].clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::config::{Entry, ReplicaConfig, Strategy};

    fn recorder(metrics: &Arc<GatewayMetrics>, kind: BodyKind, at: Instant) -> Recorder {
        let (method, uri) = (http::Method::POST, http::Uri::from_static("/v1/completions"));
        let id = http::HeaderValue::from_static("request-1");
        let entry = (Entry::Short, Strategy::ForceClose);
        let mut ctx = RequestCtx::new(id, (method, uri), at, entry, false);
        ctx.prompt_tokens = 11;
        let replica = Arc::new(Replica::new(&ReplicaConfig {
            name: "r0".into(),
            authority: "127.0.0.1:1".into(),
            node: "n".into(),
            tls: false,
            placement: Default::default(),
        }));
        Recorder::new(metrics.clone(), ctx, (replica, http::StatusCode::OK), kind)
    }

    fn feed(recorder: &mut Recorder, bytes: &'static [u8], at: Instant) {
        recorder.on_data(&Bytes::from_static(bytes), at);
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
        feed(
            &mut recorder,
            b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n",
            at(100),
        );
        feed(
            &mut recorder,
            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"cho",
            at(120),
        );
        feed(&mut recorder, b"ices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n", at(140));
        feed(
            &mut recorder,
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
        feed(&mut json, b"{\"choices\":[],\"usage\":{\"prompt_tokens\":5,", start);
        feed(&mut json, b"\"completion_tokens\":9}}", start);
        json.finish(Outcome::Complete, start);
        let tokens = ["short", "default", "r0"];
        assert_eq!(metrics.completion_tokens.with_label_values(&tokens).get(), 9);
        // A body of one frame (kept as that frame), and one of three.
        let mut one = recorder(&metrics, BodyKind::Json, start);
        feed(&mut one, b"{\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":4}}", start);
        one.finish(Outcome::Complete, start);
        assert_eq!(metrics.completion_tokens.with_label_values(&tokens).get(), 9 + 4);
        let mut three = recorder(&metrics, BodyKind::Json, start);
        for frame in [&b"{\"usage\":{\"prompt_"[..], b"tokens\":5,\"completion", b"_tokens\":2}}"] {
            feed(&mut three, frame, start);
        }
        three.finish(Outcome::Complete, start);
        assert_eq!(metrics.completion_tokens.with_label_values(&tokens).get(), 9 + 4 + 2);
        drop(recorder(&metrics, BodyKind::Stream, start));
        assert_eq!(
            metrics.request_errors.with_label_values(&["short", "client_disconnect"]).get(),
            1
        );
        // Without usage (the dropped stream), the prompt estimate is used.
        assert_eq!(metrics.prompt_tokens.with_label_values(&tokens).get(), 5 + 5 + 5 + 11);
    }

    #[test]
    fn a_stream_dropped_after_its_done_is_complete_and_one_dropped_before_is_not() {
        let metrics = Arc::new(GatewayMetrics::new());
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let tokens = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n\
                       data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n";
        // The client reads [DONE] and closes before the upstream body's own end.
        let mut whole = recorder(&metrics, BodyKind::Stream, start);
        feed(&mut whole, tokens, at(100));
        feed(&mut whole, b"data: [DONE]\n\n", at(130));
        drop(whole);
        let disconnects =
            || metrics.request_errors.with_label_values(&["short", "client_disconnect"]).get();
        assert_eq!(disconnects(), 0);
        let tpot = metrics.tpot.with_label_values(&labels());
        assert_eq!(tpot.get_sample_count(), 1);
        let e2e = metrics.e2e.with_label_values(&labels());
        assert!((e2e.get_sample_sum() - 0.130).abs() < 1e-9, "ends at its [DONE]");
        // Gone before [DONE]: a disconnect, and no TPOT.
        let mut cut = recorder(&metrics, BodyKind::Stream, start);
        feed(&mut cut, tokens, at(100));
        drop(cut);
        assert_eq!(disconnects(), 1);
        assert_eq!(tpot.get_sample_count(), 1);
    }

    #[tokio::test]
    async fn finished_inference_requests_reach_the_canary_report() {
        let metrics = Arc::new(GatewayMetrics::new());
        let layout = vec![("short".to_string(), vec![DEFAULT_VARIANT.to_string()])];
        let canary = CanaryRecorder::spawn(canary::CanarySettings::default(), layout);
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut complete = recorder(&metrics, BodyKind::Stream, start);
        complete.set_canary(canary.clone());
        feed(&mut complete, b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", at(100));
        feed(&mut complete, b"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n", at(120));
        complete.finish(Outcome::Complete, at(130));
        let mut cut = recorder(&metrics, BodyKind::Stream, start);
        cut.set_canary(canary.clone());
        drop(cut);
        let report = canary.report().await.unwrap();
        let summary = &report.entries[0].variants[0].since_start;
        assert_eq!((summary.requests, summary.failures), (2, 1));
        assert_eq!(summary.ttft_p50_ms.map(f64::round), Some(100.0));
        assert_eq!(summary.tpot_p50_ms.map(f64::round), Some(20.0));
    }
}
