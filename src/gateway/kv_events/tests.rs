//! The KV-event modules against a capture of a real vLLM 0.32.0 replica (CPU, the `tiny`
//! model, block 128, `sha256_cbor`, a 40 MB cache so that blocks were evicted):
//! `tests/data/kv_events/vllm-0.32.0-cpu.jsonl`, recorded by `capture.py` beside it.

use std::collections::HashMap;

use super::held::{Applied, HeldBlocks, Verdict};
use crate::kv_events::block_hash::{BlockHasher, DEFAULT_SEED, event_hash};
use crate::kv_events::capture;
use crate::kv_events::wire::{Batch, Event, decode};

struct Capture {
    /// What the subscriber received (it may have joined after the first batch).
    live: Vec<Batch>,
    /// Every batch from sequence 0, replayed at the end: the whole stream.
    stream: Vec<Batch>,
    /// The same as received: topic, sequence and payload frames.
    stream_frames: Vec<Vec<Vec<u8>>>,
    /// `/tokenize`'s token ids of the first prompt sent.
    first_prompt: Vec<u64>,
}

fn capture() -> Capture {
    let mut capture = Capture {
        live: Vec::new(),
        stream: Vec::new(),
        stream_frames: Vec::new(),
        first_prompt: Vec::new(),
    };
    for line in capture::lines() {
        let (source, frames) = match line {
            capture::Line::Tokenized(tokens) => {
                capture.first_prompt = tokens;
                continue;
            }
            capture::Line::Frames { source, frames } => (source, frames),
        };
        let frames: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        match source.as_str() {
            "live" => capture.live.push(decode(&frames).expect("a live batch")),
            // [empty, topic, seq, payload], and an end marker [empty, empty, ff x 8, empty].
            "replay" if frames[2] == [0xff; 8] => {}
            "replay" => {
                capture.stream.push(decode(&frames[1..]).expect("a replayed batch"));
                capture.stream_frames.push(frames[1..].iter().map(|f| f.to_vec()).collect());
            }
            other => panic!("unknown source {other:?}"),
        }
    }
    capture
}

fn stored(batches: &[Batch]) -> impl Iterator<Item = &Event> {
    batches.iter().flat_map(|b| &b.events).filter(|e| matches!(e, Event::Stored { .. }))
}

#[test]
fn the_capture_decodes_in_sequence_with_stores_and_evictions() {
    let capture = capture();
    let seqs: Vec<u64> = capture.stream.iter().map(|b| b.seq).collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>(), "replayed from 0, no gap");
    assert!(stored(&capture.stream).count() >= 10);
    let events = capture.stream.iter().flat_map(|b| &b.events);
    assert!(events.filter(|e| matches!(e, Event::Removed { .. })).count() >= 10, "evictions");
    for event in stored(&capture.stream) {
        let Event::Stored { hashes, token_ids, block_size, keyed, .. } = event else { continue };
        assert_eq!(*block_size, 128);
        assert_eq!(token_ids.len(), hashes.len() * 128);
        assert!(!keyed, "plain text has no extra keys");
    }
    // What the subscriber received live is the replayed stream, batch for batch.
    assert!(capture.live.len() + 1 >= capture.stream.len(), "{} live", capture.live.len());
    for live in &capture.live {
        assert_eq!(Some(live), capture.stream.get(live.seq as usize));
    }
}

#[test]
fn every_stored_hash_is_recomputed_from_its_tokens_and_parent() {
    let capture = capture();
    let hasher = BlockHasher::new(DEFAULT_SEED);
    // Digests by the event hash they end in, to continue a chain from its parent.
    let mut digests: HashMap<u64, [u8; 32]> = HashMap::new();
    let mut checked = 0;
    for event in stored(&capture.stream) {
        let Event::Stored { hashes, parent, token_ids, .. } = event else { continue };
        let computed = match parent {
            None => hasher.digests(token_ids, 128),
            Some(parent) => BlockHasher::digests_after(digests[parent], token_ids, 128),
        };
        let as_events: Vec<u64> = computed.iter().map(event_hash).collect();
        assert_eq!(&as_events, hashes);
        digests.extend(as_events.into_iter().zip(computed));
        checked += hashes.len();
    }
    assert!(checked >= 20, "{checked} blocks checked");
}

#[test]
fn a_prompt_tokenized_as_the_engine_does_hashes_to_the_blocks_it_stored() {
    let capture = capture();
    let hasher = BlockHasher::new(DEFAULT_SEED);
    let hashes = hasher.event_hashes(&capture.first_prompt, 128);
    assert!(hashes.len() >= 3, "{} blocks", hashes.len());
    let mut held = HeldBlocks::new(1 << 16, 128);
    assert_eq!(held.apply(&capture.stream[0], &hasher), Applied::InOrder);
    assert_eq!(held.verdict(), Verdict::Known);
    assert_eq!(held.leading(&hashes), hashes.len(), "the first prompt, all its blocks");
    let mut other = hashes.clone();
    other[1] ^= 1;
    assert_eq!(held.leading(&other), 1, "a chain holds only up to its first miss");
}

