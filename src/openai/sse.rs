//! An incremental scanner for OpenAI-style server-sent events, fed the raw bytes of a
//! stream as they arrive (events may be split across reads), telling for each event what
//! the latency figures need: does it carry choices (a token), usage, an error, or `[DONE]`.
//!
//! It looks at the bytes without building a JSON tree for ordinary chunks, so the gateway
//! can observe every stream it forwards; only events that carry `usage` or `error` are
//! parsed in full.

use std::sync::LazyLock;

use memchr::memmem::Finder;
use serde::Deserialize;

/// Largest event the scanner keeps buffering; a longer one is skipped (and counted), the
/// stream itself is unaffected because the scanner only watches a copy.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// Token counts a stream reported in its `usage` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    /// vLLM sends it with prefix caching: the prompt tokens served from the cache.
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// The breakdown of a usage's prompt tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub struct PromptTokensDetails {
    #[serde(default)]
    pub cached_tokens: u64,
}

/// What one SSE event carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseEvent {
    /// A `data: {json}` event.
    Data {
        /// The event has a non-empty `choices` array: it is a token (or the role chunk).
        has_choices: bool,
        /// The `usage` object, if present and not null.
        usage: Option<Usage>,
        /// The event is an `{"error": ...}` object; holds its message.
        error: Option<String>,
    },
    /// `data: [DONE]`.
    Done,
}

/// Splits a byte stream into SSE events and classifies them.
#[derive(Debug, Default)]
pub struct SseScanner {
    pending: Vec<u8>,
    /// Bytes of `pending` already searched for an event end.
    scanned: usize,
    skipping_oversized: bool,
    /// Events dropped because they exceeded [`MAX_EVENT_BYTES`].
    pub oversized_events: u64,
}

impl SseScanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next bytes of the stream, calling `on_event` for every event they complete.
    pub fn feed(&mut self, bytes: &[u8], mut on_event: impl FnMut(SseEvent)) {
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        while let Some((event_end, next_start)) = find_event_end(&self.pending, start, self.scanned)
        {
            if event_end - start > MAX_EVENT_BYTES && !self.skipping_oversized {
                self.oversized_events += 1;
            } else if !self.skipping_oversized
                && let Some(event) = classify_event(&self.pending[start..event_end])
            {
                on_event(event);
            }
            self.skipping_oversized = false;
            start = next_start;
            self.scanned = next_start;
        }
        self.pending.drain(..start);
        // Keep the last bytes searched: a delimiter may straddle this read and the next.
        self.scanned = self.pending.len().saturating_sub(3);
        if self.pending.len() > MAX_EVENT_BYTES {
            if !self.skipping_oversized {
                self.oversized_events += 1;
                self.skipping_oversized = true;
            }
            let keep_from = self.pending.len() - 3;
            self.pending.drain(..keep_from);
            self.scanned = 0;
        }
    }
}

/// The end of the first event in `buffer[start..]` and the start of the next one: events
/// end at a blank line (`\n\n`, `\r\n\r\n` or `\r\r`). Searching begins at `scanned`,
/// jumping from one line break to the next (memchr) rather than testing every byte.
fn find_event_end(buffer: &[u8], start: usize, scanned: usize) -> Option<(usize, usize)> {
    let mut index = scanned.max(start);
    while let Some(offset) = memchr::memchr2(b'\n', b'\r', &buffer[index..]) {
        index += offset;
        let rest = &buffer[index..];
        for delimiter in [&b"\n\n"[..], b"\r\n\r\n", b"\r\r"] {
            if rest.starts_with(delimiter) {
                return Some((index, index + delimiter.len()));
            }
        }
        index += 1;
    }
    None
}

/// Classifies a complete event (its lines, without the terminating blank line).
fn classify_event(event: &[u8]) -> Option<SseEvent> {
    let joined;
    let data: &[u8] = match single_data_line(event) {
        // One `data:` line, as every vLLM and SGLang event is: read in place.
        Some(data) => data,
        None => {
            joined = joined_data_lines(event);
            &joined
        }
    };
    if data.is_empty() {
        return None;
    }
    let trimmed = data.trim_ascii();
    if trimmed == b"[DONE]" {
        return Some(SseEvent::Done);
    }
    let has_choices = matches!(value_after_key(trimmed, &CHOICES_KEY), Some(rest) if
        rest.first() == Some(&b'[') && rest[1..].trim_ascii_start().first() != Some(&b']'));
    let has_usage = matches!(value_after_key(trimmed, &USAGE_KEY), Some(rest) if
        rest.first() == Some(&b'{'));
    let has_error = !has_choices
        && matches!(value_after_key(trimmed, &ERROR_KEY), Some(rest) if rest.first() == Some(&b'{'));
    let (usage, error) =
        if has_usage || has_error { parse_usage_and_error(trimmed) } else { (None, None) };
    Some(SseEvent::Data { has_choices, usage, error })
}

