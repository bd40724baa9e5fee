//! Upstream connection strategies, seen from the replica's side: how many connections the
//! simulator accepted for the same traffic under force_close, keep_alive and spread, how
//! spread deals with a connection the replica closed while it was kept, and the head each
//! strategy sends (the replica's own `Host`, no connection-specific headers), and the
//! replica's headers as the client gets them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::support::gateway::*;
use bytes::Bytes;
use futures_util::future::join_all;
use laneway::gateway::{Entry, GatewayHandle, Strategy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

const WAVES: usize = 4;
const PER_WAVE: usize = 8;

/// Sends `WAVES` waves of `PER_WAVE` concurrent short requests; returns the replica's
/// accepted connections and the workers that served requests.
async fn run_waves(strategy: Strategy) -> (u64, usize) {
    let sims = start_sims(1, 4).await;
    let config = with_strategy(config_for(&sims), Entry::Short, strategy);
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    for _ in 0..WAVES {
        let requests = (0..PER_WAVE).map(|_| {
            client.post(url(&gateway, "/v1/chat/completions")).json(&chat_body(50, 4, true)).send()
        });
        for response in join_all(requests).await {
            let response = response.unwrap();
            assert_eq!(header(&response, "x-laneway-strategy"), strategy.as_str());
            response.bytes().await.unwrap();
        }
    }
    let stats = sims[0].stats();
    assert_eq!(stats.requests_total, (WAVES * PER_WAVE) as u64);
    let workers_used = stats.requests_per_worker.iter().filter(|&&n| n > 0).count();
    gateway.shutdown().await;
    (stats.connections_accepted, workers_used)
}

#[tokio::test]
async fn force_close_opens_a_connection_per_request_and_keep_alive_reuses_them() {
    let (closing, closing_workers) = run_waves(Strategy::ForceClose).await;
    let (reusing, _) = run_waves(Strategy::KeepAlive).await;
    let requests = (WAVES * PER_WAVE) as u64;
    // Besides the proxied requests, the metrics scraper and the health checker hold a
    // keep-alive connection each, and either may reconnect once on a busy machine.
    const OWN: u64 = 4;
    assert!((requests..=requests + OWN).contains(&closing), "force_close: {closing} connections");
    assert!(reusing <= PER_WAVE as u64 + OWN, "keep_alive: {reusing} connections");
    // Fresh connections in a burst reach more than one API process.
    assert!(closing_workers > 1, "force_close used {closing_workers} workers");
}

#[tokio::test]
async fn spread_holds_a_fixed_set_of_connections() {
    let sims = start_sims(1, 4).await;
    let mut config = with_strategy(config_for(&sims), Entry::Short, Strategy::Spread);
    config.short.spread_connections = 4;
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    for _ in 0..12 {
        let response = post_chat(&client, &gateway, &chat_body(50, 2, false)).await;
        assert_eq!(header(&response, "x-laneway-strategy"), "spread");
        response.bytes().await.unwrap();
    }
    let stats = sims[0].stats();
    assert_eq!(stats.requests_total, 12);
    // Four spread connections, plus the scraper's and the health checker's keep-alive
    // connections, either of which may reconnect once on a busy machine.
    assert!((4..=8).contains(&stats.connections_accepted), "{stats:?}");
    gateway.shutdown().await;
}

#[tokio::test]
async fn force_close_sends_on_connections_opened_ahead_each_used_once() {
    let sims = start_sims(1, 4).await;
    let mut config = with_strategy(config_for(&sims), Entry::Short, Strategy::ForceClose);
    config.short.ready_connections = 2;
    // Every request counts as close to the one before.
    config.short.ready_max_idle = std::time::Duration::from_secs(600);
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    let send = || async {
        let response = post_chat(&client, &gateway, &chat_body(50, 2, false)).await;
        assert_eq!(header(&response, "x-laneway-strategy"), "force_close");
        response.bytes().await.unwrap();
    };
    send().await;
    let accepted = sims[0].stats().connections_accepted;
    send().await;
    // The second request opened its own connection and two for the next ones.
    wait_until("two ready connections", || sims[0].stats().connections_accepted >= accepted + 3)
        .await;
    for _ in 0..10 {
        send().await;
    }
    let stats = sims[0].stats();
    assert_eq!(stats.requests_total, 12);
    let metrics = gateway.metrics_text();
    let count = |outcome: &str| {
        let name = format!("laneway_ready_connections_total{{outcome=\"{outcome}\"}}");
        sample(&metrics, &name).unwrap_or(0.0)
    };
    assert_eq!(count("used") + count("missed"), 12.0, "{metrics}");
    assert!(count("used") >= 1.0, "{metrics}");
    // Never two requests on one connection.
    assert!(stats.connections_accepted >= 12, "{stats:?}");
    gateway.shutdown().await;
}

/// Opens `count` streams through the gateway at once, holds them all, then ends them.
async fn hold_streams(
    client: &reqwest::Client,
    gateway: &GatewayHandle,
    stub: &mut StubReplica,
    count: usize,
) {
    let mut held = Vec::new();
    for _ in 0..count {
        let request =
            client.post(url(gateway, "/v1/chat/completions")).json(&chat_body(10, 2, true));
        let (response, stream) = tokio::join!(request.send(), stub.streams.recv());
        held.push((response.unwrap(), stream.unwrap()));
    }
    for (mut response, stream) in held {
        stream.send(Bytes::from_static(b"data: [DONE]\n\n")).await.unwrap();
        drop(stream);
        while response.chunk().await.unwrap().is_some() {}
    }
}

#[tokio::test]
async fn spread_never_queues_behind_a_busy_connection() {
    let mut stub = start_stub().await;
    let mut config = loopback_config(vec![replica("stub", stub.addr)]);
    config = with_strategy(config, Entry::Short, Strategy::Spread);
    config.short.spread_connections = 2;
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    // Five streams held open at once: two on the spread connections, three on spares.
    hold_streams(&client, &gateway, &mut stub, 5).await;
    assert_eq!(stub.peers.len(), 5);
    // Afterwards the two spread connections serve everything, in turn.
    for _ in 0..4 {
        let request =
            client.post(url(&gateway, "/v1/chat/completions")).json(&chat_body(10, 2, true));
        let (response, stream) = tokio::join!(request.send(), stub.streams.recv());
        drop(stream.unwrap());
        response.unwrap().bytes().await.unwrap();
    }
    assert_eq!(stub.peers.len(), 5, "no connection beyond the held ones was opened");
    // The next burst of the same size reuses the spares.
    hold_streams(&client, &gateway, &mut stub, 5).await;
    assert_eq!(stub.peers.len(), 5, "the spares were kept");
    // Two rotated and six spares are kept at most: a ninth stream gets a one-off connection
    // (three new spares and the one-off), and a later burst of nine opens only a one-off.
    hold_streams(&client, &gateway, &mut stub, 9).await;
    assert_eq!(stub.peers.len(), 9);
    hold_streams(&client, &gateway, &mut stub, 9).await;
    assert_eq!(stub.peers.len(), 10, "only the one-off connection is new");
    gateway.shutdown().await;
}

/// A replica that answers each chat request on a kept connection and then closes that
/// connection, as a server does whose keep-alive timeout ran out while it idled. Counts the
/// chat connections it accepted and says on `closed` when it has closed one.
async fn replica_closing_after_each_answer() -> (SocketAddr, Arc<AtomicU64>, mpsc::Receiver<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let chat_connections = Arc::new(AtomicU64::new(0));
    let (closed_tx, closed) = mpsc::channel(16);
    let counted = chat_connections.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let (counted, closed_tx) = (counted.clone(), closed_tx.clone());
            tokio::spawn(async move {
                let mut first_chat = true;
                while let Some((path, _)) = read_one_request(&mut socket).await {
                    if path != "/v1/chat/completions" {
                        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                        socket.write_all(answer.as_bytes()).await.unwrap();
                        continue;
                    }
                    if std::mem::take(&mut first_chat) {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                    let answer = chat_answer("content-type: application/json\r\n");
                    socket.write_all(answer.as_bytes()).await.unwrap();
                    break;
                }
                drop(socket);
                let _ = closed_tx.send(()).await;
            });
        }
    });
    (addr, chat_connections, closed)
}

