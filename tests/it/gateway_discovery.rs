//! Discovery under load: replicas found by DNS (a scripted resolver) and by Kubernetes
//! EndpointSlices (a mock API server on port 0 serving recorded-shape JSON) are added and
//! removed while clients keep sending requests, and no request fails.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::support::gateway::{
    chat_body, loopback_config, start_gateway, start_sims, url, wait_until,
};
use arc_swap::ArcSwap;
use axum::Router;
use axum::routing::get;
use futures_util::future::BoxFuture;
use laneway::gateway::GatewayHandle;
use laneway::gateway::config::{DnsDiscovery, KubernetesDiscovery, Resolver};
use laneway::sim::SimHandle;
use tokio::task::JoinHandle;

const CLIENTS: usize = 4;
/// Upper bound on each client's requests, whatever happens.
const MAX_REQUESTS_PER_CLIENT: u64 = 400;

/// Clients sending small chat requests until told to stop; each counts its outcomes.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    clients: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(gateway: &GatewayHandle) -> Self {
        let (stop, ok, failed) = (Arc::default(), Arc::new(AtomicU64::new(0)), Arc::default());
        let target = url(gateway, "/v1/chat/completions");
        let clients = (0..CLIENTS)
            .map(|_| {
                let (stop, ok, failed): (Arc<AtomicBool>, Arc<AtomicU64>, Arc<AtomicU64>) =
                    (Arc::clone(&stop), ok.clone(), Arc::clone(&failed));
                let target = target.clone();
                tokio::spawn(async move {
                    let client = reqwest::Client::new();
                    let body = chat_body(20, 3, false);
                    for _ in 0..MAX_REQUESTS_PER_CLIENT {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let sent = client.post(&target).json(&body).send().await;
                        match sent {
                            Ok(response) if response.status() == 200 => {
                                let _ = response.bytes().await;
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            _ => {
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        Self { stop, ok, failed, clients }
    }

    fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    /// Stops the clients; (succeeded, failed).
    async fn finish(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for client in self.clients {
            client.await.unwrap();
        }
        (self.ok.load(Ordering::Relaxed), self.failed.load(Ordering::Relaxed))
    }
}

fn requests(sim: &SimHandle) -> u64 {
    sim.stats().requests_total
}

/// Waits until the load has made `more` further successful requests.
async fn let_load_run(load: &Load, more: u64) {
    let target = load.ok() + more;
    wait_until("more requests to succeed", || load.ok() >= target).await;
}

/// Answers with whatever addresses the test sets.
#[derive(Default)]
struct ScriptedResolver(ArcSwap<Vec<SocketAddr>>);

impl Resolver for ScriptedResolver {
    fn resolve<'a>(
        &'a self,
        _name: &'a str,
        _port: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
        let answer = self.0.load_full();
        Box::pin(async move { Ok(answer.as_ref().clone()) })
    }
}

#[tokio::test]
async fn dns_discovery_adds_and_removes_replicas_under_load() {
    let sims = start_sims(3, 1).await;
    let resolver = Arc::new(ScriptedResolver::default());
    resolver.0.store(Arc::new(vec![sims[0].addr(), sims[1].addr()]));
    let mut config = loopback_config(Vec::new());
    let mut dns = DnsDiscovery::new("vllm-headless.llm.svc", 8000, Duration::from_millis(20));
    dns.resolver = resolver.clone();
    config.discovery.dns = Some(dns);
    let gateway = start_gateway(config).await;
    let name = |sim: &SimHandle| sim.addr().to_string();
    wait_until("the first two replicas", || gateway.replica_names().len() == 2).await;

    let load = Load::start(&gateway);
    let_load_run(&load, 20).await;
    resolver.0.store(Arc::new(sims.iter().map(|s| s.addr()).collect()));
    wait_until("the third replica", || gateway.replica_names().contains(&name(&sims[2]))).await;
    wait_until("traffic on the third replica", || requests(&sims[2]) >= 5).await;

    resolver.0.store(Arc::new(vec![sims[1].addr(), sims[2].addr()]));
    wait_until("the first replica to go", || !gateway.replica_names().contains(&name(&sims[0])))
        .await;
    let at_removal = requests(&sims[0]);
    let_load_run(&load, 40).await;
    let (ok, failed) = load.finish().await;

    assert_eq!(failed, 0, "{ok} succeeded");
    // Requests picked just before the swap may still arrive: at most one per client.
    assert!(requests(&sims[0]) <= at_removal + CLIENTS as u64);
    let mut names = gateway.replica_names();
    names.sort();
    let mut expected = [name(&sims[1]), name(&sims[2])];
    expected.sort();
    assert_eq!(names, expected);
    gateway.shutdown().await;
}

/// An EndpointSlice list with one slice per replica (each simulator has its own port).
fn slices(sims: &[(usize, &SimHandle)]) -> String {
    let items: Vec<serde_json::Value> = sims
        .iter()
        .map(|(index, sim)| {
            serde_json::json!({
                "addressType": "IPv4",
                "metadata": {"name": format!("vllm-{index}"), "labels": {"app": "vllm"}},
                "ports": [{"name": "metrics", "port": 9}, {"name": "http", "port": sim.addr().port(), "protocol": "TCP"}],
                "endpoints": [{
                    "addresses": [sim.addr().ip().to_string()],
                    "conditions": {"ready": true, "serving": true, "terminating": false},
                    "nodeName": format!("gpu-node-{}", index / 2),
                    "targetRef": {"kind": "Pod", "name": format!("vllm-pod-{index}"), "namespace": "llm"}
                }]
            })
        })
        .collect();
    serde_json::json!({"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1", "items": items})
        .to_string()
}

/// A mock API server: serves `list` at the EndpointSlice path, remembers the query.
async fn start_mock_api(
    list: Arc<ArcSwap<String>>,
    queries: Arc<ArcSwap<String>>,
    hits: Arc<AtomicU64>,
) -> SocketAddr {
    let app = Router::new().route(
        "/apis/discovery.k8s.io/v1/namespaces/llm/endpointslices",
        get(move |uri: axum::http::Uri, headers: axum::http::HeaderMap| {
            let (list, queries) = (list.clone(), queries.clone());
            hits.fetch_add(1, Ordering::Relaxed);
            async move {
                let token = headers.get("authorization").map(|v| v.to_str().unwrap().to_string());
                queries.store(Arc::new(format!(
                    "{} {}",
                    uri.query().unwrap_or(""),
                    token.unwrap_or_default()
                )));
                ([("content-type", "application/json")], list.load().as_ref().clone())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test]
async fn kubernetes_discovery_adds_and_removes_replicas_under_load() {
    let sims = start_sims(3, 1).await;
    let list = Arc::new(ArcSwap::from_pointee(slices(&[(0, &sims[0]), (1, &sims[1])])));
    let queries = Arc::new(ArcSwap::from_pointee(String::new()));
    let hits = Arc::new(AtomicU64::new(0));
    let api = start_mock_api(list.clone(), queries.clone(), hits.clone()).await;
    let token_file = std::env::temp_dir().join(format!("laneway-k8s-token-{}", std::process::id()));
    std::fs::write(&token_file, "test-token\n").unwrap();
    let raw = format!(
        "[discovery.kubernetes]\napi = \"http://{api}\"\nnamespace = \"llm\"\n\
         label_selector = \"app=vllm\"\nport_name = \"http\"\ntoken_file = \"{}\"\n\
         interval_ms = 100\n",
        token_file.display()
    );
    let mut config = loopback_config(Vec::new());
    config.discovery = laneway::gateway::GatewayConfig::from_toml(&raw).unwrap().discovery;
    let source: &KubernetesDiscovery = config.discovery.kubernetes.as_ref().unwrap();
    assert_eq!(source.port_name.as_deref(), Some("http"));
    let gateway = start_gateway(config).await;
    wait_until("the first two pods", || gateway.replica_names().len() == 2).await;
    assert_eq!(queries.load().as_str(), "labelSelector=app%3Dvllm Bearer test-token");
    assert_eq!(gateway.replica_names(), ["vllm-pod-0", "vllm-pod-1"]);

    let load = Load::start(&gateway);
    let_load_run(&load, 20).await;
    list.store(Arc::new(slices(&[(0, &sims[0]), (1, &sims[1]), (2, &sims[2])])));
    wait_until("the third pod", || gateway.replica_names().len() == 3).await;
    wait_until("traffic on the third pod", || requests(&sims[2]) >= 5).await;

    list.store(Arc::new(slices(&[(1, &sims[1]), (2, &sims[2])])));
    wait_until("the first pod to go", || gateway.replica_names().len() == 2).await;
    let at_removal = requests(&sims[0]);
    let_load_run(&load, 40).await;
    let (ok, failed) = load.finish().await;

    assert_eq!(failed, 0, "{ok} succeeded");
    assert!(requests(&sims[0]) <= at_removal + CLIENTS as u64);
    assert_eq!(gateway.replica_names(), ["vllm-pod-1", "vllm-pod-2"]);
    // An unreachable API keeps the last set rather than emptying the fleet.
    list.store(Arc::new("not json".into()));
    let polls = hits.load(Ordering::Relaxed);
    wait_until("two polls of the broken list", || hits.load(Ordering::Relaxed) >= polls + 2).await;
    let load = Load::start(&gateway);
    let_load_run(&load, 20).await;
    let (_, failed) = load.finish().await;
    assert_eq!(failed, 0);
    assert_eq!(gateway.replica_names().len(), 2);
    gateway.shutdown().await;
    std::fs::remove_file(token_file).unwrap();
}

#[test]
fn discovery_sections_validate_and_report_bad_fields() {
    let config = laneway::gateway::GatewayConfig::from_toml(
        "[discovery.dns]\nname = \"vllm-headless.llm.svc\"\nport = 8000\n",
    )
    .unwrap();
    let dns = config.discovery.dns.unwrap();
    assert_eq!(
        (dns.name.as_str(), dns.port, dns.interval),
        ("vllm-headless.llm.svc", 8000, Duration::from_secs(5))
    );
    assert!(config.replicas.is_empty());
    let error = laneway::gateway::GatewayConfig::from_toml(
        "[discovery.dns]\nport = 8000\n[discovery.kubernetes]\nnamespace = \"llm\"\n",
    )
    .unwrap_err();
    let paths: Vec<&str> = error.issues.iter().map(|i| i.path.as_str()).collect();
    assert_eq!(paths, ["discovery.dns.name", "discovery.kubernetes.label_selector"]);
}
