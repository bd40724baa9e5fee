//! Shared pieces of the gateway's integration tests: simulated replicas and scripted stub
//! replicas on port 0, a gateway in front of them, and bounded waiting.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::{get, post};
use bytes::Bytes;
use dashmap::DashSet;
use laneway::gateway::config::{EntrySlo, PolicyKind, PoolConfig, ReplicaConfig, VariantConfig};
use laneway::gateway::{self, Entry, GatewayConfig, GatewayHandle, Strategy};
use laneway::sim::{self, SimConfig, SimHandle};
use tokio::sync::mpsc;

/// Simulated clock speed for tests: fast, yet slow enough for streams to overlap.
pub const SPEED: f64 = 10.0;

/// Starts `count` tiny replicas with `api_workers` API processes each, named `sim-N`.
pub async fn start_sims(count: usize, api_workers: usize) -> Vec<SimHandle> {
    start_sims_at(count, api_workers, SPEED).await
}

/// `count` tiny simulated replicas running `speed` times faster than the profile.
pub async fn start_sims_at(count: usize, api_workers: usize, speed: f64) -> Vec<SimHandle> {
    let mut sims = Vec::new();
    for index in 0..count {
        let mut config = SimConfig::with_profile(format!("sim-{index}"), "tiny").unwrap();
        config.api_workers = api_workers;
        config.speed = speed;
        config.seed = index as u64 + 1;
        sims.push(sim::spawn(config).await.unwrap());
    }
    sims
}

pub fn replica(name: &str, addr: SocketAddr) -> ReplicaConfig {
    ReplicaConfig {
        name: name.into(),
        authority: addr.to_string(),
        node: format!("node-{name}"),
        tls: false,
        placement: Default::default(),
    }
}

/// A config on loopback port 0 in front of `sims`.
pub fn config_for(sims: &[SimHandle]) -> GatewayConfig {
    let replicas = sims.iter().map(|s| replica(s.id(), s.addr())).collect();
    loopback_config(replicas)
}

pub fn loopback_config(replicas: Vec<ReplicaConfig>) -> GatewayConfig {
    let mut config = GatewayConfig::with_replicas(replicas);
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.admin_listen = "127.0.0.1:0".parse().unwrap();
    config.scrape_interval = Duration::from_millis(50);
    config.drain_deadline = Duration::from_secs(5);
    // Test gateways serve on loopback, as the demo does: the debug entry may share the
    // smart listener.
    config.debug_access.on_smart_listener = true;
    config
}

pub fn with_policy(mut config: GatewayConfig, policy: PolicyKind) -> GatewayConfig {
    config.policy = policy;
    config
}

/// A predicted-latency gateway in front of `sims`, with an SLO that the tiny replicas at
/// test speed meet (TPOT well under a millisecond) and a 50x slowed one does not (10 ms).
pub fn predicted_config(sims: &[SimHandle]) -> GatewayConfig {
    let mut config = with_policy(config_for(sims), PolicyKind::PredictedLatency);
    let slo = EntrySlo {
        ttft: Duration::from_millis(1000),
        tpot: Duration::from_millis(5),
        ..EntrySlo::default()
    };
    config.entry_mut(Entry::Short).slo = slo;
    config
}

pub fn with_strategy(mut config: GatewayConfig, entry: Entry, strategy: Strategy) -> GatewayConfig {
    config.entry_mut(entry).strategy = strategy;
    config
}

pub async fn start_gateway(config: GatewayConfig) -> GatewayHandle {
    gateway::spawn(config).await.unwrap()
}

pub fn url(gateway: &GatewayHandle, path: &str) -> String {
    format!("http://{}{}", gateway.addr(), path)
}

/// POSTs `body` to the gateway's chat completions endpoint.
pub async fn post_chat(
    client: &reqwest::Client,
    gateway: &GatewayHandle,
    body: &serde_json::Value,
) -> reqwest::Response {
    client.post(url(gateway, "/v1/chat/completions")).json(body).send().await.unwrap()
}

