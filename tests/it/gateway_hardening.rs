//! Defects found from outside, each pinned by a test: reloads that dropped discovered
//! replicas or refused discovery-only configs, idle keep-alive connections closed at the
//! header timeout, an admission queue that let later requests overtake earlier ones, an
//! unfenced debug entry, client disconnects before the response headers going uncounted,
//! and default limits that refused load the replicas would have served.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::gateway::{
    chat_body, config_for, header, loopback_config, replica, sample, start_gateway, start_sims,
    start_stub, url, wait_until,
};
use arc_swap::ArcSwap;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use laneway::gateway::GatewayHandle;
use laneway::gateway::config::ApiKeys;
use laneway::gateway::config::{DnsDiscovery, Resolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Answers with whatever addresses the test sets.
#[derive(Default)]
struct ScriptedResolver(ArcSwap<Vec<SocketAddr>>);

impl Resolver for ScriptedResolver {
    fn resolve<'a>(
        &'a self,
        _: &'a str,
        _: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
        let answer = self.0.load_full();
        Box::pin(async move { Ok(answer.as_ref().clone()) })
    }
}

/// Streaming clients until told to stop; (succeeded, failed).
fn streaming_load(
    gateway: &GatewayHandle,
    clients: usize,
) -> (Arc<AtomicBool>, Vec<tokio::task::JoinHandle<(u64, u64)>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let target = url(gateway, "/v1/chat/completions");
    let handles = (0..clients)
        .map(|_| {
            let (stop, target) = (stop.clone(), target.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let (mut ok, mut failed) = (0, 0);
                // Bounded in count whatever happens.
                for _ in 0..400 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let sent = client.post(&target).json(&chat_body(20, 4, true)).send().await;
                    let done = match sent {
                        Ok(response) if response.status() == 200 => {
                            response.text().await.is_ok_and(|text| {
                                text.contains("data: [DONE]") && !text.contains("\"error\"")
                            })
                        }
                        _ => false,
                    };
                    if done { ok += 1 } else { failed += 1 }
                }
                (ok, failed)
            })
        })
        .collect();
    (stop, handles)
}

#[tokio::test]
async fn reloads_keep_discovered_replicas_and_a_discovery_only_config_reloads() {
    let sims = start_sims(2, 1).await;
    let resolver = Arc::new(ScriptedResolver::default());
    resolver.0.store(Arc::new(vec![sims[1].addr()]));
    let mut config = loopback_config(vec![replica("static-0", sims[0].addr())]);
    let mut dns = DnsDiscovery::new("vllm-headless.llm.svc", 8000, Duration::from_millis(20));
    dns.resolver = resolver.clone();
    config.discovery.dns = Some(dns);
    let gateway = start_gateway(config.clone()).await;
    let discovered = sims[1].addr().to_string();
    wait_until("the discovered replica", || gateway.replica_names().contains(&discovered)).await;

    let (stop, clients) = streaming_load(&gateway, 4);
    wait_until("traffic on both", || sims.iter().all(|s| s.stats().requests_total >= 3)).await;
    for _ in 0..3 {
        gateway.reload(config.clone()).await.unwrap();
    }
    assert_eq!(gateway.replica_names(), ["static-0".to_string(), discovered.clone()]);
    let after_reloads = sims[1].stats().requests_total;
    wait_until("traffic on the discovered replica after the reloads", || {
        sims[1].stats().requests_total >= after_reloads + 5
    })
    .await;

    // No static replica at all: the reload is accepted and the discovered one serves.
    let mut discovery_only = config.clone();
    discovery_only.replicas.clear();
    gateway.reload(discovery_only).await.unwrap();
    assert_eq!(gateway.replica_names(), std::slice::from_ref(&discovered));
    let at_switch = sims[1].stats().requests_total;
    wait_until("traffic after the switch", || sims[1].stats().requests_total >= at_switch + 5)
        .await;
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut failed) = (0, 0);
    for client in clients {
        let (client_ok, client_failed) = client.await.unwrap();
        ok += client_ok;
        failed += client_failed;
    }
    assert_eq!(failed, 0, "{ok} streams succeeded");
    gateway.shutdown().await;
}

