//! The simulator's KV-cache events, as a subscriber of a vLLM engine reads them: stored
//! blocks under the hashes vLLM's `sha256_cbor` chain gives the prompt's token ids, chained
//! to the blocks a prompt shares with an earlier one; evictions under the same hashes; a
//! replay socket that returns every buffered batch and its end marker; and
//! `/kv_event_sources` in vLLM's shape.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use laneway::kv_events::block_hash::{BlockHasher, DEFAULT_SEED};
use laneway::kv_events::wire::{self, Batch, Event};
use laneway::openai::InferenceRequest;
use laneway::openai::request::Endpoint;
use laneway::prompt_tokens::prompt_token_ids;
use laneway::sim::{self, SimConfig, SimHandle};
use laneway::tokens::synthetic_text;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use crate::support::sim::url;

/// How long a published batch may take to reach a subscriber on loopback.
const DELIVERY: Duration = Duration::from_secs(5);
/// How long one probe waits for its batch while the subscription may not have joined yet.
const PROBE_WAIT: Duration = Duration::from_millis(200);
/// The tiny profile's block size (its default).
const BLOCK_SIZE: usize = 16;

/// A tiny replica publishing events; with `cache_tokens`, a KV cache (and context) that
/// small.
async fn start(cache_tokens: Option<u64>) -> SimHandle {
    let mut config = SimConfig::with_profile("kv-events", "tiny").unwrap();
    config.speed = 20.0;
    config.profile.engine.kv_events = true;
    if let Some(tokens) = cache_tokens {
        config.profile.max_model_len = tokens;
        config.profile.engine.kv_cache_tokens = tokens;
    }
    sim::spawn(config).await.unwrap()
}

fn events_endpoint(sim: &SimHandle) -> String {
    format!("tcp://127.0.0.1:{}", sim.kv_event_ports().expect("events on").events)
}

fn replay_endpoint(sim: &SimHandle) -> String {
    format!("tcp://127.0.0.1:{}", sim.kv_event_ports().expect("events on").replay)
}

/// A completion body of `tokens` prompt tokens, different for each seed.
fn completion(tokens: u64, seed: u64) -> Value {
    let prompt = synthetic_text(tokens, &mut StdRng::seed_from_u64(seed));
    json!({"model": "m", "prompt": prompt, "max_tokens": 1})
}

/// A chat body: a shared system context, then a question of its own.
fn chat(context: &str, question_seed: u64) -> Value {
    let question = synthetic_text(40, &mut StdRng::seed_from_u64(question_seed));
    json!({
        "model": "m",
        "messages": [{"role": "system", "content": context}, {"role": "user", "content": question}],
        "max_tokens": 1,
    })
}

