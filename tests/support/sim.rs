//! Shared helpers of the simulator's integration tests: start a replica, send requests,
//! read SSE events and metrics.

use laneway::sim::{self, Profile, SimConfig, SimHandle};

/// Starts a replica with `profile`, `api_workers` workers and clock speed `speed`.
pub async fn start(profile: &str, api_workers: usize, speed: f64) -> SimHandle {
    let mut config = SimConfig::with_profile("test-replica", profile).expect("built-in profile");
    config.api_workers = api_workers;
    config.speed = speed;
    sim::spawn(config).await.expect("sim starts")
}

pub fn url(handle: &SimHandle, path: &str) -> String {
    format!("http://{}{}", handle.addr(), path)
}

/// The `data:` payloads of an SSE body, in order.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n").filter_map(|event| event.strip_prefix("data: ")).map(str::to_owned).collect()
}

/// A chat body with a prompt of about `prompt_tokens` estimated tokens.
pub fn chat_body(prompt_tokens: u64, max_tokens: u64, stream: bool) -> serde_json::Value {
    // One message adds 4 template tokens; each "abc " is one token.
    let text = "abc ".repeat(prompt_tokens.saturating_sub(4) as usize);
    serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": stream,
        "stream_options": {"include_usage": stream},
    })
}

/// The value of an unlabelled-by-request sample (`name{...} value`) in a metrics text.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|line| line.starts_with(name) && line[name.len()..].starts_with('{'))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing"))
}

pub async fn metrics_text(handle: &SimHandle) -> String {
    reqwest::get(url(handle, "/metrics")).await.unwrap().text().await.unwrap()
}

/// Single-request TTFT (seconds) of an idle replica, from the profile's parameters, when
/// the first `cached` prompt tokens are in the prefix cache: API preprocessing of the whole
/// prompt, the chunked-prefill steps of the uncached tail (attending to the cached part),
/// and the first event's send cost.
pub fn expected_ttft_from(profile: &Profile, prompt_tokens: u64, cached: u64) -> f64 {
    let api = &profile.api;
    let engine = &profile.engine;
    let mut micros = api.request_overhead_us
        + api.tokenize_us_per_token * prompt_tokens as f64
        + api.per_chunk_us;
    let mut position = cached;
    while position < prompt_tokens {
        let chunk = (prompt_tokens - position).min(engine.max_num_batched_tokens);
        micros += engine.step_base_us
            + engine.prefill_us_per_token * chunk as f64
            + engine.attention_ns_per_token_pair / 1000.0
                * chunk as f64
                * (position as f64 + chunk as f64 / 2.0);
        position += chunk;
    }
    micros / 1e6
}