/// One request on `stream`; the response head and body.
async fn keep_alive_request(stream: &mut TcpStream) -> String {
    let body = serde_json::to_vec(&chat_body(10, 2, false)).unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(&[head.as_bytes(), &body].concat()).await.unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 8192];
    // Read until the JSON body closes: the sim's answers are one small JSON object.
    let read = async {
        while !received.ends_with(b"}") && !received.ends_with(b"}\n") {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.expect("an answer within 10 s");
    String::from_utf8_lossy(&received).into_owned()
}

#[tokio::test]
async fn an_idle_keep_alive_connection_lasts_the_idle_timeout_not_the_header_timeout() {
    let sims = start_sims(1, 1).await;
    let mut config = config_for(&sims);
    config.reliability.timeouts.client_header = Duration::from_millis(100);
    config.reliability.timeouts.client_idle = Duration::from_secs(1);
    let gateway = start_gateway(config).await;
    let mut stream = TcpStream::connect(gateway.addr()).await.unwrap();
    let first = keep_alive_request(&mut stream).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.to_ascii_lowercase().contains("keep-alive: timeout=1"), "{first}");
    // The client idles for four header timeouts (the behaviour under test, not a wait for
    // an event), then reuses the connection.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = keep_alive_request(&mut stream).await;
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    // Past the idle timeout the server closes it.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "still open 10 s after the idle timeout");
    gateway.shutdown().await;
}

