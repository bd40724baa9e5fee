//! One replica's KV-event subscription: a SUB socket on the replica's publisher, kept
//! connected with backoff, each batch applied to the replica's [`HeldBlocks`]; a gap in the
//! sequence is filled from the replica's replay socket (a DEALER asking its ROUTER for every
//! buffered batch from the first one missed), and where that fails the replica's cache is
//! unknown until its engine starts over.
//!
//! vLLM's PUB socket binds only a wildcard (`tcp://*:5557`) or `ipc://` endpoint; given a
//! host it connects instead, to one subscriber. So replicas publish on a wildcard or ipc
//! endpoint and each gateway connects to it, which is also how several gateways follow one
//! replica. The replay socket always binds.
//!
//! ZeroMQ is spoken by `zeromq`, a pure-Rust implementation on tokio: no libzmq to build or
//! install, and the two socket pairs used here (SUB to PUB, DEALER to ROUTER) are the ones it
//! implements fully.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use super::held::{Applied, HeldBlocks};
pub use crate::gateway::config::EventSource;
use crate::kv_events::block_hash::BlockHasher;
use crate::kv_events::wire::{self, Batch, WireError};

/// How long a replay may take, request to end marker.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(2);
/// Reconnection backoff: doubled after each failure, from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// Why a subscription or a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum SubscribeError {
    #[error("ZeroMQ: {0}")]
    Socket(#[from] zeromq::ZmqError),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("the replay did not end within {0:?}")]
    ReplayTimeout(Duration),
}

/// Follows `source` for as long as it runs (drop it to stop), keeping `held` in step with
/// the replica's events; a lost connection is retried with backoff (back to the shortest
/// after a connection that delivered batches), its missed batches replayed.
pub async fn follow(source: EventSource, held: Arc<Mutex<HeldBlocks>>, hasher: Arc<BlockHasher>) {
    let mut backoff = BACKOFF.0;
    loop {
        let next_before = held.lock().next_seq();
        if let Err(error) = subscribe(&source, &held, &hasher).await {
            tracing::warn!(events = %source.events, %error, "KV events: reconnecting");
        }
        if held.lock().next_seq() != next_before {
            backoff = BACKOFF.0;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF.1);
    }
}

/// One connection's life: every batch applied, gaps replayed.
async fn subscribe(
    source: &EventSource,
    held: &Mutex<HeldBlocks>,
    hasher: &BlockHasher,
) -> Result<(), SubscribeError> {
    let mut socket = SubSocket::new();
    socket.connect(&source.events).await?;
    socket.subscribe("").await?;
    loop {
        let frames = socket.recv().await?.into_vec();
        let frames: Vec<&[u8]> = frames.iter().map(Bytes::as_ref).collect();
        let batch = match wire::decode(&frames) {
            Ok(batch) => batch,
            Err(error) => {
                tracing::warn!(events = %source.events, %error, "KV events: a batch skipped");
                continue;
            }
        };
        let (applied, refused) = {
            let mut held = held.lock();
            let before = held.verdict();
            let applied = held.apply(&batch, hasher);
            (applied, (!before.refused() && held.verdict().refused()).then(|| held.verdict()))
        };
        if let Some(verdict) = refused {
            tracing::error!(
                events = %source.events,
                verdict = verdict.as_str(),
                "KV events refused: this replica's block hashes cannot match the gateway's; \
                 run vLLM with --prefix-caching-hash-algo sha256_cbor, PYTHONHASHSEED equal to \
                 kv_events.hash_seed (or unset, with hash_seed unset) and --block-size equal \
                 to prefix.block_size. Its prefixes are placed by the approximate index."
            );
        }
        if let Applied::Gap { from, .. } = applied {
            let replayed = match &source.replay {
                Some(replay) => replay_from(replay, from).await,
                None => Ok(Vec::new()),
            };
            let mut held = held.lock();
            match replayed {
                Ok(batches) if !batches.is_empty() => held.apply_replay(&batches, from, hasher),
                Ok(_) => held.give_up_replay(),
                Err(error) => {
                    tracing::warn!(events = %source.events, %error, "KV events: replay failed");
                    held.give_up_replay();
                }
            }
        }
    }
}

/// Every batch the replica still buffers from sequence `from` on.
pub async fn replay_from(endpoint: &str, from: u64) -> Result<Vec<Batch>, SubscribeError> {
    let replay = async {
        let mut socket = DealerSocket::new();
        socket.connect(endpoint).await?;
        let mut request = ZmqMessage::from(Bytes::new());
        request.push_back(Bytes::copy_from_slice(&from.to_be_bytes()));
        socket.send(request).await?;
        let mut batches = Vec::new();
        loop {
            // [empty, topic, sequence, payload]; the end: [empty, empty, ff x 8, empty].
            let frames = socket.recv().await?.into_vec();
            if frames.get(2).is_some_and(|seq| seq.as_ref() == [0xff; 8]) {
                return Ok(batches);
            }
            let frames: Vec<&[u8]> = frames.iter().skip(1).map(Bytes::as_ref).collect();
            batches.push(wire::decode(&frames)?);
        }
    };
    tokio::time::timeout(REPLAY_TIMEOUT, replay)
        .await
        .map_err(|_| SubscribeError::ReplayTimeout(REPLAY_TIMEOUT))?
}
