//! Multi-turn conversations (`mt_cC_tT_iI_oO`): each conversation keeps its history and
//! sends its turns one after another, each turn's prompt being every earlier message (the
//! user's, and the answers the target streamed back) plus a new user message. Requests of a
//! conversation carry its id as `x-session-id` and in OpenAI's `user` field.
//!
//! Conversations run in a closed loop: each of the round's clients takes the next
//! conversation and runs all its turns before taking another. Request `k * T + t` is turn
//! `t` of conversation `k`, whatever the target, so every target sees the same user messages.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::tokens::{CHAT_TOKENS_PER_MESSAGE, estimate_text_tokens, synthetic_text};

use super::client::{StreamOptions, send_streaming};
use super::prefix_workload::{ConversationSpec, text_rng};
use super::record::RequestRecord;
use super::runner::{Budget, Round, TargetContext};

const USER_TEXT: u64 = 5;

/// One conversation's messages so far, as (role, text).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    pub messages: Vec<(&'static str, String)>,
}

impl History {
    /// Adds turn `turn`'s user message (drawn from the seed) and returns it.
    pub fn ask(&mut self, spec: &ConversationSpec, seed: u64, conversation: u64, turn: u64) {
        let tokens = spec.message_tokens.saturating_sub(CHAT_TOKENS_PER_MESSAGE);
        let which = conversation.wrapping_mul(1 << 20) ^ turn;
        let text = synthetic_text(tokens, &mut text_rng(seed, USER_TEXT, which));
        self.messages.push(("user", text));
    }

    /// Adds the answer the target gave.
    pub fn answer(&mut self, text: String) {
        self.messages.push(("assistant", text));
    }

    /// The prompt's tokens under the shared estimator.
    pub fn prompt_tokens(&self) -> u64 {
        self.messages
            .iter()
            .map(|(_, text)| estimate_text_tokens(text) + CHAT_TOKENS_PER_MESSAGE)
            .sum()
    }

    pub fn as_pairs(&self) -> Vec<(&str, &str)> {
        self.messages.iter().map(|(role, text)| (*role, text.as_str())).collect()
    }
}

/// The session id of conversation `conversation` in a run seeded with `seed`.
pub fn session_id(seed: u64, conversation: u64) -> String {
    format!("conv-{seed}-{conversation}")
}

/// The text a streamed response carried (chat deltas or completion texts), from its raw
/// SSE body. Events that are not JSON chunks are skipped.
pub fn streamed_text(body: &[u8]) -> String {
    let mut text = String::new();
    let body = String::from_utf8_lossy(body);
    for event in body.split("\n\n") {
        let Some(data) = event.trim().strip_prefix("data:") else { continue };
        let Ok(chunk) = serde_json::from_str::<serde_json::Value>(data.trim()) else { continue };
        let choice = &chunk["choices"][0];
        let piece = choice["delta"]["content"].as_str().or_else(|| choice["text"].as_str());
        text.push_str(piece.unwrap_or(""));
    }
    text
}

/// Runs a round of conversations with `clients` clients. The round's budget is whole
/// conversations (`first_index` and the count are multiples of T).
pub async fn run_round(
    context: Arc<TargetContext>,
    round: Round,
    spec: ConversationSpec,
    clients: usize,
    started: Instant,
) -> Vec<RequestRecord> {
    let turns = spec.turns.max(1);
    let count = match round.budget {
        Budget::Requests(count) => count.div_ceil(turns),
        // The plan refuses --duration for conversations.
        Budget::Duration(_) => 0,
    };
    let first = round.first_index / turns;
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let (context, next) = (context.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut records = Vec::new();
            loop {
                let offset = next.fetch_add(1, Ordering::Relaxed);
                if offset >= count {
                    break;
                }
                let conversation = first + offset;
                converse(&context, round, spec, conversation, started, &mut records).await;
            }
            records
        }));
    }
    let mut records = Vec::new();
    for task in tasks {
        records.extend(task.await.expect("a conversation task panicked"));
    }
    records.sort_by_key(|record| record.index);
    records
}

/// Sends one conversation's turns in order; a failed turn still adds what it received.
async fn converse(
    context: &TargetContext,
    round: Round,
    spec: ConversationSpec,
    conversation: u64,
    started: Instant,
    records: &mut Vec<RequestRecord>,
) {
    let session = session_id(context.seed, conversation);
    let mut history = History::default();
    for turn in 0..spec.turns {
        history.ask(&spec, context.seed, conversation, turn);
        let index = conversation * spec.turns + turn;
        let at = started.elapsed();
        let mut record = RequestRecord::failed(index, round.number, at, at);
        let body =
            context.template.messages_body(&history.as_pairs(), spec.output_tokens, Some(&session));
        let options = StreamOptions { session: Some(&session), keep_body: true };
        let prompt_tokens = history.prompt_tokens();
        let response = send_streaming(
            &context.client,
            &context.template,
            body,
            prompt_tokens,
            spec.output_tokens,
            options,
            &mut record,
        )
        .await;
        history.answer(streamed_text(&response));
        context.progress.record(record.outcome.is_success());
        records.push(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_text_joins_chat_and_completion_chunks() {
        let chat =
            b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n\
            data: {\"choices\":[{\"delta\":{\"content\":\" the\"}}]}\n\n\
            data: {\"choices\":[{\"delta\":{\"content\":\" and\"}}]}\n\n\
            data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\ndata: [DONE]\n\n";
        assert_eq!(streamed_text(chat), " the and");
        let text = b"data: {\"choices\":[{\"text\":\"ab\"}]}\n\ndata: {\"choices\":[{\"text\":\"cd\"}]}\n\n";
        assert_eq!(streamed_text(text), "abcd");
    }
}