#[tokio::test]
async fn queued_requests_are_admitted_in_arrival_order() {
    let mut stub = start_stub().await;
    let mut config = loopback_config(vec![replica("stub", stub.addr)]);
    config.reliability.admission.max_in_flight = 1;
    config.reliability.admission.queue_size = 8;
    config.reliability.admission.queue_timeout = Duration::from_secs(30);
    let gateway = Arc::new(start_gateway(config).await);
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    for id in 0..5 {
        let (to, order) = (gateway.clone(), order.clone());
        clients.push(tokio::spawn(async move {
            let response = reqwest::Client::new()
                .post(url(&to, "/v1/chat/completions"))
                .json(&chat_body(10, 2, true))
                .send()
                .await
                .unwrap();
            order.lock().push(id);
            response.bytes().await.unwrap();
        }));
        // The first holds the only place; each next one queues before the one after it.
        let state = gateway.state();
        wait_until("the client to be admitted or queued", || {
            state.shared.admission.in_flight() + state.shared.admission.waiting() as u64 == id + 1
        })
        .await;
    }
    for _ in 0..5 {
        let stream = stub.streams.recv().await.unwrap();
        stream.send(Bytes::from_static(b"data: [DONE]\n\n")).await.unwrap();
        drop(stream);
    }
    for client in clients {
        client.await.unwrap();
    }
    assert_eq!(*order.lock(), [0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn the_debug_entry_is_fenced_by_listener_limit_and_key() {
    let sims = start_sims(1, 1).await;
    // Off the smart listener unless configured: not even the replica's control endpoints.
    let mut closed = config_for(&sims);
    closed.debug_access.on_smart_listener = false;
    let gateway = start_gateway(closed).await;
    let client = reqwest::Client::new();
    let fault =
        client.post(url(&gateway, "/debug/sim-0/sim/fault")).body("{\"kind\":\"hang\"}").send();
    let fault = fault.await.unwrap();
    assert_eq!(fault.status(), 404);
    let error: serde_json::Value = fault.json().await.unwrap();
    assert!(error["error"]["message"].as_str().unwrap().contains("smart_listener"), "{error}");
    let named = client.get(url(&gateway, "/health")).header("x-laneway-entry", "debug").send();
    assert_eq!(named.await.unwrap().status(), 404);
    assert_eq!(sims[0].stats().requests_total, 0);
    gateway.shutdown().await;

    // A few requests per replica at once.
    let mut stub = start_stub().await;
    let mut limited = loopback_config(vec![replica("stub", stub.addr)]);
    limited.debug_access.max_in_flight_per_replica = 2;
    let gateway = start_gateway(limited).await;
    let debug_chat = || {
        client
            .post(url(&gateway, "/debug/stub/v1/chat/completions"))
            .json(&chat_body(10, 2, true))
            .send()
    };
    let held = [debug_chat().await.unwrap(), debug_chat().await.unwrap()];
    let refused = debug_chat().await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let streams = [stub.streams.recv().await.unwrap(), stub.streams.recv().await.unwrap()];
    drop(streams);
    for response in held {
        assert_eq!(response.status(), 200);
        response.bytes().await.unwrap();
    }
    // The places were freed with the bodies.
    let again = debug_chat();
    let next_stream = stub.streams.recv();
    let (again, next_stream) = tokio::join!(again, next_stream);
    drop(next_stream);
    assert_eq!(again.unwrap().status(), 200);
    gateway.shutdown().await;

    // With [auth]: debug keys and the admin token only.
    let mut keyed = config_for(&sims);
    keyed.auth = Some(ApiKeys::new(["sk-user"], false).with_debug_keys(["sk-oncall"]));
    keyed.admin.token = Some("admin-token-1234".into());
    let gateway = start_gateway(keyed).await;
    let health = |key: &'static str| {
        client.get(url(&gateway, "/debug/sim-0/health")).bearer_auth(key).send()
    };
    assert_eq!(health("sk-user").await.unwrap().status(), 403);
    assert_eq!(health("sk-oncall").await.unwrap().status(), 200);
    assert_eq!(health("admin-token-1234").await.unwrap().status(), 200);
    let inference = client
        .post(url(&gateway, "/v1/chat/completions"))
        .bearer_auth("sk-user")
        .json(&chat_body(10, 2, false))
        .send();
    assert_eq!(inference.await.unwrap().status(), 200);
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_client_leaving_before_the_response_headers_is_counted() {
    let mut stub = start_stub().await;
    let gateway = start_gateway(loopback_config(vec![replica("stub", stub.addr)])).await;
    let client = reqwest::Client::new();
    for dropped in 1..=3u64 {
        let request =
            client.post(url(&gateway, "/v1/chat/completions")).json(&chat_body(10, 2, true)).send();
        let pending = tokio::spawn(request);
        // The replica has the request and sends no headers until the stream sender is used:
        // the gateway waits for them when the client goes.
        let stream = stub.streams.recv().await.unwrap();
        pending.abort();
        let metrics = || gateway.metrics_text();
        let kind = "laneway_request_errors_total{entry=\"short\",kind=\"client_disconnect\"}";
        wait_until("the disconnect to be counted", || {
            sample(&metrics(), kind) == Some(dropped as f64)
        })
        .await;
        drop(stream);
    }
    gateway.shutdown().await;
}

#[tokio::test]
async fn default_admission_takes_the_fields_sweep_concurrency() {
    let sims = start_sims(2, 1).await;
    let gateway = start_gateway(config_for(&sims)).await;
    let admission = gateway.state().shared.admission.clone();
    let picker = gateway.state().picker.clone();
    // c2560 (the largest of the field's sweeps) at once on two replicas: all admitted, none
    // queued; the replicas queue what they cannot run.
    let mut held = Vec::new();
    for _ in 0..2560 {
        let admitted = admission.admit(&|limit| picker.pick_within(None, limit), 0).await;
        held.push(admitted.expect("admitted"));
    }
    assert_eq!(admission.in_flight(), 2560);
    assert_eq!(admission.waiting_peak(), 0);
    let on_each: Vec<u64> = picker.snapshot().iter().map(|r| r.load.in_flight()).collect();
    assert_eq!(on_each.iter().sum::<u64>(), 2560);
    drop(held);
    assert_eq!(admission.in_flight(), 0);
    let served = reqwest::Client::new()
        .post(url(&gateway, "/v1/chat/completions"))
        .json(&chat_body(10, 2, false))
        .send();
    let served = served.await.unwrap();
    assert_eq!(header(&served, "x-laneway-entry"), "short");
    gateway.shutdown().await;
}
