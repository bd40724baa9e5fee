//! `[prefix]`: the knobs of the `prefix_aware` policy (its index's memory, the block size it
//! hashes with, the TTFT estimate it weighs hits against load with) and of session affinity.

use std::collections::BTreeMap;
use std::path::PathBuf;

use http::HeaderName;
use serde::Deserialize;

use super::issues::Issues;

/// `[prefix]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrefix {
    pub index_bytes: Option<i64>,
    pub block_size: Option<i64>,
    pub session_header: Option<String>,
    pub session_load_factor: Option<f64>,
    pub prefill_us_per_token: Option<f64>,
    pub request_us: Option<f64>,
    pub recompute_weight: Option<f64>,
    pub share_sessions: Option<bool>,
    pub share_prefixes: Option<bool>,
    pub hot_copy_hits: Option<i64>,
    pub hot_copy_min_tokens: Option<i64>,
    /// Served model name -> its folder (`tokenizer.json`, `tokenizer_config.json`).
    #[serde(default)]
    pub tokenizers: BTreeMap<String, String>,
}

/// The validated `[prefix]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefixConfig {
    /// Memory the block index may use, all replicas together (LRU beyond).
    pub index_bytes: u64,
    /// Tokens per KV block: the replicas' `--block-size` (vLLM's default is 16).
    pub block_size: u64,
    /// The request header that names a session; OpenAI's `user` field is the fallback.
    pub session_header: HeaderName,
    /// Bounded load: a session stays on its replica while that replica has fewer requests
    /// in flight than this factor times the mean (plus one).
    pub session_load_factor: f64,
    /// The TTFT estimate's prefill cost per uncached prompt token.
    pub prefill_us_per_token: f64,
    /// The TTFT estimate's cost per request already on a replica.
    pub request_us: f64,
    /// While the best-cached copy of a prompt is still being computed, how much the prefill
    /// a candidate would recompute beyond it counts on top of its own TTFT: the requests
    /// that queue behind the duplicate pay for it too. 0 compares TTFT estimates alone.
    pub recompute_weight: f64,
    /// With a shared store (`[limits] store`), where each session's turn was placed is
    /// written there and read by the other gateways.
    pub share_sessions: bool,
    /// With a shared store, the prefixes each placement computes are written there, and a
    /// prompt this gateway knows little of is looked up there before it is placed.
    pub share_prefixes: bool,
    /// A prefix hit this many times since its last copy, while other requests wait beside
    /// it, is computed once more, in the background, on a less busy replica that lacks it
    /// (0: never; [`crate::gateway::pick::prefix::hot_copies`]).
    pub hot_copy_hits: u32,
    /// Tokens a hit must cover to count toward a copy, and a replica must lack to take one.
    pub hot_copy_min_tokens: u64,
    /// Per served model, the folder of its tokenizer and chat template: its prompts are
    /// read as its engine tokenizes them (the KV events' hashes need the exact tokens).
    pub tokenizers: BTreeMap<String, PathBuf>,
}

impl Default for PrefixConfig {
    fn default() -> Self {
        Self {
            index_bytes: 8 << 20,
            block_size: 16,
            session_header: HeaderName::from_static("x-session-id"),
            session_load_factor: 1.25,
            prefill_us_per_token: 75.0,
            request_us: 1000.0,
            recompute_weight: 1.0,
            share_sessions: true,
            share_prefixes: true,
            hot_copy_hits: 4,
            hot_copy_min_tokens: 1024,
            tokenizers: BTreeMap::new(),
        }
    }
}

pub(super) fn prefix(raw: &RawPrefix, issues: &mut Issues) -> PrefixConfig {
    let default = PrefixConfig::default();
    let session_header = match &raw.session_header {
        None => default.session_header.clone(),
        Some(name) => HeaderName::try_from(name.to_ascii_lowercase()).unwrap_or_else(|_| {
            issues.add("prefix.session_header", format!("`{name}` is not a header name"));
            default.session_header.clone()
        }),
    };
    let mut number = |path: &str, value: Option<f64>, default: f64, min: f64, max: f64| match value
    {
        None => default,
        Some(v) if v.is_finite() && v >= min && v <= max => v,
        Some(v) => {
            issues.add(path, format!("{v} is out of range {min}..={max}"));
            default
        }
    };
    let session_load_factor =
        number("prefix.session_load_factor", raw.session_load_factor, 1.25, 1.0, 100.0);
    let prefill_us_per_token =
        number("prefix.prefill_us_per_token", raw.prefill_us_per_token, 75.0, 0.0, 1e6);
    let request_us = number("prefix.request_us", raw.request_us, 1000.0, 0.0, 1e8);
    let recompute_weight = number("prefix.recompute_weight", raw.recompute_weight, 1.0, 0.0, 100.0);
    PrefixConfig {
        index_bytes: issues.positive("prefix.index_bytes", raw.index_bytes, 8 << 20, 1 << 36),
        block_size: issues.positive("prefix.block_size", raw.block_size, 16, 4096),
        session_header,
        session_load_factor,
        prefill_us_per_token,
        request_us,
        recompute_weight,
        share_sessions: raw.share_sessions.unwrap_or(default.share_sessions),
        share_prefixes: raw.share_prefixes.unwrap_or(default.share_prefixes),
        hot_copy_hits: issues.number(
            "prefix.hot_copy_hits",
            raw.hot_copy_hits,
            default.hot_copy_hits.into(),
            0,
            1 << 20,
        ) as u32,
        hot_copy_min_tokens: issues.positive(
            "prefix.hot_copy_min_tokens",
            raw.hot_copy_min_tokens,
            default.hot_copy_min_tokens,
            1 << 24,
        ),
        tokenizers: tokenizers(&raw.tokenizers, issues),
    }
}

/// Each model's folder, which must hold a `tokenizer.json`.
fn tokenizers(raw: &BTreeMap<String, String>, issues: &mut Issues) -> BTreeMap<String, PathBuf> {
    let mut folders = BTreeMap::new();
    for (model, folder) in raw {
        let folder = PathBuf::from(folder);
        if folder.join("tokenizer.json").is_file() {
            folders.insert(model.clone(), folder);
        } else {
            let path = format!("prefix.tokenizers.{model}");
            issues.add(path, format!("{} holds no tokenizer.json", folder.display()));
        }
    }
    folders
}

#[cfg(test)]
mod tests {
    use super::super::GatewayConfig;

    #[test]
    fn defaults_and_every_bad_field_by_path() {
        let config = GatewayConfig::from_toml("").unwrap();
        assert_eq!(config.prefix, super::PrefixConfig::default());
        let text = "[prefix]\nindex_bytes = 0\nblock_size = 16\nsession_header = \"bad header\"\n\
                    session_load_factor = 0.5\nprefill_us_per_token = -1.0\n\
                    recompute_weight = -0.5\n";
        let error = GatewayConfig::from_toml(text).unwrap_err();
        let paths: Vec<&str> = error.issues.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "prefix.session_header",
                "prefix.session_load_factor",
                "prefix.prefill_us_per_token",
                "prefix.recompute_weight",
                "prefix.index_bytes"
            ]
        );
        let custom = GatewayConfig::from_toml("[prefix]\nsession_header = \"X-Conversation\"\n");
        assert_eq!(custom.unwrap().prefix.session_header.as_str(), "x-conversation");
    }
}
