//! Replica profiles: the timing and capacity parameters of a simulated replica, read from
//! TOML data files (`config/profiles/*.toml`, built in by name, or any file via `--config`)
//! and validated once.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::config::SimError;
use super::topology::CrossNodeProfile;

/// The profiles compiled into the binary, by name.
const BUILT_IN: &[(&str, &str)] = &[
    ("tiny", include_str!("../../config/profiles/tiny.toml")),
    ("vllm-cpu-tiny", include_str!("../../config/profiles/vllm-cpu-tiny.toml")),
    ("h20-tp4", include_str!("../../config/profiles/h20-tp4.toml")),
    ("h20-tp8", include_str!("../../config/profiles/h20-tp8.toml")),
    ("h20-pp2tp8", include_str!("../../config/profiles/h20-pp2tp8.toml")),
    ("h20-tp16-erdma", include_str!("../../config/profiles/h20-tp16-erdma.toml")),
    ("qwen3-32b-pp2tp8-tcp", include_str!("../../config/profiles/qwen3-32b-pp2tp8-tcp.toml")),
    ("qwen3-32b-tp16-tcp", include_str!("../../config/profiles/qwen3-32b-tp16-tcp.toml")),
    ("dsv4-pro-tp16-tcp", include_str!("../../config/profiles/dsv4-pro-tp16-tcp.toml")),
    ("dsv4-pro-tp16-erdma", include_str!("../../config/profiles/dsv4-pro-tp16-erdma.toml")),
    ("glm52-pp2tp8-erdma", include_str!("../../config/profiles/glm52-pp2tp8-erdma.toml")),
    ("glm52-tp16-erdma", include_str!("../../config/profiles/glm52-tp16-erdma.toml")),
];

/// Everything that decides how a simulated replica behaves in time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    /// The model id the replica serves (`/v1/models`, metric label `model_name`).
    pub served_model_name: String,
    /// LoRA adapters it serves besides the base model (vLLM's `--lora-modules`), listed in
    /// `/v1/models` with the base model as parent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lora_modules: Vec<String>,
    /// Longest prompt plus completion, in tokens.
    pub max_model_len: u64,
    pub engine: EngineProfile,
    pub api: ApiProfile,
}

/// The shared engine: continuous batching with chunked prefill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineProfile {
    /// At most this many sequences run (prefilling or decoding) at once.
    pub max_num_seqs: u64,
    /// Token budget of one step: one per decoding sequence, the rest for prefill chunks.
    pub max_num_batched_tokens: u64,
    /// KV cache capacity in tokens; a request reserves prompt + max_tokens when admitted.
    pub kv_cache_tokens: u64,
    /// Fixed cost of every step.
    pub step_base_us: f64,
    /// Prefill cost per prompt token.
    pub prefill_us_per_token: f64,
    /// Extra prefill cost per (new token, earlier context token) pair: attention's quadratic part.
    pub attention_ns_per_token_pair: f64,
    /// Cost per decoding sequence in a step.
    pub decode_us_per_seq: f64,
    /// Extra cost per token of context a decoding sequence attends to in a step (its prompt
    /// and what it has generated): decode attention reads every earlier token's KV, so a
    /// stream over a long context steps slower (0, the default: decode cost is flat).
    #[serde(default)]
    pub decode_ns_per_context_token: f64,
    /// The coefficient of variation of a step's duration around its modelled cost (0, the
    /// default: every step exactly as modelled). Each step is multiplied by a log-normal
    /// factor of mean 1, drawn per replica from `--seed` and the replica's id
    /// ([`super::step_jitter`]).
    #[serde(default)]
    pub step_jitter: f64,
    /// vLLM's automatic prefix caching (on by default, as in vLLM; off is
    /// `--no-enable-prefix-caching`): cached prompt blocks skip prefill.
    #[serde(default = "default_enable_prefix_caching")]
    pub enable_prefix_caching: bool,
    /// Tokens per KV block, the unit prefix caching shares (vLLM's `--block-size`).
    #[serde(default = "default_block_size")]
    pub block_size: u64,
    /// Publish the prefix cache's changes as vLLM's KV-cache events, on ZeroMQ (vLLM's
    /// `--kv-events-config` with `"enable_kv_cache_events": true, "publisher": "zmq"`; off
    /// by default, on with `laneway sim --kv-events`). Needs prefix caching.
    #[serde(default)]
    pub kv_events: bool,
    /// A replica spanning nodes: its link and layout (absent: one node).
    #[serde(default)]
    pub cross_node: Option<CrossNodeProfile>,
}

fn default_enable_prefix_caching() -> bool {
    true
}

fn default_block_size() -> u64 {
    16
}

/// One API-server process (vLLM's `--api-server-count`): one CPU that streams output (with
/// priority) and preprocesses new requests, and accepts connections in batches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiProfile {
    /// Fixed preprocessing per inference request, before it reaches the engine.
    pub request_overhead_us: f64,
    /// Tokenizing cost per prompt token, before the request reaches the engine.
    pub tokenize_us_per_token: f64,
    /// Cost of every SSE event a stream sends (tokens that queued up share one event).
    pub per_chunk_us: f64,
    /// Cost of building a non-streaming response body.
    pub response_us: f64,
    /// A connection arriving within this long of the previous one a worker accepted joins
    /// that worker's accept batch.
    #[serde(default = "default_accept_window_us")]
    pub accept_window_us: f64,
    /// At most this many connections per accept batch.
    #[serde(default = "default_accept_batch_max")]
    pub accept_batch_max: u64,
}

fn default_accept_window_us() -> f64 {
    1000.0
}

/// asyncio's default `backlog`, the most `_accept_connection` takes per wakeup.
fn default_accept_batch_max() -> u64 {
    100
}