/// Sends a request and waits for its answer (by then, its prompt's batches are published).
async fn send(sim: &SimHandle, endpoint: Endpoint, body: &Value) {
    let path = match endpoint {
        Endpoint::Chat => "/v1/chat/completions",
        Endpoint::Completions => "/v1/completions",
    };
    let response = reqwest::Client::new().post(url(sim, path)).json(body).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

/// A request's full blocks as a gateway computes them: the simulator's token ids (up to the
/// last full block) and vLLM's hash chain over them.
struct Blocks {
    hashes: Vec<u64>,
    token_ids: Vec<u64>,
}

impl Blocks {
    fn of(endpoint: Endpoint, body: &Value) -> Self {
        let request = InferenceRequest::parse(endpoint, body.to_string().as_bytes()).unwrap();
        let mut token_ids = prompt_token_ids(&request.prompt);
        let hashes = BlockHasher::new(DEFAULT_SEED).event_hashes(&token_ids, BLOCK_SIZE);
        token_ids.truncate(hashes.len() * BLOCK_SIZE);
        Self { hashes, token_ids }
    }

    /// The store of blocks `from..`, chained to the block before them.
    fn stored_from(&self, from: usize) -> Event {
        Event::Stored {
            hashes: self.hashes[from..].to_vec(),
            parent: from.checked_sub(1).map(|before| self.hashes[before]),
            token_ids: self.token_ids[from * BLOCK_SIZE..].to_vec(),
            block_size: BLOCK_SIZE as u32,
            keyed: false,
        }
    }
}

fn decode(message: ZmqMessage) -> Batch {
    let frames = message.into_vec();
    let frames: Vec<&[u8]> = frames.iter().map(Bytes::as_ref).collect();
    wire::decode(&frames).expect("a batch")
}

/// Asks the replay socket for every batch from `from`: their raw frames after the empty
/// delimiter, and checks the end marker closes them.
async fn replay_frames(sim: &SimHandle, from: u64) -> Vec<Vec<Bytes>> {
    let mut dealer = DealerSocket::new();
    dealer.connect(&replay_endpoint(sim)).await.unwrap();
    let mut request = ZmqMessage::from(Bytes::new());
    request.push_back(Bytes::copy_from_slice(&from.to_be_bytes()));
    dealer.send(request).await.unwrap();
    let mut batches = Vec::new();
    loop {
        let reply = tokio::time::timeout(DELIVERY, dealer.recv()).await.unwrap().unwrap();
        let frames = reply.into_vec();
        assert_eq!(frames[0], Bytes::new(), "the empty delimiter");
        if frames[1..] == [Bytes::new(), Bytes::from_static(&[0xff; 8]), Bytes::new()] {
            return batches;
        }
        assert_eq!(frames.len(), 4, "[empty, topic, seq, payload]");
        batches.push(frames[1..].to_vec());
    }
}

async fn replay(sim: &SimHandle, from: u64) -> Vec<Batch> {
    let batches: Vec<Batch> = replay_frames(sim, from)
        .await
        .into_iter()
        .map(|frames| decode(ZmqMessage::try_from(frames).unwrap()))
        .collect();
    let seqs: Vec<u64> = batches.iter().map(|b| b.seq).collect();
    let expected: Vec<u64> = (from..from + seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "in sequence from {from}, no gap");
    batches
}

fn stores(batches: &[Batch]) -> Vec<&Event> {
    let events = batches.iter().flat_map(|batch| &batch.events);
    events.filter(|event| matches!(event, Event::Stored { .. })).collect()
}

/// A SUB socket on the replica's publisher, known to have joined: a subscription misses what
/// is published before the publisher knows of it, so requests of their own are sent until
/// one's batch comes through.
async fn join(sim: &SimHandle) -> SubSocket {
    let mut subscriber = SubSocket::new();
    subscriber.connect(&events_endpoint(sim)).await.unwrap();
    subscriber.subscribe("").await.unwrap();
    for probe in 0..100 {
        send(sim, Endpoint::Completions, &completion(3 * BLOCK_SIZE as u64, 1000 + probe)).await;
        if tokio::time::timeout(PROBE_WAIT, subscriber.recv()).await.is_ok() {
            return subscriber;
        }
    }
    panic!("the subscription never received a batch");
}

#[tokio::test]
async fn prompts_sharing_a_prefix_publish_the_engines_hashes_of_their_new_blocks() {
    let sim = start(None).await;
    let mut subscriber = join(&sim).await;
    let first_seq = replay(&sim, 0).await.len() as u64;

    let context = synthetic_text(300, &mut StdRng::seed_from_u64(1));
    let first = chat(&context, 2);
    send(&sim, Endpoint::Chat, &first).await;
    let first_batches = replay(&sim, first_seq).await;
    let first_blocks = Blocks::of(Endpoint::Chat, &first);
    // A prompt's blocks, chained from none: the hashes a gateway computes for it. One
    // prefill chunk, one store.
    assert_eq!(stores(&first_batches), [&first_blocks.stored_from(0)]);

    let second = chat(&context, 3);
    send(&sim, Endpoint::Chat, &second).await;
    let second_seq = first_seq + first_batches.len() as u64;
    let second_batches = replay(&sim, second_seq).await;
    let second_blocks = Blocks::of(Endpoint::Chat, &second);
    let pairs = first_blocks.hashes.iter().zip(&second_blocks.hashes);
    let shared = pairs.take_while(|(a, b)| a == b).count();
    assert!(shared >= 300 / BLOCK_SIZE && shared < second_blocks.hashes.len(), "{shared}");
    // Only the blocks after the hit are stored, chained to the last block hit.
    assert_eq!(stores(&second_batches), [&second_blocks.stored_from(shared)]);

    // The live stream carried the same batches, byte for byte as decoded.
    let last_seq = second_seq + second_batches.len() as u64 - 1;
    let whole = replay(&sim, 0).await;
    loop {
        let batch =
            decode(tokio::time::timeout(DELIVERY, subscriber.recv()).await.unwrap().unwrap());
        assert_eq!(Some(&batch), whole.get(batch.seq as usize));
        if batch.seq == last_seq {
            break;
        }
    }
}

#[tokio::test]
async fn a_full_cache_publishes_its_evictions_under_the_hashes_they_were_stored_with() {
    // 1,024 tokens: two 600-token prompts do not fit together.
    let sim = start(Some(1024)).await;
    let first = completion(600, 1);
    send(&sim, Endpoint::Completions, &first).await;
    let first_blocks = Blocks::of(Endpoint::Completions, &first);
    let first_hashes = &first_blocks.hashes;
    assert_eq!(first_hashes.len(), 600 / BLOCK_SIZE);
    assert_eq!(stores(&replay(&sim, 0).await), [&first_blocks.stored_from(0)]);

    let second = completion(600, 2);
    send(&sim, Endpoint::Completions, &second).await;
    let second_blocks = Blocks::of(Endpoint::Completions, &second);
    // Admitting 601 tokens beside 37 cached blocks (592 tokens) in 1,024 evicts 11 of them,
    // the first prompt's tail first, in the step that stores the second prompt's blocks.
    let batches = replay(&sim, 1).await;
    assert_eq!(batches.len(), 1);
    let evicted: Vec<Event> = first_hashes[26..]
        .iter()
        .rev()
        .map(|&hash| Event::Removed { hashes: vec![hash] })
        .collect();
    assert_eq!(batches[0].events, [evicted, vec![second_blocks.stored_from(0)]].concat());

    // A third prompt evicts again; what the events say is held is what the cache can hold.
    send(&sim, Endpoint::Completions, &completion(600, 3)).await;
    let mut held = HashSet::new();
    for event in replay(&sim, 0).await.iter().flat_map(|batch| &batch.events) {
        match event {
            Event::Stored { hashes, .. } => {
                assert!(hashes.iter().all(|hash| held.insert(*hash)), "stored once");
            }
            Event::Removed { hashes } => {
                assert!(hashes.iter().all(|hash| held.remove(hash)), "removed after stored");
            }
            Event::AllCleared => held.clear(),
        }
    }
    assert!(held.len() <= 1024 / BLOCK_SIZE, "{} blocks held", held.len());
    assert!(!held.contains(&first_hashes[0]), "the first prompt is gone by now");
}

#[tokio::test]
async fn a_replay_returns_every_batch_from_the_asked_sequence_then_its_end_marker() {
    let sim = start(None).await;
    for seed in 0..3 {
        send(&sim, Endpoint::Completions, &completion(40, seed)).await;
    }
    let from_zero = replay_frames(&sim, 0).await;
    assert_eq!(from_zero.len(), 3, "one batch per request");
    for (seq, frames) in from_zero.iter().enumerate() {
        assert_eq!(frames[0], Bytes::from_static(b"kv"));
        assert_eq!(frames[1].as_ref(), (seq as u64).to_be_bytes());
    }
    assert_eq!(replay(&sim, 1).await, replay(&sim, 0).await[1..]);
    assert!(replay_frames(&sim, 3).await.is_empty(), "nothing yet from 3: only the marker");
}

#[tokio::test]
async fn kv_event_sources_answers_in_vllms_shape() {
    let sim = start(None).await;
    let ports = sim.kv_event_ports().unwrap();
    assert_ne!(ports.events, ports.replay);
    let sources: Value =
        reqwest::get(url(&sim, "/kv_event_sources")).await.unwrap().json().await.unwrap();
    assert_eq!(
        sources,
        json!({"0": {
            "enable_kv_cache_events": true,
            "publisher": "zmq",
            "endpoint": format!("tcp://*:{}", ports.events),
            "replay_endpoint": format!("tcp://*:{}", ports.replay),
            "buffer_steps": 10000,
            "hwm": 100000,
            "max_queue_size": 100000,
            "topic": "kv",
        }})
    );

    let off = sim::spawn(SimConfig::with_profile("no-events", "tiny").unwrap()).await.unwrap();
    assert_eq!(off.kv_event_ports(), None);
    let sources: Value =
        reqwest::get(url(&off, "/kv_event_sources")).await.unwrap().json().await.unwrap();
    assert_eq!(sources, json!({}), "events off: no publisher, as vLLM's render-only servers");
}
