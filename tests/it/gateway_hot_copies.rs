//! Copies of hot prefixes through the gateway, against simulated replicas with prefix
//! caching: a context hit again and again on one replica is computed on the other in the
//! background, and later requests hit it there too.

use crate::support::gateway::*;
use futures_util::StreamExt;
use laneway::tokens::synthetic_text;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

const CONTEXT_TOKENS: u64 = 2000;
const COPIES_MADE: &str = "laneway_prefix_copies_total{outcome=\"made\"}";
const COPIES_FAILED: &str = "laneway_prefix_copies_total{outcome=\"failed\"}";

/// Request `n`: the one shared context, then a question of its own.
fn body(n: u64) -> Value {
    let context = synthetic_text(CONTEXT_TOKENS, &mut StdRng::seed_from_u64(7));
    let question = synthetic_text(24, &mut StdRng::seed_from_u64(1000 + n));
    json!({
        "model": "m",
        "messages": [{"role": "system", "content": context}, {"role": "user", "content": question}],
        "max_tokens": 4,
    })
}

/// Sends request `n`: the replica that served it and the prompt tokens it found cached.
async fn send(
    client: &reqwest::Client,
    gateway: &laneway::gateway::GatewayHandle,
    n: u64,
) -> (String, u64) {
    let response =
        client.post(url(gateway, "/v1/chat/completions")).json(&body(n)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let replica = header(&response, "x-laneway-replica");
    let answer: Value = response.json().await.unwrap();
    let cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    (replica, cached)
}

/// Sends requests `numbers`, `at_once` at a time: the replica that served each and the
/// prompt tokens it found cached.
async fn send_all(
    client: &reqwest::Client,
    gateway: &laneway::gateway::GatewayHandle,
    numbers: std::ops::Range<u64>,
    at_once: usize,
) -> Vec<(String, u64)> {
    futures_util::stream::iter(numbers)
        .map(|n| send(client, gateway, n))
        .buffer_unordered(at_once)
        .collect()
        .await
}

#[tokio::test]
async fn a_hot_context_is_copied_to_a_less_busy_replica_and_hit_there() {
    let sims = start_sims(2, 1).await;
    let gateway = start_gateway(config_for(&sims)).await;
    let client = reqwest::Client::new();
    let made = || sample(&gateway.metrics_text(), COPIES_MADE).unwrap_or(0.0);
    // One at a time: every request hits the context where the first computed it, waits
    // behind nothing there, and buys no copy.
    let (home, _) = send(&client, &gateway, 0).await;
    let served = send_all(&client, &gateway, 1..16, 1).await;
    assert!(served.iter().all(|(replica, _)| *replica == home), "{served:?}");
    assert_eq!(made(), 0.0);
    // Four at a time: hits wait behind each other at home, and the other replica, less
    // busy, takes a copy.
    send_all(&client, &gateway, 16..48, 4).await;
    wait_until("a copy made", || made() >= 1.0).await;
    assert_eq!(sample(&gateway.metrics_text(), COPIES_FAILED).unwrap_or(0.0), 0.0);
    // Requests that would wait behind others at home hit the copy.
    let served = send_all(&client, &gateway, 48..80, 4).await;
    let elsewhere: Vec<u64> =
        served.iter().filter(|(replica, _)| *replica != home).map(|(_, cached)| *cached).collect();
    assert!(!elsewhere.is_empty(), "every request went home ({home})");
    assert!(
        elsewhere.iter().all(|&cached| cached >= CONTEXT_TOKENS / 2),
        "requests served away from home found {elsewhere:?} tokens cached"
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn hot_copies_can_be_turned_off() {
    let sims = start_sims(2, 1).await;
    let mut config = config_for(&sims);
    config.prefix.hot_copy_hits = 0;
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    for n in 0..32 {
        send(&client, &gateway, n).await;
    }
    assert_eq!(sample(&gateway.metrics_text(), COPIES_MADE).unwrap_or(0.0), 0.0);
    assert!(gateway.state().shared.prefix.hot.is_empty(), "no prefix is followed");
    gateway.shutdown().await;
}
