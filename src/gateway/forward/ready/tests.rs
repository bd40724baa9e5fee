//! Ready connections against a raw replica that reports each connection it accepts and
//! each request it reads: a request takes a connection opened ahead, every connection
//! carries one request, connections idle too long or closed by the replica go unused, and
//! none are opened for requests far apart.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::Request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::either::Either;

use super::*;
use crate::gateway::body::full;
use crate::gateway::config::ReplicaConfig;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longer than any test runs: every request counts as close to the one before.
const MAX_IDLE: Duration = Duration::from_secs(600);

fn replica_at(address: SocketAddr) -> Arc<Replica> {
    Arc::new(Replica::new(&ReplicaConfig {
        name: "r0".into(),
        authority: address.to_string(),
        node: "n0".into(),
        tls: false,
        placement: Default::default(),
    }))
}

fn ready_connections(per_replica: usize) -> ReadyConnections {
    let tls = Arc::new(UpstreamTls::unavailable());
    let counts = ReadyCounts::new(&Registry::new());
    ReadyConnections::new(per_replica, MAX_IDLE, CONNECT_TIMEOUT, tls, counts)
}

/// A request the replica read: the index of the connection it came on (in accept order)
/// and its head.
type Seen = (usize, String);

/// A replica that answers every request with a small response and reports it; connections
/// are numbered in the order they were accepted, and `accepted` counts them.
async fn start_replica() -> (SocketAddr, Arc<AtomicUsize>, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let (seen, requests) = mpsc::unbounded_channel();
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((connection, _)) = listener.accept().await {
            let index = counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(index, connection, seen.clone()));
        }
    });
    (address, accepted, requests)
}

/// Answers each request on one connection (heads only: the test sends no body) until the
/// client closes it.
async fn serve(index: usize, mut connection: TcpStream, seen: mpsc::UnboundedSender<Seen>) {
    let mut buffer = Vec::new();
    loop {
        while !buffer.windows(4).any(|window| window == b"\r\n\r\n") {
            match connection.read_buf(&mut buffer).await {
                Ok(read) if read > 0 => {}
                _ => return,
            }
        }
        let head = String::from_utf8_lossy(&buffer).to_ascii_lowercase();
        buffer.clear();
        seen.send((index, head)).unwrap();
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        if connection.write_all(answer).await.is_err() {
            return;
        }
    }
}

/// Sends one bodiless request and reads its whole answer.
async fn send(ready: &ReadyConnections, replica: &Arc<Replica>) {
    let request = Request::get("/v1/models").body(full("")).unwrap();
    let response = ready.send(replica, Outgoing::Request(request)).await.unwrap();
    let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap();
    assert_eq!(&body.to_bytes()[..], b"ok");
}

fn stocked(ready: &ReadyConnections) -> usize {
    ready.stocks.get("r0").map_or(0, |stock| stock.stocked())
}

/// Waits until `replica` has `count` connections ready (the background connects are
/// tasks of their own: this yields to them until they are done).
async fn wait_for_stock(ready: &ReadyConnections, count: usize) {
    let filled = async {
        while stocked(ready) < count {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), filled).await.expect("the stock fills");
}

#[tokio::test]
async fn a_request_takes_a_connection_opened_ahead_and_each_carries_one_request() {
    let (address, accepted, mut requests) = start_replica().await;
    let replica = replica_at(address);
    let ready = ready_connections(2);

    // The first request has none before it: nothing is opened ahead yet.
    send(&ready, &replica).await;
    let (first_connection, head) = requests.recv().await.unwrap();
    assert!(head.contains("connection: close"), "{head}");
    assert_eq!(stocked(&ready), 0);
    // The second follows it closely: two are opened for the next ones.
    send(&ready, &replica).await;
    let (second_connection, _) = requests.recv().await.unwrap();
    assert_eq!(ready.counts.missed.get(), 2);
    wait_for_stock(&ready, 2).await;
    let opened_before = accepted.load(Ordering::SeqCst);
    assert_eq!(opened_before, 4, "the two requests' own connections and two ready ones");

    send(&ready, &replica).await;
    let (third_connection, _) = requests.recv().await.unwrap();
    assert!(third_connection < opened_before, "sent on a connection opened before it");
    assert_eq!(ready.counts.used.get(), 1);
    assert_eq!(ready.counts.missed.get(), 2);
    // The one taken is replaced, no more.
    wait_for_stock(&ready, 2).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 5);

    for _ in 0..4 {
        send(&ready, &replica).await;
    }
    let mut connections = vec![first_connection, second_connection, third_connection];
    while let Ok((connection, _)) = requests.try_recv() {
        connections.push(connection);
    }
    assert_eq!(connections.len(), 7);
    connections.sort_unstable();
    connections.dedup();
    assert_eq!(connections.len(), 7, "a connection carried two requests");
}

#[tokio::test]
async fn connections_idle_too_long_are_closed_unused() {
    let (address, _accepted, _requests) = start_replica().await;
    let replica = replica_at(address);
    let ready = ready_connections(2);
    send(&ready, &replica).await;
    send(&ready, &replica).await;
    wait_for_stock(&ready, 2).await;
    let stock = ready.stock("r0");

    let late = Instant::now() + MAX_IDLE;
    assert!(stock.take(late, MAX_IDLE, &ready.counts).socket.is_none());
    assert_eq!(ready.counts.discarded.get(), 2);
    assert_eq!(stocked(&ready), 0);

    send(&ready, &replica).await;
    wait_for_stock(&ready, 2).await;
    assert_eq!(stock.expire(Instant::now(), MAX_IDLE), 0, "young ones stay");
    assert_eq!(stock.expire(Instant::now() + MAX_IDLE, MAX_IDLE), 2);
    assert_eq!(stocked(&ready), 0);
}

#[test]
fn connections_are_kept_ready_only_while_requests_come_close_together() {
    let stock = Stock::default();
    let counts = ReadyCounts::new(&Registry::new());
    let max_idle = Duration::from_millis(10);
    let start = Instant::now();
    let close_together =
        |ms: u64| stock.take(start + Duration::from_millis(ms), max_idle, &counts).close_together;
    assert!(!close_together(0), "the first request has none before it");
    assert!(close_together(4));
    assert!(close_together(13));
    assert!(!close_together(23), "10 ms after the one before");
    assert!(!close_together(500));
    assert!(close_together(501));
}

#[tokio::test]
async fn a_ready_connection_the_replica_closed_is_not_used() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (server_side, _) = listener.accept().await.unwrap();
    drop(server_side);
    // Readable once the replica's close has arrived.
    client.readable().await.unwrap();

    let stock = Stock::default();
    let entry = ReadySocket { opened_at: Instant::now(), socket: Either::Left(client) };
    stock.state.lock().ready.push_back(entry);
    let counts = ReadyCounts::new(&Registry::new());
    assert!(stock.take(Instant::now(), MAX_IDLE, &counts).socket.is_none());
    assert_eq!(counts.discarded.get(), 1);
}
