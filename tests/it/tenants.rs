//! Tenants and models: requests go only to the replicas serving their `model` (read from
//! each replica's `/v1/models`, or declared), aliases are renamed for the replicas, unknown
//! names get 404 `model_not_found`, and `GET /v1/models` lists the union.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::support::gateway::*;
use laneway::gateway::config::ApiKeys;
use laneway::gateway::config::PolicyKind;
use laneway::gateway::config::{TenantConfig, TenantLimits, UnknownModel};
use laneway::gateway::{GatewayConfig, GatewayHandle};
use laneway::sim::{self, SimConfig, SimHandle};
use tokio::io::AsyncBufReadExt;

/// A tiny sim named `id` serving `model` and the given LoRA adapters.
async fn start_model_sim(id: &str, model: &str, adapters: &[&str]) -> SimHandle {
    let mut config = SimConfig::with_profile(id, "tiny").unwrap();
    config.speed = SPEED;
    config.profile.served_model_name = model.into();
    config.profile.lora_modules = adapters.iter().map(|a| a.to_string()).collect();
    sim::spawn(config).await.unwrap()
}

/// The ids the gateway's `GET /v1/models` lists.
async fn listed_models(client: &reqwest::Client, gateway: &GatewayHandle) -> BTreeSet<String> {
    let response = client.get(url(gateway, "/v1/models")).send().await.unwrap();
    let body: serde_json::Value = response.json().await.unwrap();
    body["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().into()).collect()
}

/// Waits (at most 10 s) until the gateway lists exactly `expected`.
async fn wait_for_models(client: &reqwest::Client, gateway: &GatewayHandle, expected: &[&str]) {
    let expected: BTreeSet<String> = expected.iter().map(|m| m.to_string()).collect();
    for _ in 0..1000 {
        if listed_models(client, gateway).await == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the gateway never listed {expected:?}");
}

/// Sends `count` requests for `model`; returns the replicas that served them and the
/// model names the replicas answered with.
async fn send(
    client: &reqwest::Client,
    gateway: &GatewayHandle,
    model: &str,
    count: usize,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut replicas, mut answered) = (BTreeSet::new(), BTreeSet::new());
    for _ in 0..count {
        let mut body = chat_body(20, 2, false);
        body["model"] = model.into();
        let response = client.post(url(gateway, "/v1/chat/completions")).json(&body);
        let response = response.send().await.unwrap();
        assert_eq!(response.status(), 200, "{model}");
        replicas.insert(header(&response, "x-laneway-replica"));
        let body: serde_json::Value = response.json().await.unwrap();
        answered.insert(body["model"].as_str().unwrap().to_string());
    }
    (replicas, answered)
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[tokio::test]
async fn each_model_reaches_only_its_replicas() {
    let sims = vec![
        start_model_sim("alpha-0", "alpha", &[]).await,
        start_model_sim("alpha-1", "alpha", &["alpha-sql"]).await,
        start_model_sim("beta-0", "beta", &[]).await,
    ];
    // Spread by load: every request here sends the same prompt.
    let mut config = with_policy(config_for(&sims), PolicyKind::LeastQueue);
    config.models.unknown = UnknownModel::Reject;
    config.models.aliases.insert("gpt-4o".into(), "beta".into());
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    wait_for_models(&client, &gateway, &["alpha", "alpha-sql", "beta", "gpt-4o"]).await;

    let (replicas, answered) = send(&client, &gateway, "alpha", 20).await;
    assert_eq!((replicas, answered), (set(&["alpha-0", "alpha-1"]), set(&["alpha"])));
    let (replicas, _) = send(&client, &gateway, "beta", 10).await;
    assert_eq!(replicas, set(&["beta-0"]));
    // The adapter is loaded on one replica only.
    let (replicas, _) = send(&client, &gateway, "alpha-sql", 10).await;
    assert_eq!(replicas, set(&["alpha-1"]));
    // An alias is renamed: the replica saw (and answered with) the model it serves.
    let (replicas, answered) = send(&client, &gateway, "gpt-4o", 5).await;
    assert_eq!((replicas, answered), (set(&["beta-0"]), set(&["beta"])));

    let mut body = chat_body(20, 2, false);
    body["model"] = "nope".into();
    let response = client.post(url(&gateway, "/v1/chat/completions")).json(&body);
    let response = response.send().await.unwrap();
    assert_eq!(response.status(), 404);
    let error: serde_json::Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "model_not_found", "{error}");
    assert_eq!(error["error"]["type"], "NotFoundError");
    assert!(error["error"]["message"].as_str().unwrap().contains("`nope`"));

    let metrics =
        client.get(admin_url(&gateway, "/metrics")).send().await.unwrap().text().await.unwrap();
    let by_model = |model: &str| {
        sample(&metrics, &format!("laneway_requests_by_model_total{{model=\"{model}\"}}"))
    };
    assert_eq!(by_model("alpha"), Some(20.0));
    assert_eq!(by_model("beta"), Some(15.0));
    assert_eq!(by_model("alpha-sql"), Some(10.0));
    gateway.shutdown().await;
}

#[tokio::test]
async fn declared_models_and_the_catch_all() {
    let sims =
        vec![start_model_sim("a", "alpha", &[]).await, start_model_sim("b", "beta", &[]).await];
    let mut config = config_for(&sims);
    // Declared lists replace what a replica reports.
    config.models.declared.insert("a".into(), vec!["declared".into()]);
    config.models.unknown = UnknownModel::ServeAs("beta".into());
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    wait_for_models(&client, &gateway, &["beta", "declared"]).await;
    let (replicas, answered) = send(&client, &gateway, "declared", 5).await;
    assert_eq!((replicas, answered), (set(&["a"]), set(&["declared"])));
    // Anything else is served as the catch-all model.
    let (replicas, answered) = send(&client, &gateway, "whatever", 5).await;
    assert_eq!((replicas, answered), (set(&["b"]), set(&["beta"])));
    gateway.shutdown().await;
}

#[tokio::test]
async fn by_default_any_name_reaches_any_replica() {
    let sims =
        vec![start_model_sim("a", "alpha", &[]).await, start_model_sim("b", "beta", &[]).await];
    // Spread by load: every request here sends the same prompt.
    let gateway = start_gateway(with_policy(config_for(&sims), PolicyKind::LeastQueue)).await;
    let client = reqwest::Client::new();
    wait_for_models(&client, &gateway, &["alpha", "beta"]).await;
    // A single-model fleet's clients send whatever name they hard-code.
    let (replicas, answered) = send(&client, &gateway, "m", 20).await;
    assert_eq!((replicas, answered), (set(&["a", "b"]), set(&["m"])));
    gateway.shutdown().await;
}

pub(crate) fn tenant(name: &str, key: &str, limits: TenantLimits) -> TenantConfig {
    TenantConfig {
        name: name.into(),
        keys: vec![key.into()],
        limits,
        weight: 1,
        priority: 4,
        max_priority: 4,
    }
}

/// A config whose tenants are `tenants` (their keys become the API keys).
pub(crate) fn with_tenants(sims: &[SimHandle], tenants: Vec<TenantConfig>) -> GatewayConfig {
    let mut config = config_for(sims);
    let keys: Vec<&str> = tenants.iter().flat_map(|t| t.keys.iter().map(String::as_str)).collect();
    config.auth = Some(ApiKeys::new(keys, false));
    config.tenants = tenants;
    config
}

pub(crate) async fn post_as(
    client: &reqwest::Client,
    gateway: &GatewayHandle,
    key: &str,
    body: &serde_json::Value,
) -> reqwest::Response {
    let request = client.post(url(gateway, "/v1/chat/completions")).bearer_auth(key).json(body);
    request.send().await.unwrap()
}

#[tokio::test]
async fn a_tenant_over_its_token_budget_gets_429_with_rate_limit_headers() {
    let sims = start_sims(1, 1).await;
    let small = TenantLimits { tokens_per_minute: Some(1000), ..Default::default() };
    let gateway =
        start_gateway(with_tenants(&sims, vec![tenant("small", "sk-small", small)])).await;
    let client = reqwest::Client::new();
    let body = chat_body(200, 50, true);
    let mut admitted = 0;
    let mut remaining = Vec::new();
    let refused = loop {
        let response = post_as(&client, &gateway, "sk-small", &body).await;
        if response.status() == 429 {
            break response;
        }
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-ratelimit-limit-tokens"), "1000");
        assert!(response.headers().get("x-ratelimit-limit-requests").is_none());
        remaining.push(header(&response, "x-ratelimit-remaining-tokens").parse::<u64>().unwrap());
        response.bytes().await.unwrap();
        admitted += 1;
        assert!(admitted <= 10, "never refused");
    };
    // Each request reserves ~200 and settles ~250 (prompt + completion): four fit in 1000.
    assert!((3..=5).contains(&admitted), "{admitted} admitted");
    assert!(remaining.windows(2).all(|w| w[1] < w[0]), "{remaining:?}");
    assert_eq!(header(&refused, "x-ratelimit-limit-tokens"), "1000");
    let left: u64 = header(&refused, "x-ratelimit-remaining-tokens").parse().unwrap();
    assert!(left < 200, "refused with {left} tokens left");
    let retry_after: u64 = header(&refused, "retry-after").parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert!(refused.headers().contains_key("x-ratelimit-reset-tokens"));
    let error: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["code"], "rate_limit_exceeded", "{error}");
    // What was used stays within the budget plus one request's worth.
    let metrics = client.get(admin_url(&gateway, "/metrics")).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    let used = |kind: &str| {
        let prefix = format!("laneway_tenant_tokens_total{{kind=\"{kind}\",tenant=\"small\"}}");
        sample(&metrics, &prefix).unwrap_or_else(|| panic!("{prefix} missing:\n{metrics}"))
    };
    let total = used("prompt") + used("completion");
    assert!(total <= 1000.0 + 250.0 + 20.0, "{total} tokens used");
    let limited = "laneway_tenant_requests_total{outcome=\"limited_tokens\",tenant=\"small\"}";
    assert_eq!(sample(&metrics, limited), Some(1.0));
    gateway.shutdown().await;
}

