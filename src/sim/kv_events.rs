//! A simulated replica's KV-cache event publisher, as vLLM's `--kv-events-config
//! '{"enable_kv_cache_events": true, "publisher": "zmq", "topic": "kv"}'` runs one: a PUB
//! socket that sends each engine step's batch ([`crate::kv_events::wire::encode`], sequence
//! numbers from 0 at start), and a ROUTER replay socket that sends back the last
//! [`BUFFER_STEPS`] batches from a requested sequence number. Both bind the replica's host
//! on free ports, read back and reported by `GET /kv_event_sources` ([`KvEventPorts`]).
//!
//! The engine hands its batches over without waiting ([`KvEventPublisher::publish`]): each
//! is kept for replay at once, and queued for the PUB socket, which sends on its own task.
//! When that queue is full (a subscriber that stopped reading holds the socket), a batch is
//! only kept for replay: a subscriber sees the gap and asks for it, as a ZeroMQ PUB socket
//! at its high-water mark drops and vLLM's replay makes up for it.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::config::SimError;
use crate::kv_events::wire::{self, Batch, Event};

/// The topic every batch is published under (the first frame).
pub const TOPIC: &[u8] = b"kv";
/// Batches kept for replay (vLLM's `buffer_steps` default).
pub const BUFFER_STEPS: usize = 10_000;
/// Batches queued for the PUB socket before one is sent only by replay (vLLM's
/// `max_queue_size` default).
const MAX_QUEUE_SIZE: usize = 100_000;
/// vLLM's default high-water mark, reported as the engine reports it.
const HWM: u64 = 100_000;
/// The data-parallel rank of a replica's only engine.
const RANK: i64 = 0;
/// Sequence number of a replay's end marker (vLLM's `-1` as 8 signed bytes).
const END_OF_REPLAY: [u8; 8] = [0xff; 8];

/// The ports a replica's events are published and replayed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvEventPorts {
    pub events: u16,
    pub replay: u16,
}

impl KvEventPorts {
    /// The answer of vLLM's `GET /kv_event_sources`: the publisher's config by rank, its
    /// endpoints with the wildcard host the engine binds (a subscriber puts the replica's
    /// host in its place).
    pub fn sources(&self) -> serde_json::Value {
        json!({
            RANK.to_string(): {
                "enable_kv_cache_events": true,
                "publisher": "zmq",
                "endpoint": format!("tcp://*:{}", self.events),
                "replay_endpoint": format!("tcp://*:{}", self.replay),
                "buffer_steps": BUFFER_STEPS,
                "hwm": HWM,
                "max_queue_size": MAX_QUEUE_SIZE,
                "topic": String::from_utf8_lossy(TOPIC),
            }
        })
    }
}

/// The last batches published, by sequence number, for replay.
type Buffer = Arc<Mutex<VecDeque<(u64, ZmqMessage)>>>;

/// The engine's end of the publisher.
#[derive(Debug)]
pub struct KvEventPublisher {
    next_seq: u64,
    buffer: Buffer,
    outbox: mpsc::Sender<ZmqMessage>,
}

impl KvEventPublisher {
    /// Binds both sockets on `host` (free ports) and serves them on a task that ends when
    /// `stop` turns true (or its sender is gone).
    pub async fn start(
        host: IpAddr,
        stop: watch::Receiver<bool>,
    ) -> Result<(Self, KvEventPorts, JoinHandle<()>), SimError> {
        let mut events = PubSocket::new();
        let events_port = bind(&mut events, "PUB", host).await?;
        let mut replay = RouterSocket::new();
        let replay_port = bind(&mut replay, "ROUTER", host).await?;
        let buffer = Buffer::default();
        let (outbox, queued) = mpsc::channel(MAX_QUEUE_SIZE);
        let task = tokio::spawn(serve(events, queued, replay, buffer.clone(), stop));
        let ports = KvEventPorts { events: events_port, replay: replay_port };
        Ok((Self { next_seq: 0, buffer, outbox }, ports, task))
    }

