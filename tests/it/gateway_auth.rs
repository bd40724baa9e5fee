//! API keys on the inference listeners (missing, wrong, right; the per-key counter), and
//! request ids: a client's id and a made one both reach the replica, come back on the
//! response, and appear in the access line.

use std::sync::Arc;

use crate::support::gateway::{chat_body, loopback_config, replica, start_gateway, url};
use axum::Router;
use axum::http::HeaderMap;
use axum::routing::post;
use dashmap::DashSet;
use laneway::gateway::config::ApiKeys;

/// A replica that answers every chat request with a tiny JSON completion and remembers
/// the `x-request-id` it was sent.
async fn start_echo_replica() -> (std::net::SocketAddr, Arc<DashSet<String>>) {
    let seen = Arc::new(DashSet::new());
    let ids = seen.clone();
    let chat = move |headers: HeaderMap| {
        let ids = ids.clone();
        async move {
            let id = headers.get("x-request-id").map(|v| v.to_str().unwrap().to_string());
            ids.insert(id.unwrap_or_else(|| "<none>".into()));
            axum::Json(serde_json::json!({
                "choices": [{"message": {"role": "assistant", "content": "hi"}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
            }))
        }
    };
    let app = Router::new().route("/v1/chat/completions", post(chat));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

#[tokio::test]
async fn missing_wrong_and_right_keys() {
    let (addr, _) = start_echo_replica().await;
    let mut config = loopback_config(vec![replica("echo", addr)]);
    config.auth = Some(ApiKeys::new(["sk-alpha", "sk-beta"], true));
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    let body = chat_body(10, 1, false);
    let post = |key: Option<&str>| {
        let mut request = client.post(url(&gateway, "/v1/chat/completions")).json(&body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    };

    for (key, message) in [(None, "missing API key"), (Some("sk-gamma"), "invalid API key")] {
        let response = post(key).await.unwrap();
        assert_eq!(response.status(), 401);
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let error: serde_json::Value = response.json().await.unwrap();
        assert_eq!(error["error"]["type"], "AuthenticationError", "{error}");
        assert!(error["error"]["message"].as_str().unwrap().contains(message), "{error}");
    }
    // The debug path is an inference listener too.
    let debug = client.get(url(&gateway, "/debug/echo/metrics")).send().await.unwrap();
    assert_eq!(debug.status(), 401);

    for key in ["sk-alpha", "sk-alpha", "sk-beta"] {
        let response = post(Some(key)).await.unwrap();
        assert_eq!(response.status(), 200);
    }
    let metrics = gateway.metrics_text();
    let counts: Vec<f64> = metrics
        .lines()
        .filter(|line| line.starts_with("laneway_requests_by_key_total{"))
        .map(|line| line.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    let mut sorted = counts.clone();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(sorted, [1.0, 2.0], "{metrics}");
    assert!(!metrics.contains("sk-alpha"));
    // The debug request's refusal is counted under its own entry.
    assert!(
        metrics.contains("laneway_request_errors_total{entry=\"short\",kind=\"unauthorized\"} 2")
    );
    assert!(
        metrics.contains("laneway_request_errors_total{entry=\"debug\",kind=\"unauthorized\"} 1")
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn without_count_by_key_the_counter_stays_empty() {
    let (addr, _) = start_echo_replica().await;
    let mut config = loopback_config(vec![replica("echo", addr)]);
    config.auth = Some(ApiKeys::new(["sk-alpha"], false));
    let gateway = start_gateway(config).await;
    let response = reqwest::Client::new()
        .post(url(&gateway, "/v1/chat/completions"))
        .bearer_auth("sk-alpha")
        .json(&chat_body(10, 1, false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(!gateway.metrics_text().contains("laneway_requests_by_key_total{"));
    gateway.shutdown().await;
}

#[tokio::test]
async fn request_ids_are_kept_or_made_and_reach_the_replica() {
    let (addr, seen) = start_echo_replica().await;
    let gateway = start_gateway(loopback_config(vec![replica("echo", addr)])).await;
    let client = reqwest::Client::new();
    let body = chat_body(10, 1, false);

    let kept = client
        .post(url(&gateway, "/v1/chat/completions"))
        .header("x-request-id", "client-id-42")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(kept.headers()["x-request-id"], "client-id-42");

    let mut made = Vec::new();
    for _ in 0..3 {
        let response =
            client.post(url(&gateway, "/v1/chat/completions")).json(&body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        made.push(response.headers()["x-request-id"].to_str().unwrap().to_string());
    }
    assert!(made.iter().all(|id| id.starts_with("lw-")), "{made:?}");
    assert_eq!(made.iter().collect::<std::collections::HashSet<_>>().len(), 3);
    assert!(seen.contains("client-id-42"));
    for id in &made {
        assert!(seen.contains(id), "{id} did not reach the replica");
    }
    assert!(!seen.contains("<none>"));

    // The gateway's own error responses carry one too.
    let bad = client
        .post(url(&gateway, "/v1/chat/completions"))
        .header("x-request-id", "bad-one")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(bad.headers()["x-request-id"], "bad-one");
    gateway.shutdown().await;
}
