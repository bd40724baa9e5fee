//! A prompt's tokens as prefix placement reads them: the engine's own (the served model's
//! tokenizer and chat template, [`ModelTokenizer`], where `prefix.tokenizers` names one)
//! or the shared approximation ([`prompt_token_ids`]); and, while the replicas' KV events
//! are followed, the block hashes the engine gives those tokens.
//!
//! The model's tokenizer runs only for a prompt that may fill a block: a shorter one can
//! hit no cache, so most of the short entry's small requests skip it.

use std::collections::HashMap;

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
    block_size: u64,
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
            block_size: config.prefix.block_size,
        }
    }

    /// The prompt's token ids: the model's tokenizer's when it has one and the prompt may
    /// fill a block, else the approximation's.
    pub fn token_ids(&self, request: &InferenceRequest) -> Vec<u64> {
        let approximate = prompt_token_ids(&request.prompt);
        if (approximate.len() as u64) < self.block_size {
            return approximate;
        }
        let Some(tokenizer) = request.model.as_deref().and_then(|model| self.tokenizer(model))
        else {
            return approximate;
        };
        tokenizer.prompt_ids(&request.prompt).unwrap_or_else(|error| {
            tracing::debug!(%error, "prompt placed by approximate tokens");
            approximate
        })
    }

    /// The hashes the engines' events give the full blocks of `ids`; empty unless KV events
    /// are followed.
    pub fn engine_hashes(&self, ids: &[u64]) -> Vec<u64> {
        self.hasher
            .as_ref()
            .map(|hasher| hasher.event_hashes(ids, self.block_size as usize))
            .unwrap_or_default()
    }

    /// Whether the request's model has a tokenizer of its own.
    pub fn has_tokenizer(&self, request: &InferenceRequest) -> bool {
        request.model.as_deref().is_some_and(|model| self.tokenizer(model).is_some())
    }

    fn tokenizer(&self, model: &str) -> Option<&ModelTokenizer> {
        self.tokenizers.get(model).or_else(|| self.tokenizers.get(self.aliases.get(model)?))
    }
}
