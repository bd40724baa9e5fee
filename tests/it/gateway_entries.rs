//! Requests land in their entries: short and long by input length, by header, by dedicated
//! listener; the debug entry passes a replica's responses through byte for byte; paths the
//! gateway does not know are forwarded.

use crate::support::gateway::*;
use laneway::gateway::Entry;

#[tokio::test]
async fn short_and_long_inputs_land_in_their_entries() {
    let sims = start_sims(2, 1).await;
    let gateway = start_gateway(config_for(&sims)).await;
    let client = reqwest::Client::new();
    for (prompt_tokens, entry, strategy) in [
        (100, "short", "force_close"),
        (2048, "short", "force_close"),
        (3000, "long", "force_close"),
    ] {
        let response = post_chat(&client, &gateway, &chat_body(prompt_tokens, 3, false)).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-laneway-entry"), entry, "{prompt_tokens} tokens");
        assert_eq!(header(&response, "x-laneway-strategy"), strategy);
        assert_eq!(header(&response, "x-laneway-variant"), "default");
        let replica = header(&response, "x-laneway-replica");
        assert_eq!(header(&response, "x-sim-replica"), replica);
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["usage"]["prompt_tokens"], prompt_tokens);
    }
    let metrics = gateway.metrics_text();
    // 100 tokens fit in a body too small to hold 2048; 2048 tokens must be parsed.
    assert_eq!(
        sample(&metrics, "laneway_classified_total{entry=\"short\",method=\"content_length\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, "laneway_classified_total{entry=\"short\",method=\"parsed\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, "laneway_classified_total{entry=\"long\",method=\"parsed\"}"),
        Some(1.0)
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn small_bodies_are_classified_by_length_and_headers_override() {
    let sims = start_sims(1, 1).await;
    let gateway = start_gateway(config_for(&sims)).await;
    let client = reqwest::Client::new();
    let small = client
        .post(url(&gateway, "/v1/completions"))
        .json(&serde_json::json!({"model": "m", "prompt": "hello", "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&small, "x-laneway-entry"), "short");
    let forced = client
        .post(url(&gateway, "/v1/completions"))
        .header("x-laneway-entry", "long")
        .json(&serde_json::json!({"model": "m", "prompt": "hello", "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(forced.status(), 200);
    assert_eq!(header(&forced, "x-laneway-entry"), "long");
    let metrics = gateway.metrics_text();
    assert_eq!(
        sample(&metrics, "laneway_classified_total{entry=\"short\",method=\"content_length\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, "laneway_classified_total{entry=\"long\",method=\"header\"}"),
        Some(1.0)
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn dedicated_entry_listeners_fix_the_entry() {
    let sims = start_sims(1, 1).await;
    let mut config = config_for(&sims);
    config.long.listen = Some("127.0.0.1:0".parse().unwrap());
    config.debug.listen = Some("127.0.0.1:0".parse().unwrap());
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    let long_addr = gateway.entry_addr(Entry::Long).unwrap();
    let response = client
        .post(format!("http://{long_addr}/v1/chat/completions"))
        .json(&chat_body(10, 2, false))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&response, "x-laneway-entry"), "long");
    let debug_addr = gateway.entry_addr(Entry::Debug).unwrap();
    let response = client
        .get(format!("http://{debug_addr}/v1/models"))
        .header("x-laneway-replica", "sim-0")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-laneway-entry"), "debug");
    assert_eq!(header(&response, "x-laneway-replica"), "sim-0");
    assert!(gateway.entry_addr(Entry::Short).is_none());
    // On the smart listener the header pair selects the debug entry too.
    let response = client
        .get(url(&gateway, "/v1/models"))
        .header("x-laneway-entry", "debug")
        .header("x-laneway-replica", "sim-0")
        .send()
        .await
        .unwrap();
    assert_eq!(header(&response, "x-laneway-entry"), "debug");
    let health: serde_json::Value = reqwest::get(format!("http://{}/health", gateway.admin_addr()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["replicas"][0]["name"], "sim-0");
    gateway.shutdown().await;
}

#[tokio::test]
async fn debug_entry_returns_a_replicas_metrics_byte_for_byte() {
    let stub = start_stub().await;
    let gateway = start_gateway(loopback_config(vec![replica("stub", stub.addr)])).await;
    let direct = reqwest::get(format!("http://{}/metrics", stub.addr)).await.unwrap();
    let direct = direct.bytes().await.unwrap();
    assert_eq!(&direct[..], STUB_METRICS);
    let through = reqwest::get(url(&gateway, "/debug/stub/metrics")).await.unwrap();
    assert_eq!(header(&through, "x-laneway-entry"), "debug");
    assert_eq!(header(&through, "x-laneway-replica"), "stub");
    assert_eq!(through.bytes().await.unwrap(), direct);
    let unknown = reqwest::get(url(&gateway, "/debug/nobody/metrics")).await.unwrap();
    assert_eq!(unknown.status(), 404);
    gateway.shutdown().await;
}

#[tokio::test]
async fn debug_entry_reaches_the_named_sim_on_any_path() {
    let sims = start_sims(2, 1).await;
    let gateway = start_gateway(config_for(&sims)).await;
    for name in ["sim-0", "sim-1"] {
        let health = reqwest::get(url(&gateway, &format!("/debug/{name}/health"))).await.unwrap();
        assert_eq!(health.status(), 200);
        assert_eq!(header(&health, "x-sim-replica"), name);
        let metrics = reqwest::get(url(&gateway, &format!("/debug/{name}/metrics"))).await.unwrap();
        assert!(metrics.text().await.unwrap().contains("vllm:num_requests_waiting"));
    }
    gateway.shutdown().await;
}

#[tokio::test]
async fn only_served_and_opened_paths_reach_a_replica() {
    let sims = start_sims(1, 1).await;
    let mut config = config_for(&sims);
    config.routes = laneway::gateway::config::RoutesConfig::forwarding(&["/version"]).unwrap();
    let gateway = start_gateway(config).await;
    // `/v1/models` is answered by the gateway once it knows the replicas' models (see
    // tests/tenants.rs), by a replica before that: a list either way.
    let response = reqwest::get(url(&gateway, "/v1/models")).await.unwrap();
    assert_eq!(response.status(), 200);
    let models: serde_json::Value = response.json().await.unwrap();
    assert_eq!(models["object"], "list");
    let version = reqwest::get(url(&gateway, "/version")).await.unwrap();
    assert_eq!(version.status(), 200);
    assert_eq!(header(&version, "x-laneway-replica"), "sim-0");
    // A path nobody opened, a replica's control endpoint among them, is the gateway's 404.
    let client = reqwest::Client::new();
    for (method, path) in [("GET", "/tokenize"), ("POST", "/reset_prefix_cache"), ("GET", "/")] {
        let method = method.parse().unwrap();
        let response = client.request(method, url(&gateway, path)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
        assert!(response.headers().get("x-laneway-replica").is_none(), "{path}");
        let error: serde_json::Value = response.json().await.unwrap();
        assert_eq!(error["error"]["type"], "NotFoundError", "{path}");
    }
    gateway.shutdown().await;
}

#[tokio::test]
async fn the_health_route_is_the_gateways_own() {
    let sims = start_sims(1, 1).await;
    let mut config = config_for(&sims);
    config.admin.token = Some("t".into());
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    let response = client.get(url(&gateway, "/health")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("x-laneway-replica").is_none());
    // With its only replica drained, the gateway cannot take requests: 503.
    let admin = crate::support::gateway::admin_url(&gateway, "/admin/replicas/sim-0/drain");
    let drained = client.post(admin).bearer_auth("t").send().await.unwrap();
    assert_eq!(drained.status(), 200);
    let response = client.head(url(&gateway, "/health")).send().await.unwrap();
    assert_eq!(response.status(), 503);
    gateway.shutdown().await;
}

#[tokio::test]
async fn head_requests_and_empty_bodies_are_not_counted_as_disconnects() {
    let sims = start_sims(1, 1).await;
    let mut config = config_for(&sims);
    config.routes = laneway::gateway::config::RoutesConfig::forwarding(&["/version"]).unwrap();
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    let response = client.head(url(&gateway, "/version")).send().await.unwrap();
    assert_eq!(header(&response, "x-laneway-replica"), "sim-0");
    let response = client.get(url(&gateway, "/version")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.bytes().await.unwrap();
    wait_until("requests released", || gateway.replica_in_flight("sim-0") == 0).await;
    let metrics = gateway.metrics_text();
    assert_eq!(
        sample(
            &metrics,
            "laneway_request_errors_total{entry=\"short\",kind=\"client_disconnect\"}"
        ),
        None
    );
    gateway.shutdown().await;
}
