//! Placements shared between gateways through a real Redis (`[limits] store` with
//! `prefix.share_sessions` and `prefix.share_prefixes`): a session one gateway moved off its
//! home is followed to where it went by another gateway at its next turn, where a gateway
//! without the store sends it home, and so is a conversation that names no session; a prefix one gateway placed is placed on the same
//! replica by another, which hits its cache; and a store that does not answer costs
//! requests nothing but the sharing. Each test runs its own `redis-server` on a free
//! loopback port; without the binary the tests say so and pass.

use std::time::Duration;

use crate::support::gateway::*;
use crate::support::redis::RedisServer;
use laneway::gateway::GatewayHandle;
use laneway::gateway::config::{GatewayConfig, PolicyKind, QuotaStoreConfig};
use laneway::sim::SimHandle;
use serde_json::{Value, json};

/// Turn `turn` (from 1) of one conversation: every earlier question and answer and a new
/// question, `2 * turn - 1` messages of about 100 tokens each.
fn turn_body(turn: usize) -> Value {
    let messages: Vec<Value> = (1..2 * turn)
        .map(|n| {
            let role = if n % 2 == 1 { "user" } else { "assistant" };
            json!({"role": role, "content": format!("message {n} ").repeat(30)})
        })
        .collect();
    json!({"model": "m", "messages": messages, "max_tokens": 2})
}

/// Sends `body` through `gateway` (as `session`, if given): the replica that served it and
/// the cached prompt tokens it reported.
async fn send(gateway: &GatewayHandle, body: &Value, session: Option<&str>) -> (String, u64) {
    let mut request = reqwest::Client::new().post(url(gateway, "/v1/chat/completions"));
    if let Some(session) = session {
        request = request.header("x-session-id", session);
    }
    let response = request.json(body).send().await.unwrap();
    assert_eq!(response.status(), 200, "{session:?}");
    let replica = header(&response, "x-laneway-replica");
    let answer: Value = response.json().await.unwrap();
    let cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    (replica, cached)
}

/// The replica that served `session`'s turn `turn` through `gateway`.
async fn served(gateway: &GatewayHandle, session: &str, turn: usize) -> String {
    send(gateway, &turn_body(turn), Some(session)).await.0
}

/// A `prefix_aware` gateway in front of `sims` sharing sessions through the store at `url`.
fn sharing_config(sims: &[SimHandle], url: String) -> GatewayConfig {
    let mut config = with_policy(config_for(sims), PolicyKind::PrefixAware);
    config.quota_store = Some(QuotaStoreConfig {
        url,
        key_prefix: "it-sessions".into(),
        timeout: Duration::from_secs(2),
    });
    config
}

fn store_calls(gateway: &GatewayHandle, op: &str, outcome: &str) -> f64 {
    let series = format!("laneway_prefix_store_total{{op=\"{op}\",outcome=\"{outcome}\"}}");
    sample(&gateway.metrics_text(), &series).unwrap_or(0.0)
}

#[tokio::test]
async fn a_session_moved_by_one_gateway_is_followed_by_another_at_its_next_turn() {
    let test = "a_session_moved_by_one_gateway_is_followed_by_another_at_its_next_turn";
    let Some(redis) = RedisServer::start(test).await else { return };
    let sims = start_sims(4, 1).await;
    let first = start_gateway(sharing_config(&sims, redis.url())).await;
    let second = start_gateway(sharing_config(&sims, redis.url())).await;
    let alone = start_gateway(with_policy(config_for(&sims), PolicyKind::PrefixAware)).await;
    let session = "conversation-moved";

    let home = served(&first, session, 1).await;
    first.state().picker.by_name(&home).unwrap().set_draining(true);
    let moved = served(&first, session, 2).await;
    assert_ne!(moved, home, "the first gateway drained the session's home");
    wait_until("both turns written to the store", || {
        store_calls(&first, "remember_session", "stored") >= 2.0
    })
    .await;

    assert_eq!(
        served(&alone, session, 3).await,
        home,
        "a gateway that neither placed the session nor reads the store sends it home"
    );
    assert_eq!(
        served(&second, session, 3).await,
        moved,
        "a gateway reading the store follows the session to where its conversation is"
    );
    assert_eq!(store_calls(&second, "recall_session", "found"), 1.0);
    // The second gateway now remembers the session itself: its next turn reads nothing.
    assert_eq!(served(&second, session, 4).await, moved);
    assert_eq!(store_calls(&second, "recall_session", "found"), 1.0);
    let keys = redis.keys().await;
    assert!(keys.contains(&format!("it-sessions:session:{}", session_key(session))), "{keys:?}");

    for gateway in [first, second, alone] {
        gateway.shutdown().await;
    }
}