/// One request's path and body off `socket`, or `None` once the peer closed.
async fn read_one_request(socket: &mut tokio::net::TcpStream) -> Option<(String, Vec<u8>)> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = request.parse(&bytes) {
            let length = request
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map_or(0, |h| std::str::from_utf8(h.value).unwrap().parse::<usize>().unwrap());
            if bytes.len() >= head + length {
                let path = request.path.unwrap().to_string();
                return Some((path, bytes[head..head + length].to_vec()));
            }
        }
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        bytes.extend_from_slice(&chunk[..read]);
    }
}

#[tokio::test]
async fn spread_replaces_a_connection_the_replica_closed_while_it_idled() {
    let (addr, chat_connections, mut closed) = replica_closing_after_each_answer().await;
    let mut config = loopback_config(vec![replica("closer", addr)]);
    config = with_strategy(config, Entry::Short, Strategy::Spread);
    config.short.spread_connections = 1;
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    for turn in 1..=3u64 {
        let response = client
            .post(url(&gateway, "/v1/chat/completions"))
            .json(&chat_body(10, 1, false))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "request {turn}: {}", response.text().await.unwrap());
        response.bytes().await.unwrap();
        // The replica has closed the connection the gateway kept for the next request.
        closed.recv().await.unwrap();
        assert_eq!(chat_connections.load(Ordering::SeqCst), turn);
    }
    gateway.shutdown().await;
}

