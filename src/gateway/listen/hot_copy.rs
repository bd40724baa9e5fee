//! Sends the copies of hot prefixes ([`crate::gateway::pick::prefix::hot_copies`]): after a
//! client's request is placed where its prefix hit, the prefix may be due a copy on a less
//! busy replica; the copy is that request's body again, asking for one token, unstreamed, sent
//! in the background over the entry's connections. The client's request never waits for
//! it, and its failure only leaves the replica as it was.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HeaderValue, TRANSFER_ENCODING};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Map, Value};

use crate::gateway::body::full;
use crate::gateway::config::Entry;
use crate::gateway::headers::REQUEST_ID;
use crate::gateway::pick::prefix::engine_held::with_engine_caches;
use crate::gateway::pick::prefix::hot_copies::CopyRule;
use crate::gateway::pick::{PromptKey, Replica};
use crate::gateway::state::GatewayState;

use super::attempts::Forwarding;

/// Longest copy answer read (one token's completion and its usage).
const MAX_ANSWER_BYTES: usize = 64 << 10;

/// Sampling fields a copy drops: it computes the prompt, and what it generates is thrown
/// away (a grammar would only cost the engine time).
const DROPPED: [&str; 9] = [
    "stream_options",
    "max_completion_tokens",
    "min_tokens",
    "best_of",
    "logprobs",
    "top_logprobs",
    "response_format",
    "guided_json",
    "structured_outputs",
];

/// After `request` (whose prompt is `key`) was placed on `chosen`, expected to find
/// `hit_tokens` of it cached there: sends a copy of its prefix to a less busy replica if
/// the prefix is due one.
pub fn after_placement(
    state: &Arc<GatewayState>,
    request: &Forwarding<'_>,
    entry: Entry,
    key: &PromptKey,
    chosen: &Arc<Replica>,
    hit_tokens: u64,
) {
    let config = &state.config.prefix;
    let rule = CopyRule {
        hits: config.hot_copy_hits,
        min_blocks: config.hot_copy_min_tokens.div_ceil(key.block_size.max(1)) as usize,
    };
    let hit_blocks = (hit_tokens / key.block_size.max(1)) as usize;
    if rule.hits == 0 || hit_blocks < rule.min_blocks {
        return;
    }
    let candidates = request.variant.replicas_for(&state.picker, request.serving);
    let Some(chosen_at) = candidates.iter().position(|r| r.name == chosen.name) else { return };
    let router = &state.shared.prefix;
    let held = || {
        let names: Vec<&str> = candidates.iter().map(|r| r.name.as_str()).collect();
        let guessed = router.index.lookup(&names, key.hittable());
        let every: Vec<usize> = (0..candidates.len()).collect();
        with_engine_caches(&candidates, &every, guessed, key)
    };
    let (index, reuse) = (&router.index, router.reuse.share());
    let now = std::time::Instant::now();
    let hashes = &key.hashes;
    let Some(plan) = router.hot.after_hit(
        rule,
        hashes,
        hit_blocks,
        &candidates,
        held,
        chosen_at,
        index,
        reuse,
        now,
    ) else {
        return;
    };
    let target = candidates[plan.target].clone();
    let Some(copy) = copy_request(request) else {
        router.hot.copied(plan.prefix);
        return;
    };
    let (from, to) = (&chosen.name, &target.name);
    tracing::debug!(from = %from, to = %to, blocks = hit_blocks, "copying a hot prefix");
    let feedback = router.place_copy(&target, key);
    let state = state.clone();
    tokio::spawn(async move {
        let router = &state.shared.prefix;
        let made = send(&state, entry, &target, copy).await;
        router.count_copy(if made { "made" } else { "failed" });
        drop(feedback);
        router.hot.copied(plan.prefix);
    });
}

/// The client's request again, for one unstreamed token, with its own request id.
fn copy_request(request: &Forwarding<'_>) -> Option<Request<Bytes>> {
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(request.body) else {
        return None;
    };
    one_token(&mut body);
    let body = Bytes::from(serde_json::to_vec(&Value::Object(body)).ok()?);
    let parts = request.parts;
    let mut headers = parts.headers.clone();
    headers.remove(TRANSFER_ENCODING);
    headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    let id = headers.get(&REQUEST_ID).and_then(|id| id.to_str().ok()).unwrap_or("request");
    if let Ok(id) = HeaderValue::try_from(format!("{id}-prefix-copy")) {
        headers.insert(REQUEST_ID, id);
    }
    let mut copy = Request::new(body);
    *copy.method_mut() = parts.method.clone();
    *copy.uri_mut() = parts.uri.clone();
    *copy.headers_mut() = headers;
    Some(copy)
}

/// Asks for one token, unstreamed, one choice.
fn one_token(body: &mut Map<String, Value>) {
    for field in DROPPED {
        body.remove(field);
    }
    body.insert("max_tokens".into(), 1.into());
    body.insert("stream".into(), false.into());
    body.insert("n".into(), 1.into());
}

/// Sends `copy` to `target` and reads its answer: whether the replica computed it.
async fn send(
    state: &GatewayState,
    entry: Entry,
    target: &Arc<Replica>,
    copy: Request<Bytes>,
) -> bool {
    let copy = copy.map(full);
    let answer = match state.connector(entry).send(target, copy, None).await {
        Ok(answer) => answer,
        Err(error) => {
            tracing::debug!(replica = %target.name, %error, "a hot prefix's copy was not sent");
            return false;
        }
    };
    let status = answer.status();
    let body = http_body_util::Limited::new(answer.into_body(), MAX_ANSWER_BYTES);
    let read = body.collect().await.is_ok();
    if status != StatusCode::OK || !read {
        tracing::debug!(replica = %target.name, %status, "a hot prefix's copy failed");
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_asks_for_one_unstreamed_token_and_keeps_the_prompt() {
        let text = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,
            "stream_options":{"include_usage":true},"max_completion_tokens":300,"n":2,
            "response_format":{"type":"json_object"},"tools":[{"type":"function"}]}"#;
        let Value::Object(mut body) = serde_json::from_str(text).unwrap() else { panic!() };
        one_token(&mut body);
        let expected = serde_json::json!({"model":"m",
            "messages":[{"role":"user","content":"hi"}],"stream":false,"max_tokens":1,"n":1,
            "tools":[{"type":"function"}]});
        assert_eq!(Value::Object(body), expected);
    }
}
