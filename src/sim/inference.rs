//! `POST /v1/chat/completions` and `POST /v1/completions`: validate like vLLM, spend the
//! API worker's preprocessing time, hand the request to the engine, then answer in one
//! body or as a paced SSE stream.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use tokio::sync::mpsc;

use super::body::{self, SimBody};
use super::chunks::{ResponseWriter, Usage};
use super::clock::SimTime;
use super::engine::{EngineRequest, TokenBatch};
use super::kv_event_log::PromptEventBlocks;
use super::metrics::FinishedTiming;
use super::prefix_cache::block_hashes;
use super::profile::Profile;
use super::state::SimState;
use super::stats::InFlightGuard;
use super::stream::StreamJob;
use crate::openai::request::Endpoint;
use crate::openai::{ApiError, ErrorKind, InferenceRequest};
use crate::prompt_tokens::prompt_token_ids;

/// Chat requests without `max_tokens` get the rest of the context, capped at this.
pub const DEFAULT_CHAT_MAX_TOKENS: u64 = 256;
/// Completion requests without `max_tokens` get OpenAI's default.
pub const DEFAULT_COMPLETION_MAX_TOKENS: u64 = 16;
/// SSE events buffered between the pacing task and the connection.
const STREAM_BUFFER_EVENTS: usize = 16;

/// The lengths of an accepted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lengths {
    pub prompt_tokens: u64,
    pub max_tokens: u64,
}

/// Checks a parsed request against the model's context, as vLLM does, and fills in the
/// default `max_tokens`.
pub fn check_lengths(profile: &Profile, request: &InferenceRequest) -> Result<Lengths, ApiError> {
    let limit = profile.max_model_len;
    // An empty prompt still holds the beginning-of-sequence token.
    let prompt_tokens = request.prompt_tokens().max(1);
    let bad = |message: String| ApiError::new(ErrorKind::BadRequest, message);
    if prompt_tokens > limit {
        return Err(bad(format!(
            "This model's maximum context length is {limit} tokens. However, your request has \
             {prompt_tokens} input tokens. Please reduce the length of the input messages."
        )));
    }
    let max_tokens = match (request.max_tokens, request.endpoint) {
        (Some(0), _) => return Err(bad("max_tokens must be at least 1, got 0.".into())),
        (Some(asked), _) => asked,
        (None, Endpoint::Chat) => (limit - prompt_tokens).min(DEFAULT_CHAT_MAX_TOKENS),
        (None, Endpoint::Completions) => DEFAULT_COMPLETION_MAX_TOKENS,
    };
    if max_tokens == 0 || prompt_tokens + max_tokens > limit {
        let asked = max_tokens.max(1);
        return Err(bad(format!(
            "This model's maximum context length is {limit} tokens. However, you requested \
             {} tokens ({prompt_tokens} in the messages, {asked} in the completion). Please \
             reduce the length of the messages or completion.",
            prompt_tokens + asked
        )));
    }
    Ok(Lengths { prompt_tokens, max_tokens })
}

