//! Load reporting while a stream is in flight (`/load`, `/get_load`, stats, KV usage), and
//! the engine freeing a request's resources when its client goes away.

use std::time::Duration;

use crate::support::sim::{chat_body, metric, metrics_text, start, url};
use futures_util::StreamExt;
use serde_json::{Value, json};

const POLLS: usize = 500;
const POLL: Duration = Duration::from_millis(10);

#[tokio::test]
async fn in_flight_stream_shows_in_every_load_signal_until_the_client_leaves() {
    // Real-time tiny replica: 2000 tokens take about 4 s, far longer than the checks.
    let sim = start("tiny", 1, 1.0).await;
    let client = reqwest::Client::new();
    let response = client
        .post(url(&sim, "/v1/chat/completions"))
        .json(&chat_body(100, 2000, true))
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    body.next().await.expect("first event").unwrap();

    let load: Value = client.get(url(&sim, "/load")).send().await.unwrap().json().await.unwrap();
    assert_eq!(load, json!({"server_load": 1}));
    let get_load: Value =
        client.get(url(&sim, "/get_load")).send().await.unwrap().json().await.unwrap();
    assert_eq!(get_load, json!([{"num_tokens": 2100}]), "KV reserved: prompt + max_tokens");
    let stats = sim.stats();
    assert_eq!((stats.running, stats.waiting), (1, 0));
    let text = metrics_text(&sim).await;
    assert_eq!(metric(&text, "vllm:num_requests_running"), 1.0);
    assert!(metric(&text, "vllm:kv_cache_usage_perc") > 0.0);

    drop(body);
    let mut freed = false;
    for _ in 0..POLLS {
        let stats = sim.stats();
        let load: Value =
            client.get(url(&sim, "/load")).send().await.unwrap().json().await.unwrap();
        if stats.running == 0 && load["server_load"] == 0 {
            freed = true;
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    assert!(freed, "the abandoned request left the engine and the in-flight count");
    let text = metrics_text(&sim).await;
    assert_eq!(metric(&text, "vllm:kv_cache_usage_perc"), 0.0);
    assert!(metric(&text, "vllm:generation_tokens_total") < 2000.0, "generation stopped early");
    sim.shutdown().await;
}
