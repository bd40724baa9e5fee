//! Upstream connection strategies, seen from the replica's side: how many connections the
//! simulator accepted for the same traffic under force_close, keep_alive and spread.

use crate::support::gateway::*;
use bytes::Bytes;
use futures_util::future::join_all;
use laneway::gateway::{Entry, GatewayHandle, Strategy};

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
