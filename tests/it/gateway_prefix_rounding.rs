//! Reports in the engine's own blocks: replicas of the `vllm-cpu-tiny` profile cache
//! 128-token blocks, as vLLM's CPU backend does, and report every hit rounded down to one,
//! short of what the gateway's 16-token index predicted. The gateway learns the unit, shows
//! it in `/admin/replicas`, and reads no such hit as an eviction (it once dropped every
//! other prompt's entries at each one).

use crate::support::gateway::*;
use laneway::sim::{self, SimConfig};
use laneway::tokens::synthetic_text;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

const GROUPS: u64 = 4;
const PER_GROUP: u64 = 4;

/// Group `group`'s context (of a length that is no multiple of 128) and a question of its own.
fn body(group: u64, question: u64) -> Value {
    let context = synthetic_text(900 + 150 * group, &mut StdRng::seed_from_u64(group));
    let question = synthetic_text(30, &mut StdRng::seed_from_u64(1000 + question));
    json!({
        "model": "tiny",
        "messages": [{"role": "system", "content": context}, {"role": "user", "content": question}],
        "max_tokens": 2,
    })
}

#[tokio::test]
async fn hits_rounded_down_to_the_engines_block_teach_its_unit_and_correct_nothing() {
    // One replica: every group's reports reach the same unit.
    let mut config = SimConfig::with_profile("r0", "vllm-cpu-tiny").unwrap();
    config.speed = SPEED;
    let sims = vec![sim::spawn(config).await.unwrap()];
    let gateway = start_gateway(config_for(&sims)).await;
    let client = reqwest::Client::new();
    let mut cached = Vec::new();
    for question in 0..PER_GROUP {
        for group in 0..GROUPS {
            let response = client
                .post(url(&gateway, "/v1/chat/completions"))
                .json(&body(group, question * GROUPS + group))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            let answer: Value = response.json().await.unwrap();
            cached
                .push(answer["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap());
        }
    }
    let hits = cached.iter().filter(|&&tokens| tokens > 0).count();
    assert!(hits >= (GROUPS * (PER_GROUP - 1)) as usize, "cached tokens {cached:?}");
    assert!(cached.iter().all(|tokens| tokens % 128 == 0), "whole blocks: {cached:?}");
    wait_until("every response recorded", || {
        sims.iter().all(|s| gateway.replica_in_flight(s.id()) == 0)
    })
    .await;
    let metrics = gateway.metrics_text();
    let predicted = sample(&metrics, "laneway_prefix_tokens_total{source=\"predicted\"}").unwrap();
    let reported = sample(&metrics, "laneway_prefix_tokens_total{source=\"reported\"}").unwrap();
    assert!(reported < predicted, "the reports read short: {reported} of {predicted}");
    assert_eq!(sample(&metrics, "laneway_prefix_index_corrected_total"), Some(0.0));
    let replicas = admin_json(&gateway, "/admin/replicas").await;
    assert_eq!(replicas["replicas"][0]["cache_unit_tokens"], 128, "{replicas:#}");
    gateway.shutdown().await;
}
