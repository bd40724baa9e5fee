//! The field's metric definitions, computed on a scripted stream with known timings:
//! synthetic timestamps drive the stream timer and the summary, so nothing depends on
//! the machine's speed.

use std::time::{Duration, Instant};

use laneway::bench::record::{Outcome, RequestRecord};
use laneway::bench::stats::{Slo, summarise};
use laneway::bench::timing::StreamTimer;

const ROLE: &[u8] =
    b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
const TOKEN: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n";
const USAGE: &[u8] =
    b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":4,\"total_tokens\":1004}}\n\n";
const DONE: &[u8] = b"data: [DONE]\n\n";

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

/// A stream sent at `t0`: role chunk at 100 ms, tokens at 110, 125, 145 and 160 ms (the
/// last split across two reads), usage at 170 ms, `[DONE]` at 171 ms.
fn scripted_record(t0: Instant, index: u64) -> RequestRecord {
    let mut timer = StreamTimer::new(t0, 4);
    timer.on_chunk(t0 + ms(100), ROLE);
    timer.on_chunk(t0 + ms(110), TOKEN);
    timer.on_chunk(t0 + ms(125), TOKEN);
    timer.on_chunk(t0 + ms(145), TOKEN);
    timer.on_chunk(t0 + ms(150), &TOKEN[..10]);
    timer.on_chunk(t0 + ms(160), &TOKEN[10..]);
    timer.on_chunk(t0 + ms(170), USAGE);
    timer.on_chunk(t0 + ms(171), DONE);
    let figures = timer.finish(t0 + ms(172));
    let mut record = RequestRecord::failed(index, 0, Duration::ZERO, Duration::ZERO);
    record.outcome = figures.outcome;
    record.ttft = figures.ttft;
    record.e2e = figures.e2e;
    record.itl = figures.itl;
    record.output_tokens = figures.output_tokens;
    record.prompt_tokens = figures.prompt_tokens.unwrap();
    record
}

#[test]
fn ttft_itl_e2e_and_tpot_follow_the_field_definitions() {
    let record = scripted_record(Instant::now(), 0);
    assert_eq!(record.outcome, Outcome::Success);
    // TTFT: the role-only first chunk counts, as `vllm bench serve` counts it.
    assert_eq!(record.ttft, Some(ms(100)));
    // One ITL per choice chunk after the first; a split event is stamped when it completes.
    assert_eq!(record.itl, vec![ms(10), ms(15), ms(20), ms(15)]);
    // E2E: to the last data event (the usage chunk), not to `[DONE]` or the body's end.
    assert_eq!(record.e2e, ms(170));
    assert_eq!(record.output_tokens, 4);
    // TPOT = (E2E - TTFT) / (output tokens - 1) = 70 ms / 3.
    assert_eq!(record.tpot(), Some(ms(70) / 3));
}

#[test]
fn a_stream_without_done_is_truncated_and_an_error_event_is_an_error() {
    let t0 = Instant::now();
    let mut timer = StreamTimer::new(t0, 4);
    timer.on_chunk(t0 + ms(5), ROLE);
    timer.on_chunk(t0 + ms(9), TOKEN);
    let figures = timer.finish(t0 + ms(20));
    assert_eq!(figures.outcome, Outcome::Truncated);
    assert_eq!(figures.output_tokens, 2, "without usage, choice chunks are counted");

    let mut timer = StreamTimer::new(t0, 4);
    timer.on_chunk(t0 + ms(5), b"data: {\"error\":{\"message\":\"overloaded\"}}\n\n");
    timer.on_chunk(t0 + ms(6), DONE);
    assert_eq!(timer.finish(t0 + ms(7)).outcome, Outcome::StreamError("overloaded".into()));
}

#[test]
fn the_summary_counts_failures_and_computes_throughput_and_goodput() {
    let t0 = Instant::now();
    let mut records: Vec<RequestRecord> = (0..3).map(|i| scripted_record(t0, i)).collect();
    // A slower success: TTFT 300 ms.
    records[2].ttft = Some(ms(300));
    records[2].e2e = ms(400);
    let mut failed = RequestRecord::failed(3, 0, Duration::ZERO, Duration::ZERO);
    failed.outcome = Outcome::HttpStatus(503);
    records.push(failed);
    let mut timed_out = RequestRecord::failed(4, 0, Duration::ZERO, ms(5));
    timed_out.outcome = Outcome::Timeout;
    records.push(timed_out);

    let slo = Slo { ttft: Some(ms(200)), tpot: Some(ms(50)), e2el: None };
    let summary = summarise(&records, Duration::from_secs(60), &slo, true);
    assert_eq!((summary.requests, summary.successes, summary.failures), (5, 3, 2));
    assert_eq!(summary.failures_by_kind.get("http_status"), Some(&1));
    assert_eq!(summary.failures_by_kind.get("timeout"), Some(&1));
    assert_eq!(summary.late_requests, 1, "the timed-out one was sent 5 ms late");
    assert_eq!(summary.achieved_rate, 5.0 / 0.005, "open loop: five requests sent within 5 ms");
    let closed = summarise(&records, Duration::from_secs(60), &slo, false);
    assert_eq!(closed.achieved_rate, 5.0 / 60.0, "closed loop: over the wall time");
    assert_eq!(summary.qpm, 3.0);
    assert_eq!(summary.completion_tokens_per_s, 12.0 / 60.0);
    assert_eq!(summary.total_tokens_per_s, 3012.0 / 60.0);
    assert_eq!(summary.tpm, 3012.0);
    assert_eq!(summary.goodput_rps, Some(2.0 / 60.0));
    // HDR histograms keep three significant digits: percentiles are within 0.1%.
    let close = |value: f64, expected: f64| (value / expected - 1.0).abs() < 1e-3;
    assert!(close(summary.ttft.p50_ms, 100.0), "{}", summary.ttft.p50_ms);
    assert!(close(summary.ttft.max_ms, 300.0), "{}", summary.ttft.max_ms);
    assert_eq!(summary.itl.count, 12);
    assert!(close(summary.itl.max_ms, 20.0), "{}", summary.itl.max_ms);
    assert!(close(summary.e2e.p50_ms, 170.0), "{}", summary.e2e.p50_ms);
    assert!(close(summary.tpot.p50_ms, 70.0 / 3.0), "{}", summary.tpot.p50_ms);
}
