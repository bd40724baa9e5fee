//! Turns the timestamped body chunks of one streamed response into the field's figures
//! (section 6 of the field notes, as `vllm bench serve` measures them): TTFT at the first
//! event with non-empty `choices`, one ITL sample per later choice chunk, E2E at the last
//! data event, output tokens from `usage`. Kept free of I/O so tests can feed it scripted
//! timestamps.

use std::time::{Duration, Instant};

use crate::openai::sse::{SseEvent, SseScanner};

use super::record::Outcome;

/// Accumulates one stream's timings as its chunks arrive.
#[derive(Debug)]
pub struct StreamTimer {
    sent: Instant,
    scanner: SseScanner,
    first_choice: Option<Instant>,
    last_choice: Option<Instant>,
    last_data: Option<Instant>,
    itl: Vec<Duration>,
    choice_events: u64,
    usage_completion_tokens: Option<u64>,
    usage_prompt_tokens: Option<u64>,
    usage_cached_tokens: Option<u64>,
    error: Option<String>,
    done: bool,
}

/// What a finished stream measured.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamFigures {
    pub outcome: Outcome,
    pub ttft: Option<Duration>,
    pub e2e: Duration,
    pub itl: Vec<Duration>,
    pub output_tokens: u64,
    pub prompt_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`, when the target reported it.
    pub cached_tokens: Option<u64>,
    /// Events that carried choices (the role chunk included).
    pub chunks: u64,
}

impl StreamTimer {
    /// Starts timing a request sent at `sent`; `expected_tokens` sizes the ITL buffer.
    pub fn new(sent: Instant, expected_tokens: u64) -> Self {
        Self {
            sent,
            scanner: SseScanner::new(),
            first_choice: None,
            last_choice: None,
            last_data: None,
            itl: Vec::with_capacity(expected_tokens.min(65_536) as usize + 2),
            choice_events: 0,
            usage_completion_tokens: None,
            usage_prompt_tokens: None,
            usage_cached_tokens: None,
            error: None,
            done: false,
        }
    }

    /// Feeds one body chunk received at `at`. Every event the chunk completes is stamped
    /// with the chunk's arrival time, as a client reading the socket would see it.
    pub fn on_chunk(&mut self, at: Instant, bytes: &[u8]) {
        let mut events = std::mem::take(&mut self.scanner);
        events.feed(bytes, |event| self.on_event(at, event));
        self.scanner = events;
    }

    fn on_event(&mut self, at: Instant, event: SseEvent) {
        match event {
            SseEvent::Done => self.done = true,
            SseEvent::Data { has_choices, usage, error } => {
                self.last_data = Some(at);
                if has_choices {
                    self.choice_events += 1;
                    match self.last_choice {
                        None => self.first_choice = Some(at),
                        Some(previous) => self.itl.push(at.saturating_duration_since(previous)),
                    }
                    self.last_choice = Some(at);
                }
                if let Some(usage) = usage {
                    self.usage_completion_tokens = Some(usage.completion_tokens);
                    self.usage_prompt_tokens = Some(usage.prompt_tokens);
                    self.usage_cached_tokens =
                        usage.prompt_tokens_details.map(|details| details.cached_tokens);
                }
                if let Some(message) = error {
                    self.error.get_or_insert(message);
                }
            }
        }
    }

    /// Ends the stream: `body_ended` is when the body finished (or broke).
    pub fn finish(self, body_ended: Instant) -> StreamFigures {
        let outcome = if let Some(message) = self.error {
            Outcome::StreamError(message)
        } else if self.done {
            Outcome::Success
        } else {
            Outcome::Truncated
        };
        let end = self.last_data.unwrap_or(body_ended);
        StreamFigures {
            outcome,
            ttft: self.first_choice.map(|at| at.saturating_duration_since(self.sent)),
            e2e: end.saturating_duration_since(self.sent),
            itl: self.itl,
            output_tokens: self.usage_completion_tokens.unwrap_or(self.choice_events),
            prompt_tokens: self.usage_prompt_tokens,
            cached_tokens: self.usage_cached_tokens,
            chunks: self.choice_events,
        }
    }
}