/// A chat completion's answer with `headers` (CRLF-ended lines) before its length.
fn chat_answer(headers: &str) -> String {
    let body = r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
    format!("HTTP/1.1 200 OK\r\n{headers}content-length: {}\r\n\r\n{body}", body.len())
}

/// A replica that answers every request with a small chat completion on a kept connection
/// and sends the head of each request it read (lowercase) on the channel.
async fn replica_recording_heads() -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (heads_tx, heads) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let heads_tx = heads_tx.clone();
            tokio::spawn(async move {
                let mut bytes = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(read) => bytes.extend_from_slice(&chunk[..read]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|line| line.strip_prefix("content-length: "))
                        .map_or(0, |value| value.trim().parse::<usize>().unwrap());
                    while bytes.len() < end + 4 + length {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(read) => bytes.extend_from_slice(&chunk[..read]),
                        }
                    }
                    bytes.drain(..end + 4 + length);
                    let _ = heads_tx.send(head);
                    // Headers of its own too: repeated ones, ones the gateway sets itself,
                    // and connection-specific ones, in the replica's spelling.
                    let answer = chat_answer(
                        "Server: recorder\r\nSet-Cookie: a=1\r\nContent-Type: application/json\r\n\
                         X-Request-Id: from-replica\r\nX-Laneway-Entry: forged\r\n\
                         Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nSet-Cookie: b=2\r\n",
                    );
                    if socket.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, heads)
}

/// The next recorded head of a chat request (the scraper's and health checker's requests
/// to other paths are skipped).
async fn next_chat_head(heads: &mut mpsc::UnboundedReceiver<String>) -> String {
    loop {
        let head = heads.recv().await.unwrap();
        if head.starts_with("post /v1/chat/completions") {
            return head;
        }
    }
}

