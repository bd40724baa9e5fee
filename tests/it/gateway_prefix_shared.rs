//! Sessions shared between gateways through a real Redis (`[limits] store` with
//! `prefix.share_sessions`): a session one gateway moved off its home is followed to where
//! it went by another gateway at its next turn, where a gateway without the store sends it
//! home; and a store that does not answer costs sessions nothing but the sharing. Each
//! test runs its own `redis-server` on a free loopback port; without the binary the tests
//! say so and pass.

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

/// The replica that served `session`'s turn `turn` through `gateway`.
async fn served(gateway: &GatewayHandle, session: &str, turn: usize) -> String {
    let response = reqwest::Client::new()
        .post(url(gateway, "/v1/chat/completions"))
        .header("x-session-id", session)
        .json(&turn_body(turn))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{session} turn {turn}");
    let replica = header(&response, "x-laneway-replica");
    response.bytes().await.unwrap();
    replica
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
    let series = format!("laneway_prefix_session_store_total{{op=\"{op}\",outcome=\"{outcome}\"}}");
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
        store_calls(&first, "remember", "stored") >= 2.0
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
    assert_eq!(store_calls(&second, "recall", "found"), 1.0);
    // The second gateway now remembers the session itself: its next turn reads nothing.
    assert_eq!(served(&second, session, 4).await, moved);
    assert_eq!(store_calls(&second, "recall", "found"), 1.0);
    let keys = redis.keys().await;
    assert!(keys.contains(&format!("it-sessions:session:{}", session_key(session))), "{keys:?}");

    for gateway in [first, second, alone] {
        gateway.shutdown().await;
    }
}

/// The store key's session part: the session header's hash, as the gateway computes it.
fn session_key(session: &str) -> String {
    format!("{:016x}", laneway::gateway::pick::prefix::hash_bytes(session.as_bytes()))
}

#[tokio::test]
async fn a_store_that_does_not_answer_costs_sessions_nothing_but_the_sharing() {
    // A port nothing listens on: every connect is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let sims = start_sims(2, 1).await;
    let gateway = start_gateway(sharing_config(&sims, format!("redis://127.0.0.1:{port}"))).await;
    // Second turns of sessions this gateway never saw: each would read the store.
    for n in 0..3 {
        served(&gateway, &format!("conversation-{n}"), 2).await;
    }
    let failed = store_calls(&gateway, "recall", "failed");
    let skipped = store_calls(&gateway, "recall", "skipped");
    assert!(failed >= 1.0, "the first read fails");
    assert_eq!(failed + skipped, 3.0, "after a failure, reads skip the store for a while");
    gateway.shutdown().await;
}
