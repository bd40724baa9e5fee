//! Prefix-aware placement and session affinity through the gateway, against simulated
//! replicas with prefix caching: on a shared-prefix workload `prefix_aware` gets a higher
//! hit ratio (as the replicas report it) than `least_queue`, its reported-token counter
//! agrees with the responses, and sessions stick to one replica until it is drained.

use std::collections::{HashMap, HashSet};

use crate::support::gateway::*;
use futures_util::StreamExt;
use laneway::gateway::config::PolicyKind;
use laneway::tokens::synthetic_text;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

const GROUPS: u64 = 8;
const PER_GROUP: u64 = 8;
const CONTEXT_TOKENS: u64 = 600;
const QUESTION_TOKENS: u64 = 24;
const CONCURRENCY: usize = 4;

/// Request `n` of the workload: group `n % GROUPS`'s context and a question of its own.
fn shared_prefix_body(n: u64) -> Value {
    let context = synthetic_text(CONTEXT_TOKENS, &mut StdRng::seed_from_u64(n % GROUPS));
    let question = synthetic_text(QUESTION_TOKENS, &mut StdRng::seed_from_u64(1000 + n));
    json!({
        "model": "m",
        "messages": [{"role": "system", "content": context}, {"role": "user", "content": question}],
        "max_tokens": 4,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
}

/// The usage object of a streamed response's usage chunk.
fn usage_of(text: &str) -> Value {
    text.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .find_map(|event| event.get("usage").filter(|u| !u.is_null()).cloned())
        .expect("a usage chunk")
}

struct Run {
    prompt_tokens: u64,
    cached_tokens: u64,
    reported_by_gateway: f64,
}

/// Sends the shared-prefix workload through a gateway with `policy` over four sims.
async fn run_shared_prefix(policy: PolicyKind) -> Run {
    let sims = start_sims(4, 1).await;
    let gateway = start_gateway(with_policy(config_for(&sims), policy)).await;
    let client = reqwest::Client::new();
    let usages: Vec<Value> = futures_util::stream::iter(0..GROUPS * PER_GROUP)
        .map(|n| {
            let request =
                client.post(url(&gateway, "/v1/chat/completions")).json(&shared_prefix_body(n));
            async move {
                let response = request.send().await.unwrap();
                assert_eq!(response.status(), 200);
                usage_of(&response.text().await.unwrap())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let sum = |field: &dyn Fn(&Value) -> u64| usages.iter().map(field).sum::<u64>();
    let prompt_tokens = sum(&|u| u["prompt_tokens"].as_u64().unwrap());
    let cached_tokens = sum(&|u| u["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap());
    let reported = "laneway_prefix_tokens_total{source=\"reported\"}";
    wait_until("every response recorded", || {
        sims.iter().all(|s| gateway.replica_in_flight(s.id()) == 0)
    })
    .await;
    let reported_by_gateway = sample(&gateway.metrics_text(), reported).unwrap_or(0.0);
    gateway.shutdown().await;
    let ratio = cached_tokens as f64 / prompt_tokens as f64;
    println!("{}: hit ratio {ratio:.3} ({cached_tokens}/{prompt_tokens})", policy.as_str());
    Run { prompt_tokens, cached_tokens, reported_by_gateway }
}

#[tokio::test]
async fn prefix_aware_gets_more_cache_hits_than_least_queue_on_shared_prefixes() {
    let aware = run_shared_prefix(PolicyKind::PrefixAware).await;
    let blind = run_shared_prefix(PolicyKind::LeastQueue).await;
    let ratio = |run: &Run| run.cached_tokens as f64 / run.prompt_tokens as f64;
    // Each group's context is computed once under prefix_aware (8 misses of 64); least_queue
    // computes it on every replica a group reaches.
    assert!(ratio(&aware) > 0.75, "prefix_aware hit ratio {:.3}", ratio(&aware));
    assert!(
        ratio(&aware) > ratio(&blind) + 0.15,
        "prefix_aware {:.3} vs least_queue {:.3}",
        ratio(&aware),
        ratio(&blind)
    );
    assert_eq!(aware.reported_by_gateway, aware.cached_tokens as f64);
    assert_eq!(blind.reported_by_gateway, 0.0, "least_queue predicts nothing");
}

/// The replica each of `sessions` is served by, `rounds` requests each; panics if a session
/// is served by two replicas.
async fn session_homes(
    gateway: &laneway::gateway::GatewayHandle,
    sessions: &[String],
    rounds: usize,
) -> HashMap<String, String> {
    let client = reqwest::Client::new();
    let mut homes = HashMap::new();
    for session in sessions {
        let mut served = HashSet::new();
        for _ in 0..rounds {
            let response = client
                .post(url(gateway, "/v1/chat/completions"))
                .header("x-session-id", session)
                .json(&chat_body(40, 2, false))
                .send()
                .await
                .unwrap();
            served.insert(header(&response, "x-laneway-replica"));
            response.bytes().await.unwrap();
        }
        assert_eq!(served.len(), 1, "session {session} was served by {served:?}");
        homes.insert(session.clone(), served.into_iter().next().unwrap());
    }
    homes
}

#[tokio::test]
async fn sessions_stick_to_one_replica_and_only_a_drained_replicas_sessions_move() {
    let sims = start_sims(4, 1).await;
    let gateway = start_gateway(with_policy(config_for(&sims), PolicyKind::PrefixAware)).await;
    let sessions: Vec<String> = (0..24).map(|n| format!("conversation-{n}")).collect();
    let before = session_homes(&gateway, &sessions, 3).await;
    let used: HashSet<&String> = before.values().collect();
    assert!(used.len() >= 3, "24 sessions over 4 replicas used only {used:?}");
    let drained = before["conversation-0"].clone();
    gateway.state().picker.by_name(&drained).unwrap().set_draining(true);
    let after = session_homes(&gateway, &sessions, 2).await;
    for session in &sessions {
        if before[session] == drained {
            assert_ne!(after[session], drained, "{session} stayed on the drained replica");
        } else {
            assert_eq!(after[session], before[session], "{session} moved needlessly");
        }
    }
    gateway.shutdown().await;
}