#[tokio::test]
async fn a_sessionless_conversation_moved_by_one_gateway_is_followed_by_another() {
    let test = "a_sessionless_conversation_moved_by_one_gateway_is_followed_by_another";
    let Some(redis) = RedisServer::start(test).await else { return };
    let sims = start_sims(4, 1).await;
    // Sessions shared, prefixes not: only the conversation's placement can lead the second
    // gateway.
    let sessions_only = || {
        let mut config = sharing_config(&sims, redis.url());
        config.prefix.share_prefixes = false;
        config
    };
    let (first, second) =
        (start_gateway(sessions_only()).await, start_gateway(sessions_only()).await);
    let send_turn = |gateway, turn| async move { send(gateway, &turn_body(turn), None).await.0 };

    let opened_on = send_turn(&first, 1).await;
    first.state().picker.by_name(&opened_on).unwrap().set_draining(true);
    let moved = send_turn(&first, 2).await;
    assert_ne!(moved, opened_on);
    first.state().picker.by_name(&opened_on).unwrap().set_draining(false);
    wait_until("the second turn written to the store", || {
        store_calls(&first, "remember_session", "stored") >= 1.0
    })
    .await;
    assert_eq!(store_calls(&first, "remember_session", "stored"), 1.0, "a first turn is not");

    assert_eq!(send_turn(&second, 3).await, moved, "followed to where its history is");
    assert_eq!(store_calls(&second, "recall_session", "found"), 1.0);
    assert_eq!(send_turn(&second, 4).await, moved);
    assert_eq!(store_calls(&second, "recall_session", "found"), 1.0, "remembered since");
    for gateway in [first, second] {
        gateway.shutdown().await;
    }
}

/// The store key's session part: the session header's hash, as the gateway computes it.
fn session_key(session: &str) -> String {
    format!("{:016x}", laneway::gateway::pick::prefix::hash_bytes(session.as_bytes()))
}

/// A request of prefix group `group`: its ~600-token context and question `question`.
fn group_body(group: u64, question: u64) -> Value {
    let context = format!("context of group {group} ").repeat(120);
    json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": context},
            {"role": "user", "content": format!("question {question}")},
        ],
        "max_tokens": 2,
    })
}

#[tokio::test]
async fn a_prefix_placed_by_one_gateway_is_placed_on_its_replica_by_another() {
    let test = "a_prefix_placed_by_one_gateway_is_placed_on_its_replica_by_another";
    let Some(redis) = RedisServer::start(test).await else { return };
    let sims = start_sims(4, 1).await;
    let first = start_gateway(sharing_config(&sims, redis.url())).await;
    let second = start_gateway(sharing_config(&sims, redis.url())).await;
    const GROUPS: u64 = 8;
    let mut computed_on = Vec::new();
    for group in 0..GROUPS {
        let (replica, cached) = send(&first, &group_body(group, 0), None).await;
        assert_eq!(cached, 0, "group {group} is new to the fleet");
        computed_on.push(replica);
    }
    wait_until("every group's prefixes written to the store", || {
        store_calls(&first, "remember_prefix", "stored") >= GROUPS as f64
    })
    .await;
    for group in 0..GROUPS {
        let (replica, cached) = send(&second, &group_body(group, 1), None).await;
        assert_eq!(replica, computed_on[group as usize], "group {group}");
        assert!(cached > 0, "group {group}: the context was cached where it was computed");
    }
    assert_eq!(store_calls(&second, "recall_prefix", "found"), GROUPS as f64);
    for gateway in [first, second] {
        gateway.shutdown().await;
    }
}

#[tokio::test]
async fn a_store_that_does_not_answer_costs_requests_nothing_but_the_sharing() {
    // A port nothing listens on: every connect is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let sims = start_sims(2, 1).await;
    let gateway = start_gateway(sharing_config(&sims, format!("redis://127.0.0.1:{port}"))).await;
    // Second turns of sessions this gateway never saw: each would read the store.
    for n in 0..3 {
        served(&gateway, &format!("conversation-{n}"), 2).await;
    }
    let failed = store_calls(&gateway, "recall_session", "failed");
    let skipped = store_calls(&gateway, "recall_session", "skipped");
    assert!(failed >= 1.0, "the first read fails");
    assert_eq!(failed + skipped, 3.0, "after a failure, reads skip the store for a while");
    gateway.shutdown().await;
}
