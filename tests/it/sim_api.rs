//! The simulator speaks vLLM's OpenAI API: SSE shapes, complete bodies, info endpoints,
//! errors, and the per-response replica/worker headers.

use crate::support::sim::{chat_body, metric, metrics_text, sse_data, start, url};
use serde_json::{Value, json};

#[tokio::test]
async fn streamed_chat_has_vllm_shape() {
    let sim = start("tiny", 1, 20.0).await;
    let response = reqwest::Client::new()
        .post(url(&sim, "/v1/chat/completions"))
        .json(&chat_body(100, 5, true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-sim-replica"], "test-replica");
    assert_eq!(response.headers()["x-sim-api-worker"], "0");
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let events = sse_data(&response.text().await.unwrap());
    // role, 5 tokens, usage, [DONE]
    assert_eq!(events.len(), 8, "{events:?}");
    let chunks: Vec<Value> = events[..7].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
    for chunk in &chunks[1..5] {
        assert!(chunk["choices"][0]["delta"]["content"].as_str().unwrap().starts_with(' '));
        assert_eq!(chunk["choices"][0]["finish_reason"], Value::Null);
    }
    assert_eq!(chunks[5]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[6]["choices"], json!([]));
    assert_eq!(
        chunks[6]["usage"],
        json!({
            "prompt_tokens": 100,
            "total_tokens": 105,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 0},
        })
    );
    assert!(chunks.iter().all(|c| c["id"] == chunks[0]["id"]));
    assert_eq!(events[7], "[DONE]");
    sim.shutdown().await;
}

#[tokio::test]
async fn streamed_completion_without_usage() {
    let sim = start("tiny", 1, 20.0).await;
    let body = json!({"model": "m", "prompt": "abcdabcd", "max_tokens": 3, "stream": true});
    let text = reqwest::Client::new()
        .post(url(&sim, "/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events = sse_data(&text);
    assert_eq!(events.len(), 4, "{events:?}");
    let first: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(first["object"], "text_completion");
    assert!(first["choices"][0]["text"].is_string());
    let last: Value = serde_json::from_str(&events[2]).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert_eq!(events[3], "[DONE]");
    sim.shutdown().await;
}

#[tokio::test]
async fn complete_bodies_and_deterministic_text() {
    let sim = start("tiny", 1, 20.0).await;
    let client = reqwest::Client::new();
    let mut texts = Vec::new();
    for _ in 0..2 {
        let body: Value = client
            .post(url(&sim, "/v1/chat/completions"))
            .json(&chat_body(50, 7, false))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["choices"][0]["finish_reason"], "length");
        assert_eq!(body["usage"]["completion_tokens"], 7);
        assert_eq!(body["usage"]["prompt_tokens"], 50);
        texts.push(body["choices"][0]["message"]["content"].as_str().unwrap().to_owned());
    }
    assert_eq!(texts[0], texts[1]);
    assert_eq!(texts[0].split_whitespace().count(), 7);
    let completion: Value = client
        .post(url(&sim, "/v1/completions"))
        .json(&json!({"prompt": "hello"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(completion["object"], "text_completion");
    assert_eq!(completion["usage"]["completion_tokens"], 16, "OpenAI's default max_tokens");
    sim.shutdown().await;
}

#[tokio::test]
async fn info_endpoints_and_metrics() {
    let sim = start("tiny", 2, 20.0).await;
    let client = reqwest::Client::new();
    let health = client.get(url(&sim, "/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert!(health.headers().contains_key("x-sim-api-worker"));
    let models: Value =
        client.get(url(&sim, "/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["id"], "sim-tiny");
    assert_eq!(models["data"][0]["max_model_len"], 4096);
    let version: Value =
        client.get(url(&sim, "/version")).send().await.unwrap().json().await.unwrap();
    assert!(version["version"].is_string());
    let load: Value = client.get(url(&sim, "/load")).send().await.unwrap().json().await.unwrap();
    assert_eq!(load, json!({"server_load": 0}));
    let get_load: Value =
        client.get(url(&sim, "/get_load")).send().await.unwrap().json().await.unwrap();
    assert_eq!(get_load, json!([{"num_tokens": 0}]));

    client
        .post(url(&sim, "/v1/chat/completions"))
        .json(&chat_body(200, 4, false))
        .send()
        .await
        .unwrap();
    let text = metrics_text(&sim).await;
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
    ] {
        metric(&text, name);
    }
    assert_eq!(metric(&text, "vllm:prompt_tokens_total"), 200.0);
    assert_eq!(metric(&text, "vllm:generation_tokens_total"), 4.0);
    assert!(text.contains(
        "vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"sim-tiny\",le=\"0.001\"}"
    ));
    assert!(text.contains(
        "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",model_name=\"sim-tiny\",le=\"7680\"}"
    ));
    sim.shutdown().await;
}

#[tokio::test]
async fn bad_inputs_get_openai_errors() {
    let sim = start("tiny", 1, 20.0).await;
    let client = reqwest::Client::new();
    let too_long = chat_body(5000, 4, false);
    let cases: Vec<(&str, reqwest::Method, String, u16)> = vec![
        ("/v1/chat/completions", reqwest::Method::POST, "{not json".into(), 400),
        ("/v1/chat/completions", reqwest::Method::POST, "{}".into(), 400),
        ("/v1/completions", reqwest::Method::POST, r#"{"max_tokens":3}"#.into(), 400),
        ("/v1/chat/completions", reqwest::Method::POST, too_long.to_string(), 400),
        ("/v1/completions", reqwest::Method::POST, r#"{"prompt":"a","max_tokens":0}"#.into(), 400),
        ("/v1/chat/completions", reqwest::Method::GET, String::new(), 405),
        ("/nowhere", reqwest::Method::GET, String::new(), 404),
    ];
    for (path, method, body, status) in cases {
        let response =
            client.request(method, url(&sim, path)).body(body.clone()).send().await.unwrap();
        assert_eq!(response.status(), status, "{path} {body}");
        assert!(response.headers().contains_key("x-sim-replica"));
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], status, "{error}");
        assert!(error["error"]["message"].is_string());
    }
    let stats = sim.stats();
    assert_eq!(stats.requests_total, 5, "inference requests count whatever their outcome");
    sim.shutdown().await;
}

#[tokio::test]
async fn stats_count_connections_and_requests() {
    let sim = start("tiny", 2, 20.0).await;
    let client = reqwest::Client::new();
    for _ in 0..3 {
        client
            .post(url(&sim, "/v1/completions"))
            .json(&json!({"prompt": "x", "max_tokens": 2}))
            .send()
            .await
            .unwrap();
    }
    let over_http: laneway::sim::SimStats =
        client.get(url(&sim, "/sim/stats")).send().await.unwrap().json().await.unwrap();
    let stats = sim.stats();
    assert_eq!(stats.requests_total, 3);
    assert_eq!(stats.requests_per_worker.iter().sum::<u64>(), 3);
    assert_eq!(stats.connections_per_worker.len(), 2);
    assert_eq!(stats.connections_accepted, stats.connections_per_worker.iter().sum::<u64>());
    assert_eq!(over_http.requests_total, 3);
    assert_eq!((stats.running, stats.waiting), (0, 0));
    sim.shutdown().await;
}

#[tokio::test]
async fn streams_over_h2c_too() {
    let sim = start("tiny", 1, 20.0).await;
    let client = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let response = client
        .post(url(&sim, "/v1/chat/completions"))
        .json(&chat_body(30, 4, true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.headers()["x-sim-api-worker"], "0");
    let events = sse_data(&response.text().await.unwrap());
    assert_eq!(events.len(), 7, "role, 4 tokens, usage, [DONE]: {events:?}");
    sim.shutdown().await;
}
