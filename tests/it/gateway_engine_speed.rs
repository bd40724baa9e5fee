//! A replica's prefill speed read off its engine's own counters (vLLM's
//! `request_prefill_time_seconds` and `request_prefill_kv_computed_tokens`, as the simulator exports
//! them): the gateway learns it from requests it never sent, as a gateway among several
//! must, since it sees only its share of the first tokens.

use std::time::Instant;

use crate::support::gateway::*;
use laneway::gateway::pick::predict::EngineReading;
use laneway::tokens::synthetic_text;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::json;

#[tokio::test]
async fn the_prefill_slope_is_learned_from_requests_another_client_sent() {
    let sims = start_sims(1, 2).await;
    let gateway = start_gateway(config_for(&sims)).await;
    let epoch = gateway.state().picker.epoch;
    let replica = gateway.state().picker.snapshot()[0].clone();
    let prior = replica.latency.ttft_slope(EngineReading::Fitted);
    let client = reqwest::Client::new();
    let url = format!("http://{}/v1/chat/completions", sims[0].addr());
    // Straight to the replica, one at a time, four per scrape: four prompts of about 100
    // tokens, then four of 1,500, and again; each new (nothing cached), so each prefill is
    // one engine step of 2 ms + 0.5 us a token (the tiny profile), a tenth of that on the
    // wall clock at the tests' speed.
    for batch in 0..4u64 {
        let words = if batch % 2 == 0 { 100 } else { 1500 };
        for index in 0..4 {
            let text = synthetic_text(words, &mut StdRng::seed_from_u64(batch * 4 + index));
            let body = json!({
                "model": "m",
                "messages": [{"role": "user", "content": text}],
                "max_tokens": 2,
            });
            let response = client.post(&url).json(&body).send().await.unwrap();
            assert_eq!(response.status(), 200);
        }
        let sent = Instant::now();
        wait_until("a scrape after the batch", || {
            replica.load.scrape_age(epoch, Instant::now()).is_some_and(|age| age < sent.elapsed())
        })
        .await;
    }
    let engine = 0.5e-6 / SPEED;
    wait_until("the engine's prefill slope", || {
        (replica.latency.ttft_slope(EngineReading::Fitted) - engine).abs() < 0.1 * engine
    })
    .await;
    // Far below anything the gateway's own first tokens could have taught it (its floor is
    // a quarter of the prior's 10 us): and it sent none.
    assert!(replica.latency.ttft_slope(EngineReading::Fitted) < 0.01 * prior, "{prior}");
    assert_eq!(replica.latency.samples().0, 0);
    let replicas: serde_json::Value =
        reqwest::get(admin_url(&gateway, "/admin/replicas")).await.unwrap().json().await.unwrap();
    let estimate = &replicas["replicas"][0]["latency_estimate"];
    // Windows of 100 and of 1,500 tokens a request tell the fixed cost from the tokens'.
    assert_eq!(estimate["ttft_slope_source"], "engine_fit", "{replicas}");
    let through_origin = estimate["ttft_seconds_per_token_through_origin"].as_f64().unwrap();
    let fitted = estimate["ttft_seconds_per_token"].as_f64().unwrap();
    assert!(through_origin > fitted, "{replicas}");
    // One prefill at a time: the slopes are the engine's as counted.
    assert_eq!(estimate["engine_prefill_concurrency"], 1.0, "{replicas}");
}
