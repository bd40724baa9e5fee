//! Fault switches break a replica at runtime and heal it: 503s, hangs, cut streams, slow
//! steps and a crash with restart, both through `SimHandle::set_fault` and over HTTP.

use std::time::Duration;

use crate::support::sim::{chat_body, metric, metrics_text, start, url};
use futures_util::StreamExt;
use laneway::sim::Fault;
use serde_json::json;

/// Upper bound on polling loops (checked every `POLL`).
const POLLS: usize = 400;
const POLL: Duration = Duration::from_millis(10);

async fn chat(
    client: &reqwest::Client,
    base: &str,
    tokens: u64,
) -> reqwest::Result<reqwest::Response> {
    client
        .post(format!("{base}/v1/chat/completions"))
        .json(&chat_body(20, tokens, true))
        .send()
        .await
}

#[tokio::test]
async fn unavailable_answers_503_everywhere_then_heals_over_http() {
    let sim = start("tiny", 1, 20.0).await;
    let client = reqwest::Client::new();
    let base = url(&sim, "");
    let set = client
        .post(url(&sim, "/sim/fault"))
        .json(&json!({"mode": "unavailable"}))
        .send()
        .await
        .unwrap();
    assert_eq!(set.status(), 200);
    assert_eq!(sim.fault(), Fault::Unavailable);
    let health = client.get(url(&sim, "/health")).send().await.unwrap();
    assert_eq!(health.status(), 503);
    assert!(health.headers().contains_key("x-sim-replica"));
    assert_eq!(chat(&client, &base, 3).await.unwrap().status(), 503);
    // The admin endpoints keep working.
    assert_eq!(client.get(url(&sim, "/sim/stats")).send().await.unwrap().status(), 200);
    client.post(url(&sim, "/sim/fault")).json(&json!({"mode": "healthy"})).send().await.unwrap();
    assert_eq!(client.get(url(&sim, "/health")).send().await.unwrap().status(), 200);
    assert_eq!(chat(&client, &base, 3).await.unwrap().status(), 200);
    let bad = client
        .post(url(&sim, "/sim/fault"))
        .json(&json!({"mode": "slow", "factor": -1}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    sim.shutdown().await;
}

#[tokio::test]
async fn hang_never_answers_until_healed() {
    let sim = start("tiny", 1, 20.0).await;
    sim.set_fault(Fault::Hang);
    let client = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
    let hung = client.get(url(&sim, "/health")).send().await;
    assert!(hung.unwrap_err().is_timeout());
    sim.set_fault(Fault::Healthy);
    assert_eq!(client.get(url(&sim, "/health")).send().await.unwrap().status(), 200);
    sim.shutdown().await;
}

#[tokio::test]
async fn cut_after_chunks_resets_streams_mid_way() {
    let sim = start("tiny", 1, 20.0).await;
    let client = reqwest::Client::new();
    let base = url(&sim, "");
    sim.set_fault(Fault::CutAfterChunks { chunks: 3 });
    let response = chat(&client, &base, 10).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut received = Vec::new();
    let mut failed = false;
    while let Some(item) = stream.next().await {
        match item {
            Ok(bytes) => received.extend_from_slice(&bytes),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(failed, "the body ends in an error, not a clean end");
    let text = String::from_utf8(received).unwrap();
    assert_eq!(text.matches("data: ").count(), 3, "{text}");
    assert!(!text.contains("[DONE]"));

    sim.set_fault(Fault::Healthy);
    let text = chat(&client, &base, 10).await.unwrap().text().await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"));
    sim.shutdown().await;
}

#[tokio::test]
async fn slow_stretches_every_step() {
    let sim = start("tiny", 1, 20.0).await;
    let client = reqwest::Client::new();
    let base = url(&sim, "");
    let tpot_sum = |text: &str| metric(text, "vllm:request_time_per_output_token_seconds_sum");
    chat(&client, &base, 20).await.unwrap().text().await.unwrap();
    let normal = tpot_sum(&metrics_text(&sim).await);
    sim.set_fault(Fault::Slow { factor: 4.0 });
    chat(&client, &base, 20).await.unwrap().text().await.unwrap();
    let slow = tpot_sum(&metrics_text(&sim).await) - normal;
    let ratio = slow / normal;
    assert!((3.5..=4.5).contains(&ratio), "slow/normal TPOT ratio {ratio}");
    sim.shutdown().await;
}

#[tokio::test]
async fn exit_drops_everything_and_healing_listens_again() {
    let sim = start("tiny", 1, 1.0).await;
    let addr = sim.addr();
    let client = reqwest::Client::new();
    let base = url(&sim, "");
    // A long stream in flight when the replica crashes is cut.
    let in_flight = chat(&client, &base, 2000).await.unwrap();
    sim.set_fault(Fault::Exit);
    assert!(in_flight.text().await.is_err(), "the stream is cut by the crash");
    let mut refused = false;
    for _ in 0..POLLS {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    assert!(refused, "the listener is gone");

    sim.set_fault(Fault::Healthy);
    let mut healed = false;
    for _ in 0..POLLS {
        if let Ok(response) = client.get(url(&sim, "/health")).send().await {
            healed = response.status() == 200;
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    assert!(healed, "listening again on {addr}");
    sim.shutdown().await;
}
