//! A prompt's tokens as prefix placement reads them: the engine's own (the served model's
//! tokenizer and chat template, [`ModelTokenizer`], where `prefix.tokenizers` names one)
//! or the shared approximation ([`prompt_token_ids`]); and, while the replicas' KV events
//! are followed, the block hashes the engine gives those tokens.
//!
//! The model's tokenizer runs only for a prompt that may fill a block: a shorter one can
//! hit no cache, so most of the short entry's small requests skip it.

use std::collections::{HashMap, HashSet};

use parking_lot::Mutex;

use super::model_tokenizer::ModelTokenizer;
use crate::gateway::config::GatewayConfig;
use crate::kv_events::block_hash::BlockHasher;
use crate::openai::InferenceRequest;
use crate::prompt_tokens::prompt_token_ids;

/// The tokenizers of the served models and the engines' block hasher.
#[derive(Debug, Default)]
pub struct EngineTokens {
    /// By served model name (aliases resolved at lookup).
    tokenizers: HashMap<String, ModelTokenizer>,
    aliases: HashMap<String, String>,
    /// Set while KV events are followed (`[kv_events]`).
    hasher: Option<BlockHasher>,
    /// The engines tokenize as the approximation does (`kv_events.approximate_tokens`).
    approximate_engines: bool,
    block_size: u64,
    /// Models whose prompts could not be hashed as the engines hash them, said once each.
    untokenized: Mutex<HashSet<String>>,
}

/// A prompt's token ids, and whether they are the engine's own.
pub struct PromptTokens {
    pub ids: Vec<u64>,
    /// Read by the model's tokenizer (or by an engine that tokenizes approximately too).
    pub engines: bool,
}

impl EngineTokens {
    /// Loads every tokenizer `config` names; one that fails is logged and its model's
    /// prompts are read by the approximation.
    pub fn new(config: &GatewayConfig) -> Self {
        let mut tokenizers = HashMap::new();
        for (model, dir) in &config.prefix.tokenizers {
            match ModelTokenizer::load(dir) {
                Ok(tokenizer) => {
                    tokenizers.insert(model.clone(), tokenizer);
                }
                Err(error) => tracing::error!(
                    %model, %error,
                    "tokenizer not loaded: this model's prompts are placed by approximate tokens"
                ),
            }
        }
        let hasher =
            config.kv_events.enabled().then(|| BlockHasher::new(&config.kv_events.hash_seed));
        Self {
            tokenizers,
            aliases: config.models.aliases.clone().into_iter().collect(),
            hasher,
            approximate_engines: config.kv_events.approximate_tokens,
            block_size: config.prefix.block_size,
            untokenized: Mutex::default(),
        }
    }

    /// The prompt's token ids: the model's tokenizer's when it has one and the prompt may
    /// fill a block, else the approximation's.
    pub fn token_ids(&self, request: &InferenceRequest) -> PromptTokens {
        let approximate = prompt_token_ids(&request.prompt);
        let engines = self.approximate_engines;
        if (approximate.len() as u64) < self.block_size {
            return PromptTokens { ids: approximate, engines };
        }
        let model = request.model.as_deref().unwrap_or_default();
        let Some(tokenizer) = self.tokenizer(model) else {
            if self.hasher.is_some() && !engines && self.untokenized.lock().insert(model.into()) {
                tracing::warn!(
                    model,
                    "KV events are followed but this model has no tokenizer in \
                     prefix.tokenizers: its prompts are placed by the approximate index"
                );
            }
            return PromptTokens { ids: approximate, engines };
        };
        match tokenizer.prompt_ids(&request.prompt) {
            Ok(ids) => PromptTokens { ids, engines: true },
            Err(error) => {
                tracing::debug!(%error, "prompt placed by approximate tokens");
                PromptTokens { ids: approximate, engines }
            }
        }
    }

    /// The hashes the engines' events give the full blocks of `tokens`; empty unless KV
    /// events are followed and the tokens are the engines' own.
    pub fn engine_hashes(&self, tokens: &PromptTokens) -> Vec<u64> {
        match &self.hasher {
            Some(hasher) if tokens.engines => {
                hasher.event_hashes(&tokens.ids, self.block_size as usize)
            }
            _ => Vec::new(),
        }
    }

    /// Whether the request's model has a tokenizer of its own.
    pub fn has_tokenizer(&self, request: &InferenceRequest) -> bool {
        request.model.as_deref().is_some_and(|model| self.tokenizer(model).is_some())
    }

    fn tokenizer(&self, model: &str) -> Option<&ModelTokenizer> {
        self.tokenizers.get(model).or_else(|| self.tokenizers.get(self.aliases.get(model)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::request::Endpoint;

    const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tokenizer/model");

    fn engine(extra: &str) -> EngineTokens {
        let text = format!(
            "[prefix]\nblock_size = 16\ntokenizers = {{ own = \"{MODEL}\" }}\n[kv_events]\n\
             discover = true\n{extra}"
        );
        EngineTokens::new(&GatewayConfig::from_toml(&text).unwrap())
    }

    fn request(model: &str) -> InferenceRequest {
        let content = "the prefix of a long prompt ".repeat(20);
        let body =
            serde_json::json!({"model": model, "messages": [{"role": "user", "content": content}]});
        InferenceRequest::parse(Endpoint::Chat, body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn only_the_engines_own_tokens_are_hashed_for_their_events() {
        let engine_tokens = engine("");
        let own = engine_tokens.token_ids(&request("own"));
        assert!(own.engines);
        assert!(!engine_tokens.engine_hashes(&own).is_empty());
        // No tokenizer: approximate tokens, which a real engine's events never name.
        let other = engine_tokens.token_ids(&request("other"));
        assert!(!other.engines);
        assert!(engine_tokens.engine_hashes(&other).is_empty());
        // Unless the engines tokenize approximately too (the simulator).
        let simulated = engine("approximate_tokens = true\n");
        let other = simulated.token_ids(&request("other"));
        assert!(other.engines);
        assert!(!simulated.engine_hashes(&other).is_empty());
    }
}
