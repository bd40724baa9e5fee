//! Cost of reading a prompt for prefix placement (`PromptKey::new`), per request, at the
//! field's sizes (1k and 9k prompt tokens), p50 and p99 over many requests: by the
//! approximate tokens alone (no `[kv_events]`, no tokenizer: today's default), and by the
//! served model's own tokenizer and chat template with the engines' `sha256_cbor` block
//! hashes (`[kv_events]` on, `prefix.tokenizers` set); each for prompts all new, and for
//! prompts sharing one of a few long contexts (whose tokens are kept once encoded).
//!
//!     cargo bench --bench prompt_key [-- MODEL_DIR]
//!
//! MODEL_DIR defaults to the real-engine model (`scripts/real-vllm.sh setup`), else the
//! test tokenizer in tests/data/tokenizer/model.

use std::path::PathBuf;
use std::time::Instant;

use http::HeaderMap;
use laneway::gateway::GatewayConfig;
use laneway::gateway::pick::prefix::{EngineTokens, PromptKey};
use laneway::openai::InferenceRequest;
use laneway::openai::request::Endpoint;
use laneway::tokens::synthetic_text;
use rand::SeedableRng;
use rand::rngs::StdRng;

const REQUESTS: usize = 2_000;
const WARMUP: usize = 100;
/// Shared-prefix traffic: this many contexts, each request one of them and a question.
const CONTEXTS: u64 = 8;
const QUESTION_TOKENS: u64 = 100;

fn model_dir() -> PathBuf {
    if let Some(dir) = std::env::args().skip(1).find(|arg| !arg.starts_with('-')) {
        return PathBuf::from(dir);
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let real = PathBuf::from(home).join(".cache/laneway-vllm/models/tiny");
    if real.join("tokenizer.json").is_file() {
        real
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizer/model")
    }
}

/// A chat body of about `tokens` prompt tokens: all of it new (`shared` false), or one of
/// [`CONTEXTS`] system contexts and a question of [`QUESTION_TOKENS`] of its own.
fn body(tokens: u64, seed: u64, shared: bool) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    let (system, user) = if shared {
        let mut context = StdRng::seed_from_u64(seed % CONTEXTS);
        let system = synthetic_text(tokens - QUESTION_TOKENS, &mut context);
        (system, synthetic_text(QUESTION_TOKENS, &mut rng))
    } else {
        ("You are a helpful assistant.".to_string(), synthetic_text(tokens, &mut rng))
    };
    serde_json::to_vec(&serde_json::json!({
        "model": "m",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": 300,
    }))
    .unwrap()
}

/// p50 and p99 of `PromptKey::new` over [`REQUESTS`] bodies, in microseconds, and the mean
/// prompt tokens it read.
fn measure(config: &GatewayConfig, tokens: u64, shared: bool) -> (f64, f64, u64) {
    let engine = EngineTokens::new(config);
    let engine = &engine;
    let bodies: Vec<InferenceRequest> = (0..(REQUESTS + WARMUP) as u64)
        .map(|seed| InferenceRequest::parse(Endpoint::Chat, &body(tokens, seed, shared)).unwrap())
        .collect();
    let headers = HeaderMap::new();
    let mut micros = Vec::with_capacity(REQUESTS);
    let mut read_tokens = 0;
    for (i, request) in bodies.iter().enumerate() {
        let start = Instant::now();
        let key = PromptKey::new(request, &headers, &config.prefix, engine);
        let elapsed = start.elapsed().as_secs_f64() * 1e6;
        std::hint::black_box(&key);
        if i >= WARMUP {
            micros.push(elapsed);
            read_tokens += key.prompt_tokens;
        }
    }
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99), read_tokens / REQUESTS as u64)
}

fn main() {
    let dir = model_dir();
    let approximate = GatewayConfig::from_toml("[prefix]\nblock_size = 128\n").unwrap();
    let engine_text = format!(
        "[prefix]\nblock_size = 128\ntokenizers = {{ m = \"{}\" }}\n[kv_events]\ndiscover = true\n",
        dir.display()
    );
    let engine = GatewayConfig::from_toml(&engine_text).unwrap();
    println!("PromptKey::new per request, {REQUESTS} requests each; tokenizer: {}", dir.display());
    println!("| prompt | prompts | read by | p50 | p99 | tokens read |");
    println!("|---|---|---|---|---|---|");
    for tokens in [1_000u64, 9_000] {
        for (prompts, shared) in [("all new", false), ("8 shared contexts", true)] {
            for (name, config) in
                [("approximate", &approximate), ("tokenizer + sha256_cbor", &engine)]
            {
                let (p50, p99, read) = measure(config, tokens, shared);
                println!("| {tokens} | {prompts} | {name} | {p50:.0} µs | {p99:.0} µs | {read} |");
            }
        }
    }
}
