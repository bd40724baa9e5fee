//! Measures the cheap estimates against the parsed estimate on the field's workloads
//! (1000-, 9000- and 50000-token chat prompts); prints the table documented in
//! the README with `cargo test --lib accuracy -- --nocapture`.

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::{max_tokens_for_body_len, tokens_from_body_len};
use crate::openai::InferenceRequest;
use crate::openai::request::Endpoint;
use crate::tokens::synthetic_text;

fn workload_body(tokens: u64, rng: &mut StdRng) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": synthetic_text(tokens, rng)},
        ],
        "max_tokens": 300,
        "stream": true,
        "stream_options": {"include_usage": true},
    }))
    .unwrap()
}

#[test]
fn byte_estimate_is_within_four_percent_on_field_workloads() {
    let mut rng = StdRng::seed_from_u64(42);
    let mut errors = Vec::new();
    println!("| prompt tokens | body bytes | parsed estimate | bytes/4 | error | length bound |");
    println!("|---|---|---|---|---|---|");
    for tokens in [1000, 9000, 50000] {
        let body = workload_body(tokens, &mut rng);
        let parsed = InferenceRequest::parse(Endpoint::Chat, &body).unwrap().prompt_tokens();
        let cheap = tokens_from_body_len(body.len() as u64);
        let error = (cheap as f64 - parsed as f64) / parsed as f64;
        println!(
            "| {tokens} | {} | {parsed} | {cheap} | {:+.2}% | {} |",
            body.len(),
            error * 100.0,
            max_tokens_for_body_len(body.len() as u64)
        );
        errors.push((tokens, error));
    }
    for (tokens, error) in errors {
        assert!(error.abs() < 0.04, "{tokens}: {error}");
    }
}