/// The value of an event that is one `data:` line and nothing else.
fn single_data_line(event: &[u8]) -> Option<&[u8]> {
    let line = event.strip_suffix(b"\r").unwrap_or(event);
    if memchr::memchr(b'\n', line).is_some() {
        return None;
    }
    let rest = line.strip_prefix(b"data:")?;
    Some(rest.strip_prefix(b" ").unwrap_or(rest))
}

/// The values of an event's `data:` lines joined by newlines (other fields and comments
/// left out).
fn joined_data_lines(event: &[u8]) -> Vec<u8> {
    let mut data: Vec<u8> = Vec::new();
    for line in event.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(rest) = line.strip_prefix(b"data:") {
            if !data.is_empty() {
                data.push(b'\n');
            }
            data.extend_from_slice(rest.strip_prefix(b" ").unwrap_or(rest));
        }
    }
    data
}

/// The keys every event is searched for, each searcher built once: building one costs more
/// than searching a token event with it.
static CHOICES_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"choices\""));
static USAGE_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\""));
static ERROR_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"error\""));

/// The bytes after `key` and its colon (whitespace skipped), if `key` occurs.
fn value_after_key<'a>(json: &'a [u8], key: &Finder<'_>) -> Option<&'a [u8]> {
    let at = key.find(json)?;
    let rest = json[at + key.needle().len()..].trim_ascii_start();
    let rest = rest.strip_prefix(b":")?;
    Some(rest.trim_ascii_start())
}

fn parse_usage_and_error(json: &[u8]) -> (Option<Usage>, Option<String>) {
    #[derive(Deserialize)]
    struct Envelope {
        usage: Option<Usage>,
        error: Option<ErrorObject>,
    }
    #[derive(Deserialize)]
    struct ErrorObject {
        message: Option<String>,
    }
    match serde_json::from_slice::<Envelope>(json) {
        Ok(envelope) => (
            envelope.usage,
            envelope.error.map(|e| e.message.unwrap_or_else(|| "unknown error".into())),
        ),
        Err(_) => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_in_pieces(stream: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut scanner = SseScanner::new();
        let mut events = Vec::new();
        for chunk in stream.chunks(piece) {
            scanner.feed(chunk, |event| events.push(event));
        }
        events
    }

    const STREAM: &[u8] = b"data: {\"id\":\"a\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n\
data: {\"id\":\"a\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n\
data: {\"id\":\"a\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"total_tokens\":9}}\n\n\
data: [DONE]\n\n";

    #[test]
    fn classifies_a_vllm_stream_whatever_the_read_sizes() {
        let expected = vec![
            SseEvent::Data { has_choices: true, usage: None, error: None },
            SseEvent::Data { has_choices: true, usage: None, error: None },
            SseEvent::Data {
                has_choices: false,
                usage: Some(Usage {
                    prompt_tokens: 7,
                    completion_tokens: 2,
                    prompt_tokens_details: None,
                }),
                error: None,
            },
            SseEvent::Done,
        ];
        for piece in [1, 2, 3, 5, 17, 64, STREAM.len()] {
            assert_eq!(scan_in_pieces(STREAM, piece), expected, "piece size {piece}");
        }
    }

    #[test]
    fn crlf_line_endings_and_error_events() {
        let stream =
            b"data: {\"error\":{\"message\":\"boom\",\"type\":\"x\"}}\r\n\r\ndata: [DONE]\r\n\r\n";
        let events = scan_in_pieces(stream, 4);
        assert_eq!(
            events,
            vec![
                SseEvent::Data { has_choices: false, usage: None, error: Some("boom".into()) },
                SseEvent::Done
            ]
        );
    }

    #[test]
    fn oversized_events_are_skipped_and_counted() {
        let mut stream = b"data: {\"choices\":[{\"text\":\"".to_vec();
        stream.extend(std::iter::repeat_n(b'x', MAX_EVENT_BYTES + 10));
        stream.extend_from_slice(b"\"}]}\n\ndata: [DONE]\n\n");
        let mut scanner = SseScanner::new();
        let mut events = Vec::new();
        for chunk in stream.chunks(4096) {
            scanner.feed(chunk, |event| events.push(event));
        }
        assert_eq!(events, vec![SseEvent::Done]);
        assert_eq!(scanner.oversized_events, 1);
    }

    #[test]
    fn comments_and_null_usage_are_ignored() {
        let stream = b": keep-alive\n\ndata: {\"choices\":[{\"text\":\"a\"}],\"usage\":null}\n\n";
        assert_eq!(
            scan_in_pieces(stream, 7),
            vec![SseEvent::Data { has_choices: true, usage: None, error: None }]
        );
    }
}