/// Serves one inference request on API worker `worker`.
pub async fn serve(
    state: Arc<SimState>,
    worker: usize,
    endpoint: Endpoint,
    body: Bytes,
) -> Response<SimBody> {
    let arrival = state.clock.now();
    let in_flight = InFlightGuard::new(state.counters.clone());
    let request = match InferenceRequest::parse(endpoint, &body) {
        Ok(request) => request,
        Err(error) => {
            return body::error_response(ApiError::new(ErrorKind::BadRequest, error.to_string()));
        }
    };
    let profile = &state.config.profile;
    let lengths = match check_lengths(profile, &request) {
        Ok(lengths) => lengths,
        Err(error) => return body::error_response(error),
    };
    let api = &profile.api;
    let preprocessing_us =
        api.request_overhead_us + api.tokenize_us_per_token * lengths.prompt_tokens as f64;
    let ready_at = state.workers.preprocess(worker, &state.clock, arrival, preprocessing_us).await;
    state.clock.sleep_until(ready_at).await;

    let engine = &profile.engine;
    let (hashes, kv_event_blocks) = if engine.enable_prefix_caching {
        let token_ids = prompt_token_ids(&request.prompt);
        let hashes = block_hashes(&token_ids, engine.block_size as usize);
        let events = engine.kv_events.then(|| PromptEventBlocks::new(token_ids, engine.block_size));
        (hashes, events)
    } else {
        (Vec::new(), None)
    };
    let (token_sender, tokens) = mpsc::channel(lengths.max_tokens as usize + 1);
    let submitted = state.engine_inbox.send(EngineRequest {
        prompt_tokens: lengths.prompt_tokens,
        max_tokens: lengths.max_tokens,
        block_hashes: hashes,
        kv_event_blocks,
        ready_at,
        tokens: token_sender,
    });
    if submitted.is_err() {
        return engine_gone();
    }
    let model = request.model.clone().unwrap_or_else(|| profile.served_model_name.clone());
    let writer = ResponseWriter::new(
        endpoint,
        &state.config.id,
        state.counters.next_id(),
        state.created_unix,
        model,
        state.config.seed,
    );
    if !request.stream {
        return collect(&state, worker, writer, lengths, arrival, tokens).await;
    }
    let (chunks, stream_body) = body::channel(STREAM_BUFFER_EVENTS);
    let job = StreamJob {
        state: state.clone(),
        worker,
        writer,
        lengths,
        include_usage: request.include_usage,
        arrival,
        tokens,
        chunks,
        in_flight,
    };
    tokio::spawn(job.run());
    let mut response = Response::new(stream_body);
    let headers = response.headers_mut();
    headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Waits for every token, then answers with one body (after the worker builds it).
async fn collect(
    state: &SimState,
    worker: usize,
    writer: ResponseWriter,
    lengths: Lengths,
    arrival: SimTime,
    mut tokens: mpsc::Receiver<TokenBatch>,
) -> Response<SimBody> {
    let mut generated = 0;
    let mut first_token_at = None;
    let mut last_token_at = arrival;
    let mut cached_tokens = 0;
    while let Some(batch) = tokens.recv().await {
        first_token_at.get_or_insert(batch.at);
        cached_tokens = batch.cached_tokens;
        generated += batch.count;
        last_token_at = batch.at;
        if batch.finished {
            break;
        }
    }
    let Some(first_token_at) = first_token_at.filter(|_| generated >= lengths.max_tokens) else {
        return engine_gone();
    };
    let done =
        state.workers.charge_output(worker, last_token_at, state.config.profile.api.response_us);
    state.clock.sleep_until(done).await;
    state.metrics.time_to_first_token.observe(first_token_at.seconds_since(arrival));
    state.metrics.observe_finished(FinishedTiming {
        arrival,
        first_output: first_token_at,
        last_token: last_token_at,
        finished: done,
        tokens: generated,
    });
    let caching = state.config.profile.engine.enable_prefix_caching;
    let usage =
        Usage::new(lengths.prompt_tokens, generated).with_cached(caching.then_some(cached_tokens));
    body::json_response(writer.full_body(usage))
}

fn engine_gone() -> Response<SimBody> {
    body::error_response(ApiError::new(
        ErrorKind::Unavailable,
        "The engine stopped before the request finished.",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(endpoint: Endpoint, body: &str) -> InferenceRequest {
        InferenceRequest::parse(endpoint, body.as_bytes()).unwrap()
    }

    #[test]
    fn defaults_and_limits() {
        let profile = Profile::built_in("tiny").unwrap();
        let chat = request(Endpoint::Chat, r#"{"messages":[{"role":"user","content":"abcd"}]}"#);
        assert_eq!(check_lengths(&profile, &chat).unwrap().max_tokens, DEFAULT_CHAT_MAX_TOKENS);
        let completion = request(Endpoint::Completions, r#"{"prompt":"abcd"}"#);
        let lengths = check_lengths(&profile, &completion).unwrap();
        assert_eq!(lengths, Lengths { prompt_tokens: 1, max_tokens: 16 });
        let too_long = request(Endpoint::Completions, r#"{"prompt":"abcd","max_tokens":5000}"#);
        let error = check_lengths(&profile, &too_long).unwrap_err();
        assert!(error.message.contains("maximum context length is 4096"), "{}", error.message);
        let zero = request(Endpoint::Completions, r#"{"prompt":"abcd","max_tokens":0}"#);
        assert!(check_lengths(&profile, &zero).is_err());
    }
}