#[tokio::test]
async fn every_strategy_sends_the_replica_its_own_host_and_no_connection_headers() {
    for strategy in [Strategy::ForceClose, Strategy::Spread, Strategy::KeepAlive] {
        let (addr, mut heads) = replica_recording_heads().await;
        let config =
            with_strategy(loopback_config(vec![replica("r", addr)]), Entry::Short, strategy);
        let gateway = start_gateway(config).await;
        let client = reqwest::Client::new();
        let chat =
            || client.post(url(&gateway, "/v1/chat/completions")).json(&chat_body(10, 2, false));
        // Without hop-by-hop headers (sent from the client's head as it came) and with them
        // (a copy stripped of them, and of the header `Connection` names).
        let plain = chat().header("x-keep", "1").send().await.unwrap();
        assert_eq!(plain.status(), 200, "{strategy:?}");
        plain.bytes().await.unwrap();
        let head = next_chat_head(&mut heads).await;
        let hopping = chat()
            .header("connection", "keep-alive, x-drop")
            .header("x-drop", "1")
            .header("te", "trailers")
            .header("x-keep", "2")
            .send()
            .await
            .unwrap();
        assert_eq!(hopping.status(), 200, "{strategy:?}");
        hopping.bytes().await.unwrap();
        let stripped = next_chat_head(&mut heads).await;
        for (head, kept) in [(head, "x-keep: 1"), (stripped, "x-keep: 2")] {
            let lines: Vec<&str> = head.lines().collect();
            let host = format!("host: {addr}");
            assert_eq!(lines.iter().filter(|l| l.starts_with("host:")).count(), 1, "{head}");
            assert!(lines.contains(&host.as_str()), "{strategy:?}: {head}");
            assert!(lines.contains(&kept), "{strategy:?}: {head}");
            assert!(
                !lines.iter().any(|l| l.starts_with("x-drop") || l.starts_with("te:")),
                "{head}"
            );
            let connection: Vec<&&str> =
                lines.iter().filter(|l| l.starts_with("connection:")).collect();
            let expected: &[&str] =
                if strategy == Strategy::ForceClose { &["connection: close"] } else { &[] };
            assert_eq!(connection.iter().map(|l| **l).collect::<Vec<_>>(), expected, "{head}");
            assert!(lines.iter().any(|l| l.starts_with("content-length: ")), "{head}");
        }
        gateway.shutdown().await;
    }
}

#[tokio::test]
async fn the_replicas_headers_reach_the_client_with_the_gateways_own_in_their_place() {
    for strategy in [Strategy::ForceClose, Strategy::Spread, Strategy::KeepAlive] {
        let (addr, _heads) = replica_recording_heads().await;
        let config =
            with_strategy(loopback_config(vec![replica("r", addr)]), Entry::Short, strategy);
        let gateway = start_gateway(config).await;
        // HTTP/1.1 is served by laneway's own server, HTTP/2 by hyper's.
        let http1 = reqwest::Client::new();
        let http2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
        for (client, protocol) in [(http1, "HTTP/1.1"), (http2, "HTTP/2")] {
            let response = client
                .post(url(&gateway, "/v1/chat/completions"))
                .header("x-request-id", "from-client")
                .json(&chat_body(10, 2, false))
                .send()
                .await
                .unwrap();
            let case = format!("{strategy:?} over {protocol}");
            assert_eq!(response.status(), 200, "{case}");
            let headers = response.headers().clone();
            let all = |name: &str| -> Vec<String> {
                headers.get_all(name).iter().map(|v| v.to_str().unwrap().to_owned()).collect()
            };
            assert_eq!(all("set-cookie"), ["a=1", "b=2"], "{case}");
            assert_eq!(all("server"), ["recorder"], "{case}");
            assert_eq!(all("content-type"), ["application/json"], "{case}");
            assert_eq!(all("x-request-id"), ["from-client"], "{case}");
            assert_eq!(all("x-laneway-entry"), ["short"], "{case}");
            assert!(all("x-hop").is_empty(), "{case}: {headers:?}");
            let body = response.bytes().await.unwrap();
            assert_eq!(all("content-length"), [body.len().to_string()], "{case}");
        }
        gateway.shutdown().await;
    }
}
