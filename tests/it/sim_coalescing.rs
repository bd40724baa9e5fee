//! Chunk coalescing: when a stream's API worker cannot send an event per token, the tokens
//! that queued up go out together, usage stays exact, the text is the same, and the token
//! rate (TPOT, in simulated time) holds while the event rate drops.

use crate::support::sim::{chat_body, metric, metrics_text, sse_data, url};
use laneway::sim::{self, SimConfig, SimHandle};
use serde_json::Value;

const OUTPUT_TOKENS: u64 = 40;

/// A tiny replica whose events cost `per_chunk_us` each (tiny's steps take 2 ms).
async fn start_with_event_cost(per_chunk_us: f64) -> SimHandle {
    let mut config = SimConfig::with_profile("coalescing", "tiny").unwrap();
    config.profile.api.per_chunk_us = per_chunk_us;
    config.speed = 20.0;
    sim::spawn(config).await.unwrap()
}

/// Streams one chat request; returns the content of each content event and the usage.
async fn stream(sim: &SimHandle) -> (Vec<String>, Value) {
    let response = reqwest::Client::new()
        .post(url(sim, "/v1/chat/completions"))
        .json(&chat_body(100, OUTPUT_TOKENS, true))
        .send()
        .await
        .unwrap();
    let events = sse_data(&response.text().await.unwrap());
    let chunks: Vec<Value> = events
        .iter()
        .filter(|event| *event != "[DONE]")
        .map(|event| serde_json::from_str(event).unwrap())
        .collect();
    let usage = chunks.last().unwrap()["usage"].clone();
    let contents = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .filter(|content| !content.is_empty())
        .map(str::to_owned)
        .collect();
    (contents, usage)
}

async fn complete_text(sim: &SimHandle) -> String {
    let body: Value = reqwest::Client::new()
        .post(url(sim, "/v1/chat/completions"))
        .json(&chat_body(100, OUTPUT_TOKENS, false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["choices"][0]["message"]["content"].as_str().unwrap().to_owned()
}

/// Per-request TPOT of the one streamed request, from the replica's histogram.
async fn tpot(sim: &SimHandle) -> f64 {
    let text = metrics_text(sim).await;
    metric(&text, "vllm:request_time_per_output_token_seconds_sum")
}

#[tokio::test]
async fn a_busy_worker_sends_several_tokens_per_event() {
    // An event per token when the worker keeps up (events cost 0.5 ms, steps 2 ms).
    let quick = start_with_event_cost(500.0).await;
    let (contents, usage) = stream(&quick).await;
    assert_eq!(contents.len() as u64, OUTPUT_TOKENS);
    assert_eq!(usage["completion_tokens"], OUTPUT_TOKENS);
    let quick_tpot = tpot(&quick).await;
    quick.shutdown().await;

    // Events that cost 5 ms, 2.5 steps: the tokens of about 2.5 steps share each event.
    let slow = start_with_event_cost(5000.0).await;
    let (contents, usage) = stream(&slow).await;
    assert_eq!(usage["completion_tokens"], OUTPUT_TOKENS);
    let events = contents.len() as u64;
    assert!(events * 2 <= OUTPUT_TOKENS && events > 1, "{events} events");
    let slow_tpot = tpot(&slow).await;
    // The same text, whatever the grouping.
    assert_eq!(contents.concat(), complete_text(&slow).await);
    slow.shutdown().await;

    // The token rate holds: only the last event's wait is added over 39 token gaps.
    let ratio = slow_tpot / quick_tpot;
    assert!((0.9..1.2).contains(&ratio), "TPOT {slow_tpot} vs {quick_tpot}");
}