impl Profile {
    /// A built-in profile by name.
    pub fn built_in(name: &str) -> Result<Profile, SimError> {
        let (_, text) = BUILT_IN.iter().find(|(known, _)| *known == name).ok_or_else(|| {
            SimError::UnknownProfile {
                name: name.to_string(),
                known: Self::built_in_names().join(", "),
            }
        })?;
        Self::from_toml(text, &format!("built-in profile {name}"))
    }

    /// Names of the built-in profiles.
    pub fn built_in_names() -> Vec<&'static str> {
        BUILT_IN.iter().map(|(name, _)| *name).collect()
    }

    /// A profile from a TOML file.
    pub fn from_file(path: &Path) -> Result<Profile, SimError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| SimError::ProfileRead { path: path.display().to_string(), source })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// Parses and validates profile text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Profile, SimError> {
        let profile: Profile = toml::from_str(text).map_err(|error| SimError::ProfileParse {
            origin: origin.to_string(),
            message: error.to_string(),
        })?;
        profile.validate()?;
        Ok(profile)
    }

    /// Checks every field, reporting the first bad one with its path.
    pub fn validate(&self) -> Result<(), SimError> {
        let engine = &self.engine;
        let api = &self.api;
        let positive = [
            ("max_model_len", self.max_model_len),
            ("engine.max_num_seqs", engine.max_num_seqs),
            ("engine.max_num_batched_tokens", engine.max_num_batched_tokens),
            ("engine.kv_cache_tokens", engine.kv_cache_tokens),
            ("engine.block_size", engine.block_size),
            ("api.accept_batch_max", api.accept_batch_max),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(invalid(field, value, "must be at least 1"));
            }
        }
        if engine.kv_cache_tokens < self.max_model_len {
            return Err(invalid(
                "engine.kv_cache_tokens",
                engine.kv_cache_tokens,
                "must hold at least one max_model_len request",
            ));
        }
        let costs = [
            ("engine.step_base_us", engine.step_base_us),
            ("engine.prefill_us_per_token", engine.prefill_us_per_token),
            ("engine.attention_ns_per_token_pair", engine.attention_ns_per_token_pair),
            ("engine.decode_us_per_seq", engine.decode_us_per_seq),
            ("engine.decode_ns_per_context_token", engine.decode_ns_per_context_token),
            ("api.request_overhead_us", api.request_overhead_us),
            ("api.tokenize_us_per_token", api.tokenize_us_per_token),
            ("api.per_chunk_us", api.per_chunk_us),
            ("api.response_us", api.response_us),
            ("api.accept_window_us", api.accept_window_us),
        ];
        for (field, value) in costs {
            if !value.is_finite() || value < 0.0 {
                return Err(invalid(field, value, "must be a finite number >= 0"));
            }
        }
        if !(0.0..=1.0).contains(&engine.step_jitter) {
            return Err(invalid(
                "engine.step_jitter",
                engine.step_jitter,
                "must be between 0 and 1 (a coefficient of variation)",
            ));
        }
        if engine.step_base_us <= 0.0 {
            return Err(invalid(
                "engine.step_base_us",
                engine.step_base_us,
                "must be > 0 (a step always takes time)",
            ));
        }
        if engine.kv_events && !engine.enable_prefix_caching {
            return Err(invalid(
                "engine.kv_events",
                true,
                "needs engine.enable_prefix_caching: the events are the prefix cache's changes",
            ));
        }
        if let Some(cross_node) = &engine.cross_node {
            cross_node
                .validate()
                .map_err(|(field, value, reason)| invalid(field, value, reason))?;
        }
        if self.served_model_name.is_empty() {
            return Err(invalid("served_model_name", "\"\"", "must not be empty"));
        }
        if self.lora_modules.iter().any(|name| name.is_empty() || *name == self.served_model_name) {
            let names = format!("{:?}", self.lora_modules);
            return Err(invalid(
                "lora_modules",
                &names,
                "names must be non-empty and not the base model",
            ));
        }
        Ok(())
    }
}

fn invalid(field: &'static str, value: impl std::fmt::Display, reason: &str) -> SimError {
    SimError::InvalidProfile { field, value: value.to_string(), reason: reason.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_profile_loads() {
        for name in Profile::built_in_names() {
            let profile = Profile::built_in(name).unwrap();
            assert_eq!(profile.name, name);
        }
        assert!(matches!(Profile::built_in("nope"), Err(SimError::UnknownProfile { .. })));
    }

    #[test]
    fn unknown_fields_and_bad_values_are_rejected() {
        let text = include_str!("../../config/profiles/tiny.toml");
        let extra = format!("{text}\nsurprise = 1\n");
        assert!(matches!(Profile::from_toml(&extra, "test"), Err(SimError::ProfileParse { .. })));
        let zero = text.replace("max_num_seqs = 256", "max_num_seqs = 0");
        assert!(matches!(
            Profile::from_toml(&zero, "test"),
            Err(SimError::InvalidProfile { field: "engine.max_num_seqs", .. })
        ));
        let uncached_events = text.replace(
            "decode_us_per_seq = 20.0",
            "decode_us_per_seq = 20.0\nkv_events = true\nenable_prefix_caching = false",
        );
        assert!(matches!(
            Profile::from_toml(&uncached_events, "test"),
            Err(SimError::InvalidProfile { field: "engine.kv_events", .. })
        ));
        let events =
            text.replace("decode_us_per_seq = 20.0", "decode_us_per_seq = 20.0\nkv_events = true");
        assert!(Profile::from_toml(&events, "test").unwrap().engine.kv_events);
        assert!(!Profile::from_toml(text, "test").unwrap().engine.kv_events, "off by default");
    }
}
