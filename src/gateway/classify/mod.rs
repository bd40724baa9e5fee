//! Phase 1, classify: which entry serves an inference request. In order of cost:
//! 1. the `x-laneway-entry` header, if the client named one;
//! 2. the body's length alone, when even the most token-dense body of that length could not
//!    exceed the short threshold (see [`max_tokens_for_body_len`]);
//! 3. the parsed body's prompt tokens under the shared estimator ([`crate::tokens`]).
//!
//! No byte count can prove a body long (a long `tools` list or whitespace carries no prompt
//! tokens), so long requests are always parsed; parsing a 50k-token body costs a fraction
//! of a millisecond (`cargo bench --bench classify`).

#[cfg(test)]
mod accuracy;
pub mod model_name;
pub mod slo;

use crate::gateway::config::Entry;
use crate::openai::request::{self, Endpoint};
use crate::openai::{InferenceRequest, RequestParseError};

/// How the entry was decided: the `method` label of `laneway_classified_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassifyMethod {
    /// The client named the entry in `x-laneway-entry`.
    Header,
    /// The request came in on an entry's dedicated listener.
    Listener,
    /// The body's length bounded its tokens below the threshold.
    ContentLength,
    /// The body was parsed and its prompt tokens estimated.
    Parsed,
}

impl ClassifyMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Header => "header",
            Self::Listener => "listener",
            Self::ContentLength => "content_length",
            Self::Parsed => "parsed",
        }
    }
}

/// The entry for a request and what the picker should count as its prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification {
    pub entry: Entry,
    pub method: ClassifyMethod,
    /// Estimated prompt tokens: exact under the estimator when parsed, else
    /// [`tokens_from_body_len`].
    pub prompt_tokens: u64,
    /// The body asks for a streamed answer (`"stream": true`); false when the body was not
    /// read.
    pub streams: bool,
}

/// The most estimated tokens a JSON body of `len` bytes can hold.
///
/// The densest bodies are chat requests of empty messages, `{"messages":[{},{},...]}`:
/// three bytes (`{}` and a comma) for the four template tokens each message is charged.
/// Text is sparser: an ASCII byte is a quarter token, a non-ASCII character a token for at
/// least two bytes, token-id prompts a token for at least two bytes (`1,`). So
/// `ceil(4 * (len + 1) / 3)` bounds every body, which the tests check on adversarial ones.
pub fn max_tokens_for_body_len(len: u64) -> u64 {
    (4 * (len + 1)).div_ceil(3)
}

/// The cheap prompt estimate when the body is not parsed: a quarter token per byte, which
/// overshoots by the JSON envelope (under 4% on the field workloads, see `accuracy`).
pub fn tokens_from_body_len(len: u64) -> u64 {
    len.div_ceil(4)
}

/// The entry the length alone decides, if it does.
pub fn classify_by_length(content_length: u64, short_threshold_tokens: u64) -> Option<Entry> {
    (max_tokens_for_body_len(content_length) <= short_threshold_tokens).then_some(Entry::Short)
}

/// Classifies a buffered inference body.
///
/// `named` is an entry fixed before the body was read (header or dedicated listener).
/// Bodies whose entry is decided without parsing are still checked to be JSON, so that a
/// malformed body is answered here and the same way whatever its size.
pub fn classify(
    endpoint: Endpoint,
    body: &[u8],
    named: Option<(Entry, ClassifyMethod)>,
    short_threshold_tokens: u64,
) -> Result<Classification, RequestParseError> {
    classify_with_model(endpoint, body, named, short_threshold_tokens, false).map(|(c, _)| c)
}

/// Only the `model` and `stream` fields, and what every request is held to (`n` within
/// bounds, a chat's `messages` given and not empty): the syntax check of a small body reads
/// them at no extra cost.
#[derive(serde::Deserialize)]
struct TopFields {
    model: Option<String>,
    /// Anything but `true` reads as false: the replica judges the value, not this check.
    #[serde(default, deserialize_with = "is_true")]
    stream: bool,
    n: Option<u64>,
    /// Counted, not read.
    messages: Option<Vec<serde::de::IgnoredAny>>,
}

