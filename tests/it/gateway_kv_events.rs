//! Placement by the engines' own KV-cache events (`[kv_events]`), against simulated
//! replicas that publish them as vLLM does: the gateway finds each replica's publisher
//! through its `/kv_event_sources`, follows it, and places a prompt on the replica whose
//! engine holds its prefix even when the request that computed it never went through the
//! gateway (a client that reaches the replica directly, or another gateway).

use crate::support::gateway::*;
use laneway::gateway::{GatewayConfig, GatewayHandle};
use laneway::sim::{self, SimConfig, SimHandle};
use laneway::tokens::synthetic_text;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

/// The tiny profile's block size.
const BLOCK_SIZE: u64 = 16;
const REPLICAS: usize = 4;
const CONTEXTS: u64 = 8;

async fn start_publishing_sims() -> Vec<SimHandle> {
    let mut sims = Vec::new();
    for index in 0..REPLICAS {
        let mut config = SimConfig::with_profile(format!("sim-{index}"), "tiny").unwrap();
        config.speed = SPEED;
        config.seed = index as u64 + 1;
        config.profile.engine.kv_events = true;
        sims.push(sim::spawn(config).await.unwrap());
    }
    sims
}

/// A gateway in front of `sims` that follows their events.
fn following_config(sims: &[SimHandle]) -> GatewayConfig {
    let mut config = config_for(sims);
    config.prefix.block_size = BLOCK_SIZE;
    config.kv_events.discover = true;
    // The simulators tokenize as the gateway's approximation does.
    config.kv_events.approximate_tokens = true;
    config
}

/// A chat request: context `context`'s system prompt (about 600 tokens), then a question.
fn body(context: u64, question: u64) -> Value {
    let system = synthetic_text(600, &mut StdRng::seed_from_u64(context));
    let user = synthetic_text(20, &mut StdRng::seed_from_u64(10_000 + question));
    json!({
        "model": "m",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": 2,
    })
}

/// Sends `body` to `to` (a gateway or a replica): the replica that served it, if named,
/// and the cached prompt tokens reported.
async fn send(to: &str, body: &Value) -> (Option<String>, u64) {
    let response = reqwest::Client::new()
        .post(format!("http://{to}/v1/chat/completions"))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let replica =
        response.headers().get("x-laneway-replica").map(|name| name.to_str().unwrap().to_string());
    let answer: Value = response.json().await.unwrap();
    let cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    (replica, cached)
}

/// Blocks the gateway's account of `replica` lists, and its verdict.
fn account(gateway: &GatewayHandle, replica: &str) -> (usize, &'static str) {
    let replica = gateway.state().picker.by_name(replica).unwrap();
    let sources = replica.engine_cache.report();
    assert!(sources.len() <= 1, "{sources:?}");
    sources.first().map_or((0, "not followed"), |source| (source.blocks, source.verdict))
}

#[tokio::test]
async fn a_prefix_computed_behind_the_gateways_back_is_placed_where_the_engine_holds_it() {
    let sims = start_publishing_sims().await;
    let config = following_config(&sims);
    // Two gateways follow the same replicas, as several behind one load balancer do.
    let gateways = [start_gateway(config.clone()).await, start_gateway(config).await];
    let names: Vec<String> = sims.iter().map(|sim| sim.id().to_string()).collect();
    for gateway in &gateways {
        wait_until("every replica's publisher followed", || {
            names.iter().all(|name| account(gateway, name).1 != "not followed")
        })
        .await;
    }

    for context in 0..CONTEXTS {
        // A client computes the context on one replica, straight, not through a gateway.
        let holder = &sims[context as usize % REPLICAS];
        let before: Vec<usize> = gateways.iter().map(|g| account(g, holder.id()).0).collect();
        let (_, cached) = send(&holder.addr().to_string(), &body(context, 0)).await;
        assert_eq!(cached, 0, "context {context} is new");
        for (gateway, before) in gateways.iter().zip(before) {
            wait_until("the replica's stored blocks reach the gateway", || {
                account(gateway, holder.id()).0 >= before + (600 / BLOCK_SIZE as usize)
            })
            .await;
        }
        // Neither gateway saw that request; the engine's events told both.
        for (question, gateway) in gateways.iter().enumerate() {
            let asked = body(context, 1 + question as u64);
            let (placed, cached) = send(&gateway.addr().to_string(), &asked).await;
            assert_eq!(placed.as_deref(), Some(holder.id()), "context {context}");
            assert!(cached >= 512, "context {context}: {cached} cached tokens");
        }
    }
    for (gateway, name) in gateways.iter().flat_map(|g| names.iter().map(move |n| (g, n))) {
        assert_eq!(account(gateway, name).1, "known", "{name}");
    }
}

#[tokio::test]
async fn replicas_that_hash_otherwise_are_refused_and_placed_by_the_index() {
    let sims = start_publishing_sims().await;
    let mut config = following_config(&sims);
    // As if the engines ran with another PYTHONHASHSEED than the gateway expects.
    config.kv_events.hash_seed = "1234".into();
    let gateway = start_gateway(config).await;
    let names: Vec<String> = sims.iter().map(|sim| sim.id().to_string()).collect();
    wait_until("every replica's publisher followed", || {
        names.iter().all(|name| account(&gateway, name).1 != "not followed")
    })
    .await;
    let (first, _) = send(&gateway.addr().to_string(), &body(99, 0)).await;
    let first = first.unwrap();
    wait_until("the first block hashed otherwise", || {
        account(&gateway, &first).1 == "hash_mismatch"
    })
    .await;
    assert_eq!(account(&gateway, &first).0, 0, "a refused account lists nothing");
    // The index still knows where it placed the prompt.
    let (again, cached) = send(&gateway.addr().to_string(), &body(99, 1)).await;
    assert_eq!(again.as_deref(), Some(first.as_str()));
    assert!(cached >= 512, "{cached}");
}
