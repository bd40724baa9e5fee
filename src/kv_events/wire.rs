//! vLLM's KV-cache event batches as they come off the wire. Each engine step that changed
//! the cache is one ZMQ message of three frames: the topic, a sequence number (`u64`,
//! big-endian, from 0, restarting with the engine) and a msgpack payload `[ts, events,
//! data_parallel_rank]` (the rank may be left out). An event is a map tagged by `type`:
//! `BlockStored`, `BlockRemoved` or `AllBlocksCleared`; fields equal to their default may be
//! left out and fields this gateway does not use are ignored, so newer engines that add
//! fields still decode.
//!
//! Block hashes come as the last 8 bytes of each digest, as a `u64` (vLLM's default), or as
//! the whole 32-byte digest (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`); both are read as the
//! `u64` of the digest's last 8 bytes, big-endian, which is what the engine's int form is.
//!
//! [`encode`] writes a batch as vLLM 0.32.0 does (the simulator publishes with it): every
//! field the engine writes, in its order, with its msgpack types, so that what a subscriber
//! reads from the simulator is what it would read from the engine
//! (`tests/data/kv_events/vllm-0.32.0-cpu.jsonl`; the tests re-encode it byte for byte).

use serde::{Deserialize, Serialize};

use super::block_hash::event_hash;

/// One decoded batch: the events of one engine step.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub seq: u64,
    /// When the engine published it (seconds since the epoch).
    pub ts: f64,
    pub events: Vec<Event>,
    pub data_parallel_rank: Option<i64>,
}

/// What changed in the engine's prefix cache.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Full blocks computed and cached, in chain order; `parent` is the block before the
    /// first of them (`None`: they start a prompt).
    Stored {
        hashes: Vec<u64>,
        parent: Option<u64>,
        token_ids: Vec<u64>,
        block_size: u32,
        keyed: bool,
    },
    /// Blocks evicted.
    Removed { hashes: Vec<u64> },
    /// The whole cache dropped (`/reset_prefix_cache`, a sleep).
    AllCleared,
}

/// Why a message is not a batch.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("a KV event message has {0} frames, not 3 (topic, sequence, payload)")]
    Frames(usize),
    #[error("a KV event sequence number is {0} bytes, not 8")]
    Sequence(usize),
    #[error("a KV event payload is not a batch: {0}")]
    Payload(#[from] rmp_serde::decode::Error),
    #[error("a block hash of {0} bytes: expected an integer or 32 bytes")]
    Hash(usize),
}

/// Decodes one message (its frames in order).
pub fn decode(frames: &[&[u8]]) -> Result<Batch, WireError> {
    let &[_topic, seq, payload] = frames else {
        return Err(WireError::Frames(frames.len()));
    };
    let seq = u64::from_be_bytes(seq.try_into().map_err(|_| WireError::Sequence(seq.len()))?);
    let RawBatch(ts, events, data_parallel_rank) = rmp_serde::from_slice(payload)?;
    let events = events.into_iter().map(RawEvent::into_event).collect::<Result<_, _>>()?;
    Ok(Batch { seq, ts, events, data_parallel_rank })
}

/// Writes one message as the engine does: the topic, the sequence number (8 bytes,
/// big-endian) and the msgpack payload `[ts, events, data_parallel_rank]` (the rank left out
/// when `None`). Hashes are written as integers, as vLLM's default; a keyed block (one whose
/// hash covers extra keys) is written with an empty extra-keys tuple, since a [`Batch`] does
/// not keep the keys themselves.
pub fn encode(topic: &[u8], batch: &Batch) -> [Vec<u8>; 3] {
    let events: Vec<OutEvent<'_>> = batch.events.iter().map(OutEvent::from).collect();
    let payload = match batch.data_parallel_rank {
        Some(rank) => rmp_serde::to_vec_named(&(batch.ts, events, rank)),
        None => rmp_serde::to_vec_named(&(batch.ts, events)),
    };
    // Serializing into a Vec fails only for types msgpack cannot express; these are fixed.
    let payload = payload.expect("a batch always serializes");
    [topic.to_vec(), batch.seq.to_be_bytes().to_vec(), payload]
}

/// Where the engine says a block lives; the simulator's blocks are all in its (GPU) cache.
const MEDIUM_GPU: &str = "GPU";
/// The engine's attention type for a model with one KV-cache group of full attention.
const FULL_ATTENTION: &str = "full_attention";