    /// Publishes one step's events (nothing when there are none) under the next sequence
    /// number.
    pub fn publish(&mut self, events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let seq = self.next_seq;
        self.next_seq += 1;
        let batch = Batch { seq, ts, events, data_parallel_rank: Some(RANK) };
        let frames: Vec<Bytes> = wire::encode(TOPIC, &batch).into_iter().map(Bytes::from).collect();
        let message = ZmqMessage::try_from(frames).expect("three frames");
        {
            let mut buffer = self.buffer.lock();
            if buffer.len() == BUFFER_STEPS {
                buffer.pop_front();
            }
            buffer.push_back((seq, message.clone()));
        }
        if self.outbox.try_send(message).is_err() {
            tracing::debug!(seq, "KV events: the PUB queue is full, batch kept for replay only");
        }
    }
}

/// Binds `socket` on `host`, a free port; returns the port.
async fn bind(socket: &mut impl Socket, name: &'static str, host: IpAddr) -> Result<u16, SimError> {
    let endpoint = format!("tcp://{}", SocketAddr::new(host, 0));
    let failed =
        |source| SimError::KvEventsBind { socket: name, endpoint: endpoint.clone(), source };
    match socket.bind(&endpoint).await.map_err(failed)? {
        zeromq::Endpoint::Tcp(_, port) => Ok(port),
        _ => Err(failed(zeromq::ZmqError::Other("the bound endpoint has no TCP port"))),
    }
}

/// Sends queued batches on the PUB socket and answers replay requests, until `stop`.
async fn serve(
    mut events: PubSocket,
    mut queued: mpsc::Receiver<ZmqMessage>,
    mut replay: RouterSocket,
    buffer: Buffer,
    mut stop: watch::Receiver<bool>,
) {
    let publish = async {
        while let Some(message) = queued.recv().await {
            if let Err(error) = events.send(message).await {
                tracing::warn!(%error, "KV events: publishing a batch failed");
            }
        }
    };
    let answer_replays = async {
        loop {
            match replay.recv().await {
                Ok(request) => {
                    if let Err(error) = answer_replay(&mut replay, request, &buffer).await {
                        tracing::debug!(%error, "KV events: a replay was not answered");
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "KV events: the replay socket stopped");
                    return;
                }
            }
        }
    };
    tokio::select! {
        _ = async { tokio::join!(publish, answer_replays) } => {}
        _ = stop.wait_for(|stopped| *stopped) => {}
    }
}

/// Answers `[identity, empty, from]` with every buffered batch from sequence `from` on,
/// each `[identity, empty, topic, seq, payload]`, then the end marker
/// `[identity, empty, empty, ff x 8, empty]`. A malformed request is ignored, as vLLM does.
async fn answer_replay(
    socket: &mut RouterSocket,
    request: ZmqMessage,
    buffer: &Buffer,
) -> Result<(), zeromq::ZmqError> {
    let frames = request.into_vec();
    let [identity, _, from] = &frames[..] else { return Ok(()) };
    let Ok(from) = <[u8; 8]>::try_from(from.as_ref()).map(u64::from_be_bytes) else {
        return Ok(());
    };
    let replayed: Vec<ZmqMessage> = buffer
        .lock()
        .iter()
        .filter(|(seq, _)| *seq >= from)
        .map(|(_, message)| message.clone())
        .collect();
    let envelope = |mut message: ZmqMessage| {
        message.push_front(Bytes::new());
        message.push_front(identity.clone());
        message
    };
    for message in replayed {
        socket.send(envelope(message)).await?;
    }
    let end = vec![Bytes::new(), Bytes::from_static(&END_OF_REPLAY), Bytes::new()];
    socket.send(envelope(ZmqMessage::try_from(end).expect("three frames"))).await
}