#[test]
fn the_whole_stream_keeps_the_account_known_and_evictions_take_blocks_out() {
    let capture = capture();
    let hasher = BlockHasher::new(DEFAULT_SEED);
    let mut held = HeldBlocks::new(1 << 16, 128);
    let (mut stored_blocks, mut removed_blocks) = (0, 0);
    for batch in &capture.stream {
        assert_eq!(held.apply(batch, &hasher), Applied::InOrder);
        for event in &batch.events {
            match event {
                Event::Stored { hashes, .. } => stored_blocks += hashes.len(),
                Event::Removed { hashes } => removed_blocks += hashes.len(),
                Event::AllCleared => {}
            }
        }
    }
    assert_eq!(held.verdict(), Verdict::Known);
    assert!(removed_blocks > 0);
    assert_eq!(held.len(), stored_blocks - removed_blocks);
    // A batch applied twice (a replay overlapping the stream) changes nothing.
    assert_eq!(held.apply(&capture.stream[3], &hasher), Applied::Stale);
    assert_eq!(held.len(), stored_blocks - removed_blocks);
}

#[test]
fn a_gap_makes_the_cache_unknown_until_a_complete_replay_fills_it() {
    let capture = capture();
    let hasher = BlockHasher::new(DEFAULT_SEED);
    let mut held = HeldBlocks::new(1 << 16, 128);
    held.apply(&capture.stream[0], &hasher);
    held.apply(&capture.stream[1], &hasher);
    let last = capture.stream.len() - 1;
    assert_eq!(
        held.apply(&capture.stream[last], &hasher),
        Applied::Gap { from: 2, to: last as u64 }
    );
    assert_eq!(held.verdict(), Verdict::Unknown);
    // Unknown: what it lists is a lower bound (the missed batches may have evicted it).
    let first = hasher.event_hashes(&capture.first_prompt, 128);
    assert_eq!(held.leading(&first), first.len());
    // A replay that starts later than the gap does not make it known.
    held.apply_replay(&capture.stream[3..], 2, &hasher);
    assert_eq!(held.verdict(), Verdict::Unknown);
    // One from the first missed batch does, and rebuilds what the whole stream would.
    let mut whole = HeldBlocks::new(1 << 16, 128);
    for batch in &capture.stream {
        whole.apply(batch, &hasher);
    }
    let mut replayed = HeldBlocks::new(1 << 16, 128);
    replayed.apply(&capture.stream[0], &hasher);
    replayed.apply(&capture.stream[1], &hasher);
    replayed.apply(&capture.stream[last], &hasher);
    replayed.apply_replay(&capture.stream[2..], 2, &hasher);
    assert_eq!(replayed.verdict(), Verdict::Known);
    assert_eq!(replayed.len(), whole.len());
}

#[test]
fn joining_late_is_unknown_until_replayed_and_a_restart_at_zero_is_known_and_empty() {
    let capture = capture();
    let hasher = BlockHasher::new(DEFAULT_SEED);
    let mut whole = HeldBlocks::new(1 << 16, 128);
    for batch in &capture.stream {
        whole.apply(batch, &hasher);
    }
    let mut held = HeldBlocks::new(1 << 16, 128);
    assert_eq!(held.apply(&capture.stream[2], &hasher), Applied::Gap { from: 0, to: 2 });
    assert_eq!(held.verdict(), Verdict::Unknown);
    // Until a replay comes, every batch asks for it again.
    assert_eq!(held.apply(&capture.stream[3], &hasher), Applied::Gap { from: 0, to: 3 });
    held.apply_replay(&capture.stream, 0, &hasher);
    assert_eq!((held.verdict(), held.len()), (Verdict::Known, whole.len()));
    let mut restarted = capture.stream[0].clone();
    restarted.events.clear();
    assert_eq!(held.apply(&restarted, &hasher), Applied::Restarted);
    assert_eq!((held.verdict(), held.len()), (Verdict::Known, 0));
    // A replay that never comes: unknown, and nothing kept.
    held.apply(&capture.stream[5], &hasher);
    held.give_up_replay();
    assert_eq!((held.verdict(), held.len()), (Verdict::Unknown, 0));
}

#[test]
fn a_replica_hashing_otherwise_is_refused_and_an_overgrown_account_dropped() {
    let capture = capture();
    let mut held = HeldBlocks::new(1 << 16, 128);
    held.apply(&capture.stream[0], &BlockHasher::new("another seed"));
    assert_eq!(held.verdict(), Verdict::HashMismatch);
    let first = BlockHasher::new("another seed").event_hashes(&capture.first_prompt, 128);
    assert_eq!(held.leading(&first), 0, "refused: nothing it says is used");
    let hasher = BlockHasher::new(DEFAULT_SEED);
    let mut small = HeldBlocks::new(2, 128);
    small.apply(&capture.stream[0], &hasher);
    assert_eq!((small.verdict(), small.len()), (Verdict::Unknown, 0));
}

/// A publisher and a replay socket serving the capture, as a replica would, on port 0.
struct FakeReplica {
    publisher: zeromq::PubSocket,
    source: super::subscribe::EventSource,
}