/// An event as vLLM 0.32.0 writes it (a msgspec struct tagged by `type`, as a map, every
/// field present, in this order).
#[derive(Serialize)]
#[serde(tag = "type")]
enum OutEvent<'a> {
    BlockStored {
        block_hashes: &'a [u64],
        parent_block_hash: Option<u64>,
        token_ids: &'a [u64],
        block_size: u32,
        lora_id: Option<u64>,
        medium: &'static str,
        lora_name: Option<&'static str>,
        extra_keys: ExtraKeys,
        group_idx: u32,
        kv_cache_spec_kind: &'static str,
    },
    BlockRemoved {
        block_hashes: &'a [u64],
        medium: &'static str,
        group_idx: u32,
    },
    AllBlocksCleared {},
}

impl<'a> From<&'a Event> for OutEvent<'a> {
    fn from(event: &'a Event) -> Self {
        match event {
            Event::Stored { hashes, parent, token_ids, block_size, keyed } => Self::BlockStored {
                block_hashes: hashes,
                parent_block_hash: *parent,
                token_ids,
                block_size: *block_size,
                lora_id: None,
                medium: MEDIUM_GPU,
                lora_name: None,
                extra_keys: ExtraKeys { blocks: hashes.len(), keyed: *keyed },
                group_idx: 0,
                kv_cache_spec_kind: FULL_ATTENTION,
            },
            Event::Removed { hashes } => {
                Self::BlockRemoved { block_hashes: hashes, medium: MEDIUM_GPU, group_idx: 0 }
            }
            Event::AllCleared => Self::AllBlocksCleared {},
        }
    }
}

/// The per-block extra keys: `nil` for a block hashed from its tokens alone, an (empty)
/// tuple for a keyed one.
struct ExtraKeys {
    blocks: usize,
    keyed: bool,
}

impl Serialize for ExtraKeys {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut blocks = serializer.serialize_seq(Some(self.blocks))?;
        for _ in 0..self.blocks {
            if self.keyed {
                blocks.serialize_element(&[(); 0])?;
            } else {
                blocks.serialize_element(&None::<()>)?;
            }
        }
        blocks.end()
    }
}

#[derive(Deserialize)]
struct RawBatch(f64, Vec<RawEvent>, #[serde(default)] Option<i64>);

#[derive(Deserialize)]
#[serde(tag = "type")]
enum RawEvent {
    BlockStored {
        block_hashes: Vec<RawHash>,
        parent_block_hash: Option<RawHash>,
        token_ids: Vec<u64>,
        block_size: u32,
        /// Per block: LoRA name, multimodal items, cache salt... A keyed block's hash
        /// covers them, so it cannot be hashed from tokens alone.
        #[serde(default)]
        extra_keys: Option<Vec<Option<serde::de::IgnoredAny>>>,
        #[serde(default)]
        lora_name: Option<String>,
    },
    BlockRemoved {
        block_hashes: Vec<RawHash>,
    },
    AllBlocksCleared {},
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawHash {
    Int(u64),
    Digest(serde_bytes::ByteBuf),
}

impl RawHash {
    fn into_u64(self) -> Result<u64, WireError> {
        match self {
            Self::Int(value) => Ok(value),
            Self::Digest(bytes) => match <&[u8; 32]>::try_from(bytes.as_slice()) {
                Ok(digest) => Ok(event_hash(digest)),
                Err(_) => Err(WireError::Hash(bytes.len())),
            },
        }
    }
}

fn hashes(raw: Vec<RawHash>) -> Result<Vec<u64>, WireError> {
    raw.into_iter().map(RawHash::into_u64).collect()
}

impl RawEvent {
    fn into_event(self) -> Result<Event, WireError> {
        Ok(match self {
            Self::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
                extra_keys,
                lora_name,
            } => Event::Stored {
                hashes: hashes(block_hashes)?,
                parent: parent_block_hash.map(RawHash::into_u64).transpose()?,
                token_ids,
                block_size,
                keyed: lora_name.is_some()
                    || extra_keys.is_some_and(|keys| keys.iter().any(Option::is_some)),
            },
            Self::BlockRemoved { block_hashes } => Event::Removed { hashes: hashes(block_hashes)? },
            Self::AllBlocksCleared {} => Event::AllCleared,
        })
    }
}