#[tokio::test]
async fn requests_per_minute_and_concurrency_are_per_tenant() {
    let sims = start_sims(1, 1).await;
    let few = TenantLimits { requests_per_minute: Some(3), ..Default::default() };
    let one_at_a_time = TenantLimits { max_concurrent: Some(1), ..Default::default() };
    let tenants = vec![tenant("few", "sk-few", few), tenant("single", "sk-single", one_at_a_time)];
    let gateway = start_gateway(with_tenants(&sims, tenants)).await;
    let client = reqwest::Client::new();
    let body = chat_body(20, 2, false);
    for expected_left in [2, 1, 0] {
        let response = post_as(&client, &gateway, "sk-few", &body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-ratelimit-limit-requests"), "3");
        let left: u64 = header(&response, "x-ratelimit-remaining-requests").parse().unwrap();
        assert_eq!(left, expected_left);
    }
    let refused = post_as(&client, &gateway, "sk-few", &body).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "x-ratelimit-remaining-requests"), "0");
    assert_eq!(header(&refused, "retry-after"), "20");
    // Another tenant is not affected, and a key of no tenant is refused.
    assert_eq!(post_as(&client, &gateway, "sk-single", &body).await.status(), 200);
    assert_eq!(post_as(&client, &gateway, "sk-nobody", &body).await.status(), 401);
    // A priority band is a number 0..=9.
    let request = client.post(url(&gateway, "/v1/chat/completions")).bearer_auth("sk-single");
    for band in ["urgent", "10"] {
        let request = request.try_clone().unwrap().header("x-laneway-priority", band);
        let bad_band = request.json(&body).send().await.unwrap();
        assert_eq!(bad_band.status(), 400);
        let error: serde_json::Value = bad_band.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert_eq!(message, "header x-laneway-priority must be a band from 0 to 9");
    }
    // One stream at a time: a second one while the first is open gets 429.
    let mut open = post_as(&client, &gateway, "sk-single", &chat_body(20, 200, true)).await;
    assert_eq!(open.status(), 200);
    let second = post_as(&client, &gateway, "sk-single", &body).await;
    assert_eq!(second.status(), 429);
    while open.chunk().await.unwrap().is_some() {}
    let mut admitted = false;
    for _ in 0..100 {
        if post_as(&client, &gateway, "sk-single", &body).await.status() == 200 {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(admitted, "the place never freed");
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_light_tenant_overtakes_a_heavy_tenants_backlog() {
    let sims = start_sims(1, 1).await;
    let unlimited = TenantLimits::default();
    let tenants =
        vec![tenant("heavy", "sk-heavy", unlimited), tenant("light", "sk-light", unlimited)];
    let mut config = with_tenants(&sims, tenants);
    // One request at a time: everything else waits in the admission queue.
    let admission = &mut config.reliability.admission;
    admission.max_in_flight = 1;
    admission.queue_size = 64;
    admission.queue_timeout = Duration::from_secs(60);
    let gateway = start_gateway(config).await;
    let state = gateway.state();
    let client = reqwest::Client::new();
    let finished = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let send = |key: &'static str| {
        let (client, finished) = (client.clone(), finished.clone());
        let request = client.post(url(&gateway, "/v1/chat/completions")).bearer_auth(key);
        let request = request.json(&chat_body(20, 1000, false));
        tokio::spawn(async move {
            assert_eq!(request.send().await.unwrap().status(), 200);
            finished.lock().push(key);
        })
    };
    let heavy: Vec<_> = (0..10).map(|_| send("sk-heavy")).collect();
    wait_until("the heavy backlog", || state.shared.admission.waiting() >= 8).await;
    let waiting = state.shared.admission.waiting();
    let light = send("sk-light");
    wait_until("the light request queued", || {
        state.shared.admission.waiting() >= waiting || !finished.lock().is_empty()
    })
    .await;
    light.await.unwrap();
    for request in heavy {
        request.await.unwrap();
    }
    let finished = finished.lock().clone();
    let at = finished.iter().position(|key| *key == "sk-light").unwrap();
    // First come, first served would finish it after every heavy request (10th);
    // fair order serves it right after the heavy request at the front.
    assert!(at <= 3, "light finished {at}th: {finished:?}");
    gateway.shutdown().await;
}

#[tokio::test]
async fn the_sim_cli_serves_a_named_model_and_its_adapters() {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_laneway"))
        .args(["sim", "--port", "0", "--profile", "tiny", "--served-model-name", "beta"])
        .args(["--lora-modules", "beta-sql,beta-chat=/adapters/chat"])
        .kill_on_drop(true)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let limit = Duration::from_secs(20);
    let first = tokio::time::timeout(limit, lines.next_line()).await.unwrap().unwrap().unwrap();
    let base = first.strip_prefix("listening on ").expect("first line names the address");
    let models: serde_json::Value =
        reqwest::get(format!("{base}/v1/models")).await.unwrap().json().await.unwrap();
    let cards = models["data"].as_array().unwrap();
    let ids: Vec<&str> = cards.iter().map(|card| card["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["beta", "beta-sql", "beta-chat"]);
    assert_eq!(cards[1]["parent"], "beta");
    assert!(cards[0]["parent"].is_null());
    child.kill().await.unwrap();
}