async fn fake_replica(stream_frames: Vec<Vec<Vec<u8>>>) -> FakeReplica {
    use zeromq::{Socket, SocketRecv, SocketSend};
    let mut publisher = zeromq::PubSocket::new();
    let events = publisher.bind("tcp://127.0.0.1:0").await.expect("bind the publisher");
    let mut router = zeromq::RouterSocket::new();
    let replay = router.bind("tcp://127.0.0.1:0").await.expect("bind the replay socket");
    // Answers replay requests ([identity, empty, from]) from the capture, then its end marker.
    tokio::spawn(async move {
        while let Ok(request) = router.recv().await {
            let frames = request.into_vec();
            let from = u64::from_be_bytes(frames[2].as_ref().try_into().expect("8 bytes"));
            let identity = frames[0].clone();
            let envelope = |mut message: zeromq::ZmqMessage| {
                message.push_front(bytes::Bytes::new());
                message.push_front(identity.clone());
                message
            };
            for batch in stream_frames.iter().skip(from as usize) {
                let frames: Vec<bytes::Bytes> =
                    batch.iter().map(|f| bytes::Bytes::copy_from_slice(f)).collect();
                let message = zeromq::ZmqMessage::try_from(frames).expect("frames");
                router.send(envelope(message)).await.expect("replay a batch");
            }
            let end: Vec<bytes::Bytes> = vec![
                bytes::Bytes::new(),
                bytes::Bytes::from_static(&[0xff; 8]),
                bytes::Bytes::new(),
            ];
            let end = zeromq::ZmqMessage::try_from(end).expect("frames");
            router.send(envelope(end)).await.expect("the end marker");
        }
    });
    let source = super::subscribe::EventSource {
        events: events.to_string(),
        replay: Some(replay.to_string()),
    };
    FakeReplica { publisher, source }
}

async fn publish(publisher: &mut zeromq::PubSocket, frames: &[Vec<u8>]) {
    use zeromq::SocketSend;
    let frames: Vec<bytes::Bytes> =
        frames.iter().map(|f| bytes::Bytes::copy_from_slice(f)).collect();
    let message = zeromq::ZmqMessage::try_from(frames).expect("frames");
    publisher.send(message).await.expect("publish");
}

/// Waits, 10 ms at a time and `checks` times at most, until `held` says `done`.
async fn until(
    held: &parking_lot::Mutex<HeldBlocks>,
    checks: usize,
    done: impl Fn(&HeldBlocks) -> bool,
) -> bool {
    for _ in 0..checks {
        if done(&held.lock()) {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    false
}

/// Follows a fake replica that publishes the capture with its fifth batch lost; what the
/// account says once the last batch is in.
async fn follow_with_a_lost_batch(with_replay: bool) -> (Verdict, usize) {
    use std::sync::Arc;
    let capture = capture();
    let hasher = Arc::new(BlockHasher::new(DEFAULT_SEED));
    let FakeReplica { mut publisher, mut source } =
        fake_replica(capture.stream_frames.clone()).await;
    if !with_replay {
        source.replay = None;
    }
    let held = Arc::new(parking_lot::Mutex::new(HeldBlocks::new(1 << 16, 128)));
    let follower = tokio::spawn(super::subscribe::follow(source, held.clone(), hasher));
    // A subscriber misses what is published before it has joined: batch 0 (an engine's
    // first) again until it has been applied.
    let mut joined = false;
    for _ in 0..100 {
        publish(&mut publisher, &capture.stream_frames[0]).await;
        if until(&held, 5, |h| h.next_seq() == Some(1)).await {
            joined = true;
            break;
        }
    }
    assert!(joined, "the subscriber never received a batch");
    // Every other batch, but the fifth is lost on the way: the sixth reveals the gap.
    for (seq, frames) in capture.stream_frames.iter().enumerate().skip(1) {
        if seq != 5 {
            publish(&mut publisher, frames).await;
        }
    }
    let last = capture.stream.len() as u64;
    assert!(
        until(&held, 500, |h| h.next_seq() == Some(last)).await,
        "never reached the last batch"
    );
    follower.abort();
    assert!(follower.await.expect_err("stopped").is_cancelled());
    let held = held.lock();
    (held.verdict(), held.len())
}

#[tokio::test]
async fn a_subscription_follows_its_publisher_and_replays_a_batch_it_missed() {
    let hasher = BlockHasher::new(DEFAULT_SEED);
    let mut whole = HeldBlocks::new(1 << 16, 128);
    for batch in &capture().stream {
        whole.apply(batch, &hasher);
    }
    // Batch 5 came only from the replay: without it the cache would be unknown.
    assert_eq!(follow_with_a_lost_batch(true).await, (Verdict::Known, whole.len()));
}

#[tokio::test]
async fn without_a_replay_socket_a_lost_batch_leaves_the_cache_unknown() {
    let (verdict, _) = follow_with_a_lost_batch(false).await;
    assert_eq!(verdict, Verdict::Unknown);
}