/// A chat body of about `prompt_tokens` estimated tokens.
pub fn chat_body(prompt_tokens: u64, max_tokens: u64, stream: bool) -> serde_json::Value {
    let text = "abc ".repeat(prompt_tokens.saturating_sub(4) as usize);
    serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": stream,
        "stream_options": {"include_usage": stream},
    })
}

pub fn header(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("header {name} missing"))
        .to_str()
        .unwrap()
        .to_string()
}

/// Waits until `condition` holds, checking every 10 ms for at most 10 s.
pub async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// A sample's value in Prometheus text: the line starting with `prefix` (name and labels).
pub fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

/// A stub replica whose streams the test scripts event by event.
pub struct StubReplica {
    pub addr: SocketAddr,
    /// Client addresses that inference requests came from: one per upstream connection.
    pub peers: Arc<DashSet<SocketAddr>>,
    /// Receives one sender per streaming request; each sent `Bytes` goes out as one chunk,
    /// and dropping the sender ends the stream.
    pub streams: mpsc::Receiver<mpsc::Sender<Bytes>>,
}

/// What the stub serves on `/metrics`: fixed, with bytes that are not UTF-8, so that a
/// byte-for-byte comparison means something.
pub const STUB_METRICS: &[u8] =
    b"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\"} 0\n\xff\xfe raw\n";

pub async fn start_stub() -> StubReplica {
    let (stream_tx, streams) = mpsc::channel(16);
    let peers = Arc::new(DashSet::new());
    let seen = peers.clone();
    let chat = move |ConnectInfo(peer): ConnectInfo<SocketAddr>| {
        let stream_tx = stream_tx.clone();
        seen.insert(peer);
        async move {
            let (chunk_tx, chunk_rx) = mpsc::channel::<Bytes>(16);
            stream_tx.send(chunk_tx).await.unwrap();
            let body = futures_util::stream::unfold(chunk_rx, |mut rx| async move {
                rx.recv().await.map(|chunk| (Ok::<_, Infallible>(chunk), rx))
            });
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(body))
                .unwrap()
        }
    };
    let app = Router::new()
        .route("/metrics", get(|| async { STUB_METRICS }))
        .route("/v1/chat/completions", post(chat))
        .into_make_service_with_connect_info::<SocketAddr>();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    StubReplica { addr, peers, streams }
}

/// Reads from `response` until `needle` has arrived, failing after 10 s.
pub async fn read_until(response: &mut reqwest::Response, received: &mut String, needle: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !received.contains(needle) {
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("`{needle}` did not arrive; got {received:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("stream ended before `{needle}`; got {received:?}"));
        received.push_str(&String::from_utf8_lossy(&chunk));
    }
}

pub fn admin_url(gateway: &GatewayHandle, path: &str) -> String {
    format!("http://{}{}", gateway.admin_addr(), path)
}

/// A canary variant of `strategy`, on `pool` (`None`: every replica).
pub fn variant(name: &str, strategy: Strategy, pool: Option<&str>, weight: u32) -> VariantConfig {
    VariantConfig {
        name: name.into(),
        strategy,
        policy: None,
        pool: pool.map(str::to_string),
        weight,
    }
}

pub fn pool(name: &str, replicas: &[&str]) -> PoolConfig {
    PoolConfig { name: name.into(), replicas: replicas.iter().map(|r| r.to_string()).collect() }
}

/// A JSON document from the admin listener.
pub async fn admin_json(gateway: &GatewayHandle, path: &str) -> serde_json::Value {
    let response = reqwest::get(admin_url(gateway, path)).await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

/// An admin page as text (e.g. `/admin/canary?format=text`).
pub async fn admin_text(gateway: &GatewayHandle, path: &str) -> String {
    let response = reqwest::get(admin_url(gateway, path)).await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.text().await.unwrap()
}
