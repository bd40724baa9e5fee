//! The API-worker pinning effect behind the field's force-close result: with 4 API workers,
//! 6 concurrent short requests over 6 keep-alive connections that all landed on one worker
//! wait behind each other's preprocessing, while the same requests each on a fresh
//! connection spread over the workers.

mod sim_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use sim_support::{chat_body, start};
use tokio::net::TcpStream;

const WORKERS: usize = 4;
const REQUESTS: usize = 6;
/// Clock speed: real time, so the modelled gaps (hundreds of ms) dwarf scheduling noise on
/// a busy machine; the test still takes about two seconds.
const SPEED: f64 = 1.0;
/// Upper bound on any single wait in this test.
const LIMIT: Duration = Duration::from_secs(30);

async fn connect(addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    sender
}

/// Sends a probe on the connection and returns the worker that served it.
async fn worker_of(sender: &mut SendRequest<Full<Bytes>>, addr: SocketAddr) -> String {
    let request = http::Request::get(format!("http://{addr}/health"))
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let worker = response.headers()["x-sim-api-worker"].to_str().unwrap().to_owned();
    response.into_body().collect().await.unwrap();
    worker
}

/// Streams one short chat request; returns the wall time to its first SSE event.
async fn ttft(mut sender: SendRequest<Full<Bytes>>, addr: SocketAddr) -> Duration {
    let body = chat_body(1000, 8, true).to_string();
    let request = http::Request::post(format!("http://{addr}/v1/chat/completions"))
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let started = Instant::now();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut first = None;
    while let Some(frame) = body.frame().await {
        if frame.unwrap().data_ref().is_some_and(|data| !data.is_empty()) && first.is_none() {
            first = Some(started.elapsed());
        }
    }
    first.expect("a first event")
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    let middle = values.len() / 2;
    (values[middle - 1] + values[middle]) / 2
}

async fn concurrent_ttfts(
    senders: Vec<SendRequest<Full<Bytes>>>,
    addr: SocketAddr,
) -> Vec<Duration> {
    let tasks: Vec<_> = senders.into_iter().map(|s| tokio::spawn(ttft(s, addr))).collect();
    let mut ttfts = Vec::new();
    for task in tasks {
        ttfts.push(tokio::time::timeout(LIMIT, task).await.unwrap().unwrap());
    }
    ttfts
}

#[tokio::test]
async fn keep_alive_connections_on_one_worker_queue_ttft() {
    // Keep-alive: collect 6 connections that landed on the same worker.
    let pinned_sim = start("h20-tp8", WORKERS, SPEED).await;
    let addr = pinned_sim.addr();
    let mut by_worker: Vec<(String, SendRequest<Full<Bytes>>)> = Vec::new();
    for _ in 0..REQUESTS * WORKERS {
        let mut sender = connect(addr).await;
        let worker = worker_of(&mut sender, addr).await;
        by_worker.push((worker, sender));
        let first = &by_worker[0].0;
        if by_worker.iter().filter(|(w, _)| w == first).count() == REQUESTS {
            break;
        }
    }
    let target = by_worker[0].0.clone();
    let pinned: Vec<_> =
        by_worker.into_iter().filter(|(w, _)| *w == target).map(|(_, s)| s).collect();
    assert_eq!(pinned.len(), REQUESTS, "6 connections landed on one worker");
    let keep_alive = median(concurrent_ttfts(pinned, addr).await);
    let stats = pinned_sim.stats();
    assert_eq!(stats.requests_per_worker.iter().filter(|&&n| n > 0).count(), 1);
    pinned_sim.shutdown().await;

    // Fresh connections: one per request, opened together.
    let fresh_sim = start("h20-tp8", WORKERS, SPEED).await;
    let addr = fresh_sim.addr();
    let mut fresh = Vec::new();
    for _ in 0..REQUESTS {
        fresh.push(connect(addr).await);
    }
    let spread = median(concurrent_ttfts(fresh, addr).await);
    let stats = fresh_sim.stats();
    assert_eq!(stats.requests_total, REQUESTS as u64);
    assert_eq!(stats.requests_per_worker.iter().filter(|&&n| n > 0).count(), WORKERS);
    fresh_sim.shutdown().await;

    let ratio = keep_alive.as_secs_f64() / spread.as_secs_f64();
    eprintln!("TTFT p50: keep-alive {keep_alive:?}, fresh {spread:?}, ratio {ratio:.2}");
    assert!(ratio > 2.0, "keep-alive p50 {keep_alive:?} vs fresh p50 {spread:?}");
}
