//! The wire format both ways: what [`encode`] writes decodes to the batch it was given, and
//! re-encoding every batch a real vLLM 0.32.0 engine published
//! (`tests/data/kv_events/vllm-0.32.0-cpu.jsonl`, recorded by `capture.py` beside it) gives
//! back the engine's own bytes, so a subscriber cannot tell the simulator from the engine.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde::de::{MapAccess, SeqAccess, Visitor};

use super::capture;
use super::wire::{Batch, Event, decode, encode};

/// Every batch the engine replayed from sequence 0 (the whole stream), as its three frames:
/// topic, sequence, payload.
fn captured_stream() -> Vec<[Vec<u8>; 3]> {
    capture::lines()
        .into_iter()
        .filter_map(|line| match line {
            // [empty, topic, seq, payload], and an end marker [empty, empty, ff x 8, empty].
            capture::Line::Frames { source, frames } if source == "replay" => match &frames[..] {
                [_, topic, seq, payload] if *seq != [0xff; 8] => {
                    Some([topic.clone(), seq.clone(), payload.clone()])
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn decode_frames(frames: &[Vec<u8>; 3]) -> Batch {
    let frames: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    decode(&frames).expect("a batch")
}

/// A msgpack value's structure: map keys in order and the msgpack type of every value,
/// arrays by the set of their elements' shapes (their lengths left out).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Shape {
    Nil,
    Bool,
    Unsigned,
    Signed,
    F32,
    F64,
    Str,
    Bin,
    Array(BTreeSet<Shape>),
    Map(Vec<(String, Shape)>),
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ShapeVisitor)
    }
}

struct ShapeVisitor;

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Shape;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("any msgpack value")
    }
    fn visit_unit<E>(self) -> Result<Shape, E> {
        Ok(Shape::Nil)
    }
    fn visit_none<E>(self) -> Result<Shape, E> {
        Ok(Shape::Nil)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Shape, E> {
        Ok(Shape::Bool)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Shape, E> {
        Ok(Shape::Unsigned)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Shape, E> {
        Ok(Shape::Signed)
    }
    fn visit_f32<E>(self, _: f32) -> Result<Shape, E> {
        Ok(Shape::F32)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Shape, E> {
        Ok(Shape::F64)
    }
    fn visit_str<E>(self, _: &str) -> Result<Shape, E> {
        Ok(Shape::Str)
    }
    fn visit_bytes<E>(self, _: &[u8]) -> Result<Shape, E> {
        Ok(Shape::Bin)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
        let mut elements = BTreeSet::new();
        while let Some(element) = seq.next_element()? {
            elements.insert(element);
        }
        Ok(Shape::Array(elements))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
        let mut entries = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Shape>()? {
            entries.push((key, value));
        }
        Ok(Shape::Map(entries))
    }
}

fn shape(payload: &[u8]) -> Shape {
    rmp_serde::from_slice(payload).expect("msgpack")
}

/// The shapes of a payload's events (`[ts, events, rank]`).
fn event_shapes(payload: &[u8]) -> BTreeSet<Shape> {
    match shape(payload) {
        Shape::Array(parts) => parts
            .into_iter()
            .find_map(|part| match part {
                Shape::Array(events) => Some(events),
                _ => None,
            })
            .expect("an events array"),
        other => panic!("a batch is an array, not {other:?}"),
    }
}

fn stored(hashes: Vec<u64>, parent: Option<u64>, keyed: bool) -> Event {
    let token_ids = (0..hashes.len() as u64 * 4).map(|t| t * 70_001).collect();
    Event::Stored { hashes, parent, token_ids, block_size: 4, keyed }
}

#[test]
fn every_event_kind_decodes_as_it_was_encoded() {
    let batches = [
        Batch {
            seq: 0,
            ts: 1_796_542_634.029_280_7,
            events: vec![
                stored(vec![1, u64::MAX, 300], None, false),
                stored(vec![7], Some(300), false),
            ],
            data_parallel_rank: Some(0),
        },
        Batch {
            seq: 1,
            ts: 0.5,
            events: vec![
                Event::Removed { hashes: vec![u64::MAX] },
                Event::Removed { hashes: vec![1, 2] },
                stored(vec![9, 10], Some(1 << 40), true),
            ],
            data_parallel_rank: Some(3),
        },
        Batch {
            seq: u64::MAX - 1,
            ts: 2.0,
            events: vec![Event::AllCleared],
            data_parallel_rank: None,
        },
        Batch { seq: 5, ts: 3.0, events: Vec::new(), data_parallel_rank: Some(1) },
    ];
    for batch in batches {
        let frames = encode(b"kv", &batch);
        assert_eq!(frames[0], b"kv");
        assert_eq!(frames[1], batch.seq.to_be_bytes());
        assert_eq!(decode_frames(&frames), batch);
    }
}

#[test]
fn the_engines_batches_re_encode_to_its_own_bytes() {
    let stream = captured_stream();
    assert!(stream.len() >= 20, "{} batches", stream.len());
    for frames in &stream {
        let batch = decode_frames(frames);
        let encoded = encode(&frames[0], &batch);
        assert_eq!(encoded[1], frames[1], "batch {}", batch.seq);
        assert_eq!(
            shape(&encoded[2]),
            shape(&frames[2]),
            "batch {}: the engine's keys and value types",
            batch.seq
        );
        assert_eq!(encoded[2], frames[2], "batch {}: the engine's bytes", batch.seq);
    }
}

#[test]
fn the_simulators_kinds_of_events_have_the_engines_shape() {
    // What the simulator publishes: a prompt's first blocks, the blocks after a hit, and
    // evictions, one block each.
    let first = Batch {
        seq: 0,
        ts: 1.25,
        events: vec![stored(vec![11, 12], None, false)],
        data_parallel_rank: Some(0),
    };
    let next = Batch {
        seq: 1,
        ts: 1.5,
        events: vec![
            Event::Removed { hashes: vec![11] },
            Event::Removed { hashes: vec![u64::MAX] },
            stored(vec![u64::MAX - 3], Some(u64::MAX - 2), false),
        ],
        data_parallel_rank: Some(0),
    };
    let simulated: BTreeSet<Shape> =
        [first, next].iter().flat_map(|batch| event_shapes(&encode(b"kv", batch)[2])).collect();
    let engine: BTreeSet<Shape> =
        captured_stream().iter().flat_map(|frames| event_shapes(&frames[2])).collect();
    assert!(engine.len() >= 3, "the capture has first and chained stores and removals");
    assert_eq!(simulated, engine);
}
