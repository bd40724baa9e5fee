//! The bodies a vLLM OpenAI server answers with: streamed chunks (SSE events) and complete
//! responses for chat and text completions, plus the deterministic generated text.

use bytes::Bytes;
use serde::Serialize;
use serde_json::json;

use crate::openai::request::Endpoint;
use crate::tokens::synthetic_word;

/// The text of generated token `index` of a replica seeded with `seed` (one word from the
/// shared synthetic vocabulary).
pub fn token_text(seed: u64, index: u64) -> &'static str {
    synthetic_word(mix(seed ^ mix(index)))
}

// SplitMix64's finaliser: a cheap, well-spread hash for reproducible choices.
pub(crate) use crate::prompt_tokens::mix;

/// Token counts of a finished request.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub total_tokens: u64,
    pub completion_tokens: u64,
    /// With prefix caching on: the prompt tokens served from the cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// OpenAI's breakdown of the prompt tokens.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: u64,
}

impl Usage {
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            completion_tokens,
            prompt_tokens_details: None,
        }
    }

    /// Adds the cached-token count (`None` when prefix caching is off).
    pub fn with_cached(mut self, cached_tokens: Option<u64>) -> Self {
        self.prompt_tokens_details =
            cached_tokens.map(|cached_tokens| PromptTokensDetails { cached_tokens });
        self
    }
}

/// One streamed event, fields in vLLM's order.
#[derive(Serialize)]
struct Chunk<'a, C> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: &'a [C],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

#[derive(Serialize)]
struct ChatChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'static str>,
}

#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    content: &'a str,
}

#[derive(Serialize)]
struct TextChoice<'a> {
    index: u32,
    text: &'a str,
    logprobs: Option<()>,
    finish_reason: Option<&'static str>,
    stop_reason: Option<()>,
}

/// Builds the events and bodies of one response.
#[derive(Debug, Clone)]
pub struct ResponseWriter {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: String,
    pub seed: u64,
}

impl ResponseWriter {
    /// A writer for request number `sequence` of replica `replica` (both make the id unique
    /// across the replicas of one test or demo).
    pub fn new(
        endpoint: Endpoint,
        replica: &str,
        sequence: u64,
        created: u64,
        model: String,
        seed: u64,
    ) -> Self {
        let replica_hash = super::step_jitter::id_hash(replica);
        let prefix = match endpoint {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completions => "cmpl",
        };
        Self {
            endpoint,
            id: format!("{prefix}-{:016x}{sequence:08x}", mix(seed ^ replica_hash ^ mix(sequence))),
            created,
            model,
            seed,
        }
    }

    fn chunk_object(&self) -> &'static str {
        match self.endpoint {
            Endpoint::Chat => "chat.completion.chunk",
            Endpoint::Completions => "text_completion",
        }
    }

    fn event<C: Serialize>(&self, choices: &[C], usage: Option<Usage>) -> Bytes {
        let chunk = Chunk {
            id: &self.id,
            object: self.chunk_object(),
            created: self.created,
            model: &self.model,
            choices,
            usage,
        };
        let json = serde_json::to_string(&chunk).expect("chunks serialize");
        Bytes::from(format!("data: {json}\n\n"))
    }

    /// Chat's first event: the assistant role with empty content.
    pub fn role_event(&self) -> Bytes {
        let delta = Delta { role: Some("assistant"), content: "" };
        self.event(&[ChatChoice { index: 0, delta, logprobs: None, finish_reason: None }], None)
    }

    /// The event carrying generated tokens `first..first + count` (one delta with their
    /// text, as vLLM sends what is ready); the last event carries `finish_reason`.
    pub fn token_event(&self, first: u64, count: u64, last: bool) -> Bytes {
        let text = self.text_of(first..first + count);
        let finish_reason = last.then_some("length");
        match self.endpoint {
            Endpoint::Chat => self.event(
                &[ChatChoice {
                    index: 0,
                    delta: Delta { role: None, content: &text },
                    logprobs: None,
                    finish_reason,
                }],
                None,
            ),
            Endpoint::Completions => self.event(
                &[TextChoice {
                    index: 0,
                    text: &text,
                    logprobs: None,
                    finish_reason,
                    stop_reason: None,
                }],
                None,
            ),
        }
    }

    /// The usage event sent with `stream_options.include_usage`: no choices.
    pub fn usage_event(&self, usage: Usage) -> Bytes {
        self.event::<TextChoice>(&[], Some(usage))
    }

    /// The stream's end marker.
    pub fn done_event() -> Bytes {
        Bytes::from_static(b"data: [DONE]\n\n")
    }

    /// The whole generated text of `tokens` tokens.
    pub fn full_text(&self, tokens: u64) -> String {
        self.text_of(0..tokens)
    }

    fn text_of(&self, tokens: std::ops::Range<u64>) -> String {
        tokens.map(|index| format!(" {}", token_text(self.seed, index))).collect()
    }

    /// A complete (non-streaming) response body.
    pub fn full_body(&self, usage: Usage) -> Bytes {
        let text = self.full_text(usage.completion_tokens);
        let body = match self.endpoint {
            Endpoint::Chat => json!({
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "tool_calls": []},
                    "logprobs": null,
                    "finish_reason": "length",
                    "stop_reason": null,
                }],
                "usage": usage,
                "prompt_logprobs": null,
            }),
            Endpoint::Completions => json!({
                "id": self.id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": [{
                    "index": 0,
                    "text": text,
                    "logprobs": null,
                    "finish_reason": "length",
                    "stop_reason": null,
                    "prompt_logprobs": null,
                }],
                "usage": usage,
            }),
        };
        Bytes::from(body.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_events_have_vllm_shape() {
        let writer = ResponseWriter::new(Endpoint::Chat, "r", 1, 7, "m".into(), 0);
        let parse = |event: Bytes| -> serde_json::Value {
            let text = std::str::from_utf8(&event).unwrap();
            serde_json::from_str(text.strip_prefix("data: ").unwrap().trim_end()).unwrap()
        };
        let role = parse(writer.role_event());
        assert_eq!(role["object"], "chat.completion.chunk");
        assert_eq!(role["choices"][0]["delta"]["role"], "assistant");
        let last = parse(writer.token_event(3, 2, true));
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        let content = last["choices"][0]["delta"]["content"].as_str().unwrap();
        assert_eq!(content, writer.full_text(5).strip_prefix(&writer.full_text(3)).unwrap());
        let usage = parse(writer.usage_event(Usage::new(5, 2)));
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["total_tokens"], 7);
    }

    #[test]
    fn text_is_reproducible_per_seed() {
        let a = ResponseWriter::new(Endpoint::Completions, "r", 1, 0, "m".into(), 1);
        let b = ResponseWriter::new(Endpoint::Completions, "r", 2, 0, "m".into(), 1);
        let c = ResponseWriter::new(Endpoint::Completions, "r", 1, 0, "m".into(), 2);
        assert_eq!(a.full_text(20), b.full_text(20));
        assert_ne!(a.full_text(20), c.full_text(20));
        assert_eq!(a.full_text(3).split(' ').count(), 4);
    }
}
