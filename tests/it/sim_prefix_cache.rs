//! Prefix caching in the simulator: cached prompt blocks skip prefill (checked in simulated
//! time against the profile), `cached_tokens` in both response forms, the hit counters on
//! `/metrics` and `/sim/stats`, and the knob that turns caching off.

use crate::support::sim::{
    chat_body, expected_ttft_from, metric, metrics_text, sse_data, start, url,
};
use laneway::sim::{self, Profile, SimConfig, SimHandle};
use laneway::tokens::synthetic_text;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

/// Tokens a chat message adds before its text (start marker and role): a second message
/// shares them with another request's when both have the same role.
const MESSAGE_HEAD_TOKENS: u64 = 2;

/// Sends a chat body; returns its usage object (from the usage chunk when streamed).
async fn usage_of(sim: &SimHandle, body: &Value) -> Value {
    let response =
        reqwest::Client::new().post(url(sim, "/v1/chat/completions")).json(body).send().await;
    let response = response.unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    if body["stream"] == json!(true) {
        let events = sse_data(&text);
        let usage_event = &events[events.len() - 2];
        serde_json::from_str::<Value>(usage_event).unwrap()["usage"].clone()
    } else {
        serde_json::from_str::<Value>(&text).unwrap()["usage"].clone()
    }
}

async fn ttft_sum(sim: &SimHandle) -> f64 {
    metric(&metrics_text(sim).await, "vllm:time_to_first_token_seconds_sum")
}

fn assert_close(what: &str, measured: f64, expected: f64) {
    eprintln!("{what}: measured {measured:.5} s, expected {expected:.5} s");
    assert!((measured - expected).abs() / expected < 0.01, "{what}: {measured} vs {expected}");
}

/// A system context and a user question, each `tokens` long with its template tokens.
fn context_and_question(context: &str, question_tokens: u64, seed: u64) -> Value {
    let question = synthetic_text(question_tokens - 4, &mut StdRng::seed_from_u64(seed));
    json!({
        "model": "m",
        "messages": [{"role": "system", "content": context}, {"role": "user", "content": question}],
        "max_tokens": 2,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
}

#[tokio::test]
async fn a_repeated_prompt_prefills_only_its_uncached_tail() {
    let profile = Profile::built_in("h20-tp8").unwrap();
    let sim = start("h20-tp8", 1, 10.0).await;
    let body = chat_body(9000, 2, true);
    let cold = usage_of(&sim, &body).await;
    let cold_ttft = ttft_sum(&sim).await;
    let warm = usage_of(&sim, &body).await;
    let warm_ttft = ttft_sum(&sim).await - cold_ttft;

    // vLLM recomputes at least the last token: the hit stops at the last full block before it.
    let block = profile.engine.block_size;
    let cached = (9000 - 1) / block * block;
    assert_eq!(cold["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(warm["prompt_tokens_details"]["cached_tokens"], cached);
    assert_eq!(warm["prompt_tokens"], 9000);
    assert_close("cold 9000 TTFT", cold_ttft, expected_ttft_from(&profile, 9000, 0));
    assert_close("warm 9000 TTFT", warm_ttft, expected_ttft_from(&profile, 9000, cached));

    let text = metrics_text(&sim).await;
    assert_eq!(metric(&text, "vllm:prefix_cache_queries_total"), 18000.0);
    assert_eq!(metric(&text, "vllm:prefix_cache_hits_total"), cached as f64);
    assert_eq!(metric(&text, "vllm:prompt_tokens_total"), 18000.0, "cached tokens count too");
    let stats = sim.stats();
    assert_eq!((stats.prefix_cache_queries, stats.prefix_cache_hits), (18000, cached));
    let admin: Value = reqwest::get(url(&sim, "/sim/stats")).await.unwrap().json().await.unwrap();
    assert_eq!(admin["prefix_cache_hits"], cached);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_shared_prefix_is_reused_by_a_different_question() {
    let profile = Profile::built_in("h20-tp4").unwrap();
    let sim = start("h20-tp4", 1, 50.0).await;
    let context = synthetic_text(6000 - 4, &mut StdRng::seed_from_u64(1));
    let first = usage_of(&sim, &context_and_question(&context, 3000, 2)).await;
    let first_ttft = ttft_sum(&sim).await;
    let second = usage_of(&sim, &context_and_question(&context, 3000, 3)).await;
    let second_ttft = ttft_sum(&sim).await - first_ttft;

    let block = profile.engine.block_size;
    let cached = (6000 + MESSAGE_HEAD_TOKENS) / block * block;
    assert_eq!(first["prompt_tokens"], 9000);
    assert_eq!(first["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(second["prompt_tokens_details"]["cached_tokens"], cached);
    assert_close("first TTFT", first_ttft, expected_ttft_from(&profile, 9000, 0));
    assert_close("shared-prefix TTFT", second_ttft, expected_ttft_from(&profile, 9000, cached));
    sim.shutdown().await;
}

#[tokio::test]
async fn complete_bodies_report_cached_tokens() {
    let sim = start("tiny", 1, 20.0).await;
    let body = chat_body(100, 3, false);
    let first = usage_of(&sim, &body).await;
    let second = usage_of(&sim, &body).await;
    assert_eq!(first["prompt_tokens_details"], json!({"cached_tokens": 0}));
    // 100 tokens: the hit stops at 96 (the last token is always recomputed).
    assert_eq!(second["prompt_tokens_details"], json!({"cached_tokens": 96}));
    assert_eq!(second["completion_tokens"], 3);
    sim.shutdown().await;
}

#[tokio::test]
async fn caching_off_reports_no_hits_and_no_details() {
    let mut config = SimConfig::with_profile("no-cache", "tiny").unwrap();
    config.speed = 20.0;
    config.profile.engine.enable_prefix_caching = false;
    let sim = sim::spawn(config).await.unwrap();
    let body = chat_body(100, 3, true);
    usage_of(&sim, &body).await;
    let second = usage_of(&sim, &body).await;
    assert!(second.get("prompt_tokens_details").is_none(), "{second}");
    let text = metrics_text(&sim).await;
    assert_eq!(metric(&text, "vllm:prefix_cache_queries_total"), 0.0);
    assert_eq!(metric(&text, "vllm:prefix_cache_hits_total"), 0.0);
    sim.shutdown().await;
}