fn is_true<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    let value: serde_json::Value = serde::Deserialize::deserialize(deserializer)?;
    Ok(value == serde_json::Value::Bool(true))
}

fn top_fields(endpoint: Endpoint, body: &[u8]) -> Result<TopFields, RequestParseError> {
    let fields: TopFields = request::from_json_body(body)?;
    request::check_bounds(endpoint, fields.n, fields.messages.as_ref().map(Vec::len))?;
    Ok(fields)
}

/// [`classify`], and the body's `model` from the same parse. A named entry skips the body
/// altogether unless `want_model`.
pub fn classify_with_model(
    endpoint: Endpoint,
    body: &[u8],
    named: Option<(Entry, ClassifyMethod)>,
    short_threshold_tokens: u64,
    want_model: bool,
) -> Result<(Classification, Option<String>), RequestParseError> {
    let len = body.len() as u64;
    let prompt_tokens = tokens_from_body_len(len);
    if let Some((entry, method)) = named {
        let fields = if want_model { Some(top_fields(endpoint, body)?) } else { None };
        let streams = fields.as_ref().is_some_and(|fields| fields.stream);
        let classification = Classification { entry, method, prompt_tokens, streams };
        return Ok((classification, fields.and_then(|fields| fields.model)));
    }
    if let Some(entry) = classify_by_length(len, short_threshold_tokens) {
        // Small by construction (a few kB at most), so the syntax check is cheap.
        let fields = top_fields(endpoint, body)?;
        let method = ClassifyMethod::ContentLength;
        let classification =
            Classification { entry, method, prompt_tokens, streams: fields.stream };
        return Ok((classification, fields.model));
    }
    let parsed = InferenceRequest::parse(endpoint, body)?;
    let prompt_tokens = parsed.prompt_tokens();
    let entry = if prompt_tokens <= short_threshold_tokens { Entry::Short } else { Entry::Long };
    let method = ClassifyMethod::Parsed;
    let classification = Classification { entry, method, prompt_tokens, streams: parsed.stream };
    Ok((classification, parsed.model))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chat_body(text: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 10
        }))
        .unwrap()
    }

    #[test]
    fn threshold_is_inclusive_for_short() {
        // 4 template tokens + 2044 text tokens = exactly the threshold.
        let at = chat_body(&"abcd".repeat(2044));
        let over = chat_body(&"abcd".repeat(2045));
        let classify = |body: &[u8]| classify(Endpoint::Chat, body, None, 2048).unwrap();
        assert_eq!(classify(&at).entry, Entry::Short);
        assert_eq!(classify(&at).method, ClassifyMethod::Parsed);
        assert_eq!(classify(&at).prompt_tokens, 2048);
        assert_eq!(classify(&over).entry, Entry::Long);
    }

    #[test]
    fn small_bodies_are_short_by_length_but_still_checked_as_json() {
        let body = chat_body("hello");
        let result = classify(Endpoint::Chat, &body, None, 2048).unwrap();
        assert_eq!((result.entry, result.method), (Entry::Short, ClassifyMethod::ContentLength));
        assert!(matches!(
            classify(Endpoint::Chat, b"{not json", None, 2048),
            Err(RequestParseError::InvalidJson(_))
        ));
        let not_utf8 = b"{\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\"}]}";
        assert!(matches!(
            classify(Endpoint::Chat, not_utf8, None, 2048),
            Err(RequestParseError::InvalidJson(message)) if message.contains("UTF-8")
        ));
    }

    #[test]
    fn whether_the_body_asks_for_a_stream_is_read_on_every_path() {
        let streamed = |text: &str, stream: serde_json::Value| {
            serde_json::to_vec(&serde_json::json!({
                "messages": [{"role": "user", "content": text}], "stream": stream
            }))
            .unwrap()
        };
        let short = |body: &[u8], named| {
            classify_with_model(Endpoint::Chat, body, named, 2048, true).unwrap().0.streams
        };
        let header = Some((Entry::Long, ClassifyMethod::Header));
        let long_text = "abcd ".repeat(3000);
        for named in [None, header] {
            assert!(short(&streamed("hi", true.into()), named));
            assert!(!short(&streamed("hi", false.into()), named));
            assert!(!short(&chat_body("hi"), named), "absent is false");
            // The replica judges odd values; this check neither refuses nor counts them.
            assert!(!short(&streamed("hi", "yes".into()), named));
            assert!(short(&streamed(&long_text, true.into()), named));
        }
        // A key inside a message is not the request's.
        assert!(!short(&chat_body(r#"{"stream": true}"#), None));
    }

    #[test]
    fn a_named_entry_wins_without_parsing() {
        let result = classify(
            Endpoint::Chat,
            b"whatever",
            Some((Entry::Long, ClassifyMethod::Header)),
            2048,
        )
        .unwrap();
        assert_eq!((result.entry, result.method), (Entry::Long, ClassifyMethod::Header));
    }

    #[test]
    fn a_body_classified_by_its_length_is_held_to_the_bounds_of_a_parsed_one() {
        let classify = |endpoint: Endpoint, body: &str| {
            let result = classify(endpoint, body.as_bytes(), None, 1000);
            result.map_err(|error| error.field())
        };
        let chat = |extra: &str| format!(r#"{{"messages":[{{"content":"hi"}}]{extra}}}"#);
        let by_length = classify(Endpoint::Chat, &chat(r#","n":2"#)).unwrap();
        assert_eq!(by_length.method, ClassifyMethod::ContentLength);
        assert_eq!(classify(Endpoint::Chat, &chat(r#","n":0"#)).unwrap_err(), Some("n"));
        assert_eq!(classify(Endpoint::Chat, &chat(r#","n":129"#)).unwrap_err(), Some("n"));
        assert_eq!(classify(Endpoint::Chat, r#"{"messages":[]}"#).unwrap_err(), Some("messages"));
        assert_eq!(classify(Endpoint::Chat, r#"{"model":"m"}"#).unwrap_err(), Some("messages"));
        let completion = classify(Endpoint::Completions, r#"{"prompt":"hi","n":300}"#);
        assert_eq!(completion.unwrap_err(), Some("n"));
    }

    #[test]
    fn empty_messages_are_the_densest_body_and_stay_under_the_bound() {
        for count in [1usize, 10, 1000] {
            let messages = vec!["{}"; count].join(",");
            let body = format!("{{\"messages\":[{messages}]}}");
            let parsed = InferenceRequest::parse(Endpoint::Chat, body.as_bytes()).unwrap();
            assert!(parsed.prompt_tokens() <= max_tokens_for_body_len(body.len() as u64));
        }
    }

    proptest! {
        #[test]
        fn the_length_bound_holds_for_any_chat_or_completion_body(
            texts in proptest::collection::vec("\\PC{0,12}", 1..20),
            ids in proptest::collection::vec(0u32..10, 0..50),
        ) {
            let messages: Vec<_> = texts.iter().map(|t| serde_json::json!({"content": t})).collect();
            let chat = serde_json::to_vec(&serde_json::json!({"messages": messages})).unwrap();
            let parsed = InferenceRequest::parse(Endpoint::Chat, &chat).unwrap();
            prop_assert!(parsed.prompt_tokens() <= max_tokens_for_body_len(chat.len() as u64));
            for prompt in [serde_json::json!(texts), serde_json::json!(ids)] {
                if prompt.as_array().is_some_and(|a| a.is_empty()) {
                    continue;
                }
                let body = serde_json::to_vec(&serde_json::json!({"prompt": prompt})).unwrap();
                let parsed = InferenceRequest::parse(Endpoint::Completions, &body).unwrap();
                prop_assert!(parsed.prompt_tokens() <= max_tokens_for_body_len(body.len() as u64));
            }
        }
    }
}
