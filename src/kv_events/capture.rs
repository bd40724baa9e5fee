//! The real engine's recorded KV events (`tests/data/kv_events/`, written by its
//! `capture.py`), read line by line for the tests of both ends: the gateway's account and
//! the simulator's encoder.

use serde_json::Value;

const CAPTURE: &str = include_str!("../../tests/data/kv_events/vllm-0.32.0-cpu.jsonl");

/// One line of the capture.
pub enum Line {
    /// `/tokenize`'s token ids of the first prompt sent.
    Tokenized(Vec<u64>),
    /// A message as the subscriber received it: `live` (topic, sequence, payload) or
    /// `replay` (empty, topic, sequence, payload; the end marker's sequence is ff x 8).
    Frames { source: String, frames: Vec<Vec<u8>> },
}

pub fn lines() -> Vec<Line> {
    CAPTURE
        .lines()
        .map(|line| {
            let line: Value = serde_json::from_str(line).expect("a JSON line");
            if let Some(tokenize) = line.get("tokenize") {
                let tokens = tokenize["tokens"].as_array().expect("tokens");
                return Line::Tokenized(tokens.iter().map(|t| t.as_u64().expect("id")).collect());
            }
            let frames = line["frames"].as_array().expect("frames");
            Line::Frames {
                source: line["source"].as_str().expect("a source").to_string(),
                frames: frames.iter().map(|hex| decode_hex(hex.as_str().expect("hex"))).collect(),
            }
        })
        .collect()
}

fn decode_hex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}
