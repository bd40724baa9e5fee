//! The admin API: drain lets in-flight streams finish and sends nothing new; writes need the
//! bearer token (401 without it, and nothing changes) or are disabled with no token (403);
//! reads, the report and the status page are served to loopback peers.

use crate::support::gateway::*;
use bytes::Bytes;
use laneway::gateway::GatewayConfig;

const TOKEN: &str = "test-admin-token";

fn with_token(mut config: GatewayConfig) -> GatewayConfig {
    config.admin.token = Some(TOKEN.into());
    config
}

async fn post_admin(
    gateway: &laneway::gateway::GatewayHandle,
    path: &str,
    token: Option<&str>,
) -> u16 {
    let mut request = reqwest::Client::new().post(admin_url(gateway, path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().status().as_u16()
}

fn replica_state<'a>(replicas: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    replicas["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed"))
}

#[tokio::test]
async fn drain_lets_in_flight_streams_finish_and_sends_nothing_new() {
    let mut stub = start_stub().await;
    let sims = start_sims(1, 1).await;
    let replicas = vec![replica("stub", stub.addr), replica("sim-0", sims[0].addr())];
    let gateway = start_gateway(with_token(loopback_config(replicas))).await;
    let client = reqwest::Client::new();
    // Only the stub is in rotation while the long stream starts.
    assert_eq!(post_admin(&gateway, "/admin/replicas/sim-0/drain", Some(TOKEN)).await, 200);
    let mut stream = post_chat(&client, &gateway, &chat_body(20, 8, true)).await;
    assert_eq!(header(&stream, "x-laneway-replica"), "stub");
    let chunks = stub.streams.recv().await.unwrap();
    let event = |text: &str| {
        Bytes::from(format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n"))
    };
    chunks.send(event("one")).await.unwrap();
    let mut received = String::new();
    read_until(&mut stream, &mut received, "one").await;
    // Swap: the stub drains with its stream open, the sim serves again.
    assert_eq!(post_admin(&gateway, "/admin/replicas/sim-0/undrain", Some(TOKEN)).await, 200);
    assert_eq!(post_admin(&gateway, "/admin/replicas/stub/drain", Some(TOKEN)).await, 200);
    let replicas = admin_json(&gateway, "/admin/replicas").await;
    assert_eq!(replica_state(&replicas, "stub")["draining"], true);
    assert_eq!(replica_state(&replicas, "stub")["in_flight"], 1);
    assert_eq!(replica_state(&replicas, "stub")["unanswered"], 0, "streaming: it answered");
    assert_eq!(replica_state(&replicas, "sim-0")["draining"], false);
    for _ in 0..10 {
        let response = post_chat(&client, &gateway, &chat_body(20, 2, false)).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-laneway-replica"), "sim-0");
    }
    assert!(stub.streams.try_recv().is_err(), "a new request reached the draining stub");
    // The stream that was in flight finishes normally.
    chunks.send(event("two")).await.unwrap();
    chunks.send(Bytes::from_static(b"data: [DONE]\n\n")).await.unwrap();
    drop(chunks);
    read_until(&mut stream, &mut received, "[DONE]").await;
    assert!(received.contains("two"));
    assert!(stream.chunk().await.unwrap().is_none());
    wait_until("the drained stream released", || gateway.replica_in_flight("stub") == 0).await;
    // Everything drained: new requests get 503, not a hang.
    assert_eq!(post_admin(&gateway, "/admin/replicas/sim-0/drain", Some(TOKEN)).await, 200);
    let response = post_chat(&client, &gateway, &chat_body(20, 2, false)).await;
    assert_eq!(response.status(), 503);
    gateway.shutdown().await;
}

#[tokio::test]
async fn writes_without_the_token_get_401_and_change_nothing() {
    let sims = start_sims(2, 1).await;
    let gateway = start_gateway(with_token(config_for(&sims))).await;
    let client = reqwest::Client::new();
    let before = admin_json(&gateway, "/admin/variants").await;
    for token in [None, Some("wrong-token"), Some("test-admin-toke")] {
        let mut put = client
            .put(admin_url(&gateway, "/admin/variants/short"))
            .json(&serde_json::json!({"weights": {"default": 5}}));
        if let Some(token) = token {
            put = put.bearer_auth(token);
        }
        let response = put.send().await.unwrap();
        assert_eq!(response.status(), 401, "{token:?}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "AuthenticationError");
        assert_eq!(body["error"]["code"], 401);
        assert_eq!(post_admin(&gateway, "/admin/replicas/sim-0/drain", token).await, 401);
    }
    assert_eq!(admin_json(&gateway, "/admin/variants").await, before);
    let replicas = admin_json(&gateway, "/admin/replicas").await;
    assert_eq!(replica_state(&replicas, "sim-0")["draining"], false);
    // With the token, the same write is applied.
    let response = client
        .put(admin_url(&gateway, "/admin/variants/short"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"weights": {"default": 5}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let after = admin_json(&gateway, "/admin/variants").await;
    assert_eq!(after["entries"][0]["variants"][0]["weight"], 5);
    // Bad writes are refused whole, in the OpenAI error shape.
    for (body, status) in [
        (serde_json::json!({"weights": {"nope": 1}}), 400),
        (serde_json::json!({"weights": {"default": 0}}), 400),
        (serde_json::json!({"weight": 1}), 400),
    ] {
        let response = client
            .put(admin_url(&gateway, "/admin/variants/short"))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{body}");
    }
    // An oversized body is refused before any handler reads it, and changes nothing.
    let padding = "x".repeat(laneway::gateway::admin::ADMIN_BODY_LIMIT_BYTES);
    let response = client
        .put(admin_url(&gateway, "/admin/variants/short"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"weights": {"default": 1}, "padding": padding}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    assert_eq!(post_admin(&gateway, "/admin/replicas/nope/drain", Some(TOKEN)).await, 404);
    assert_eq!(
        admin_json(&gateway, "/admin/variants").await["entries"][0]["variants"][0]["weight"],
        5
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn without_a_token_writes_are_disabled_and_loopback_reads_work() {
    let sims = start_sims(1, 1).await;
    let gateway = start_gateway(config_for(&sims)).await;
    let response = reqwest::Client::new()
        .post(admin_url(&gateway, "/admin/replicas/sim-0/drain"))
        .bearer_auth("anything-at-all")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("admin writes disabled"));
    let replicas = admin_json(&gateway, "/admin/replicas").await;
    assert_eq!(replica_state(&replicas, "sim-0")["draining"], false);
    let report = admin_json(&gateway, "/admin/canary").await;
    assert_eq!(report["entries"][0]["baseline"], "default");
    let text = reqwest::Client::new()
        .get(admin_url(&gateway, "/admin/canary"))
        .header("accept", "text/plain")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.starts_with("entry short (baseline default)"), "{text}");
    let page = reqwest::get(admin_url(&gateway, "/")).await.unwrap();
    assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
    let page = page.text().await.unwrap();
    assert!(page.contains("/admin/replicas") && page.contains("setInterval(refresh, 2000)"));
    gateway.shutdown().await;
}
