//! Parsing the body of `POST /v1/chat/completions` and `POST /v1/completions` into the few
//! fields that routing and simulation need, with the prompt's estimated token count.

use serde::Deserialize;

use crate::tokens::{CHAT_TOKENS_PER_MESSAGE, estimate_text_tokens};

/// Which OpenAI inference endpoint a body was sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Chat,
    Completions,
}

impl Endpoint {
    /// The endpoint served at `path`, if it is an inference path.
    pub fn from_path(path: &str) -> Option<Self> {
        match path {
            "/v1/chat/completions" => Some(Self::Chat),
            "/v1/completions" => Some(Self::Completions),
            _ => None,
        }
    }

    pub fn path(self) -> &'static str {
        match self {
            Self::Chat => "/v1/chat/completions",
            Self::Completions => "/v1/completions",
        }
    }
}

/// The most choices (`n`) one request may ask for: the OpenAI API's own bound. Each choice
/// is a sequence the replica generates, so an unbounded `n` would let one request take a
/// replica's whole batch.
pub const MAX_CHOICES: u64 = 128;

/// Why a body is not a valid inference request. Each variant maps to a 400.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestParseError {
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("field `messages` is required for chat completions")]
    MissingMessages,
    #[error("field `prompt` is required for completions")]
    MissingPrompt,
    #[error("field `{field}` is invalid: {reason}")]
    InvalidField { field: &'static str, reason: String },
}

impl RequestParseError {
    /// The request field at fault, as OpenAI's error `param` names it.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::InvalidJson(_) => None,
            Self::MissingMessages => Some("messages"),
            Self::MissingPrompt => Some("prompt"),
            Self::InvalidField { field, .. } => Some(field),
        }
    }
}

/// What every request is held to, however it is read (parsed whole, or only its top fields
/// when its length classifies it): `n` within 1..=[`MAX_CHOICES`], and for a chat,
/// `messages` given (`messages`: their count) and not empty, as the OpenAI API requires.
pub fn check_bounds(
    endpoint: Endpoint,
    n: Option<u64>,
    messages: Option<usize>,
) -> Result<(), RequestParseError> {
    if let Some(n) = n.filter(|n| !(1..=MAX_CHOICES).contains(n)) {
        return Err(RequestParseError::InvalidField {
            field: "n",
            reason: format!("{n} choices asked; between 1 and {MAX_CHOICES} may be"),
        });
    }
    if endpoint == Endpoint::Chat {
        match messages {
            None => return Err(RequestParseError::MissingMessages),
            Some(0) => {
                return Err(RequestParseError::InvalidField {
                    field: "messages",
                    reason: "it holds no message; a chat completion needs at least one".into(),
                });
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Deserializes a JSON request body. The body is checked to be UTF-8 once, as a whole, and
/// then parsed as text: parsed as bytes, every string in it would be checked on its own
/// (seven checks for the smallest chat request, a tenth of its classification).
pub fn from_json_body<'a, T: serde::Deserialize<'a>>(
    body: &'a [u8],
) -> Result<T, RequestParseError> {
    let text = std::str::from_utf8(body).map_err(|error| {
        RequestParseError::InvalidJson(format!("the body is not UTF-8: {error}"))
    })?;
    serde_json::from_str(text).map_err(|error| RequestParseError::InvalidJson(error.to_string()))
}

/// What the prompt was given as.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    /// Chat messages in order, each flattened to its text parts.
    Messages(Vec<ChatMessage>),
    /// A completion prompt as text (one or several strings).
    Text(Vec<String>),
    /// A completion prompt given as token ids (nested lists flattened): their count is exact.
    TokenIds(Vec<u64>),
}

/// One chat message: its role and its text parts joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    pub text: String,
}

/// The routing- and simulation-relevant fields of an inference request.
#[derive(Debug, Clone, PartialEq)]
pub struct InferenceRequest {
    pub endpoint: Endpoint,
    pub model: Option<String>,
    pub prompt: PromptInput,
    /// `max_completion_tokens` if given, else `max_tokens`.
    pub max_tokens: Option<u64>,
    pub stream: bool,
    pub include_usage: bool,
    pub ignore_eos: bool,
    /// OpenAI's end-user id, a session key for affinity when no session header is sent.
    pub user: Option<String>,
}

#[derive(Deserialize)]
struct RawRequest {
    model: Option<String>,
    messages: Option<Vec<RawMessage>>,
    prompt: Option<serde_json::Value>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    n: Option<u64>,
    #[serde(default)]
    stream: Option<bool>,
    stream_options: Option<RawStreamOptions>,
    #[serde(default)]
    ignore_eos: Option<bool>,
    /// Kept loose: a `user` that is not a string is ignored, as before it was read.
    #[serde(default)]
    user: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawMessage {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<RawContent>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawContent {
    Text(String),
    Parts(Vec<RawPart>),
}

#[derive(Deserialize)]
struct RawPart {
    text: Option<String>,
}

#[derive(Deserialize)]
struct RawStreamOptions {
    include_usage: Option<bool>,
}

impl InferenceRequest {
    /// Parses a request body sent to `endpoint`.
    pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<Self, RequestParseError> {
        let raw: RawRequest = from_json_body(body)?;
        check_bounds(endpoint, raw.n, raw.messages.as_ref().map(Vec::len))?;
        let prompt = match endpoint {
            // Given and not empty: checked above.
            Endpoint::Chat => PromptInput::Messages(
                raw.messages.unwrap_or_default().into_iter().map(message_text).collect(),
            ),
            Endpoint::Completions => {
                parse_prompt(raw.prompt.ok_or(RequestParseError::MissingPrompt)?)?
            }
        };
        Ok(Self {
            endpoint,
            model: raw.model,
            prompt,
            max_tokens: raw.max_completion_tokens.or(raw.max_tokens),
            stream: raw.stream.unwrap_or(false),
            include_usage: raw.stream_options.and_then(|o| o.include_usage).unwrap_or(false),
            ignore_eos: raw.ignore_eos.unwrap_or(false),
            user: raw.user.and_then(|user| user.as_str().map(str::to_owned)),
        })
    }

    /// The prompt's token count under the shared estimator (exact for token-id prompts).
    pub fn prompt_tokens(&self) -> u64 {
        match &self.prompt {
            PromptInput::Messages(messages) => messages
                .iter()
                .map(|message| estimate_text_tokens(&message.text) + CHAT_TOKENS_PER_MESSAGE)
                .sum(),
            PromptInput::Text(texts) => texts.iter().map(|text| estimate_text_tokens(text)).sum(),
            PromptInput::TokenIds(ids) => ids.len() as u64,
        }
    }
}

fn message_text(message: RawMessage) -> ChatMessage {
    let text = match message.content {
        None => String::new(),
        Some(RawContent::Text(text)) => text,
        Some(RawContent::Parts(parts)) => parts.into_iter().filter_map(|p| p.text).collect(),
    };
    ChatMessage { role: message.role.unwrap_or_default(), text }
}

fn parse_prompt(value: serde_json::Value) -> Result<PromptInput, RequestParseError> {
    use serde_json::Value;
    let invalid = |reason: &str| RequestParseError::InvalidField {
        field: "prompt",
        reason: reason.to_string(),
    };
    match value {
        Value::String(text) => Ok(PromptInput::Text(vec![text])),
        Value::Array(items) if items.iter().all(Value::is_string) => Ok(PromptInput::Text(
            items.into_iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
        )),
        Value::Array(items) if items.iter().all(Value::is_u64) => {
            Ok(PromptInput::TokenIds(items.iter().filter_map(Value::as_u64).collect()))
        }
        Value::Array(items) if items.iter().all(Value::is_array) => {
            let mut all = Vec::new();
            for item in &items {
                let ids = item.as_array().expect("checked above");
                if !ids.iter().all(Value::is_u64) {
                    return Err(invalid("nested prompt arrays must hold token ids"));
                }
                all.extend(ids.iter().filter_map(Value::as_u64));
            }
            Ok(PromptInput::TokenIds(all))
        }
        _ => Err(invalid("must be a string, a list of strings or a list of token ids")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_request_fields_and_token_count() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"abcdefgh"}],
            "max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}"#;
        let request = InferenceRequest::parse(Endpoint::Chat, body).unwrap();
        assert_eq!(request.model.as_deref(), Some("m"));
        assert_eq!(request.max_tokens, Some(5));
        assert!(request.stream && request.include_usage && !request.ignore_eos);
        assert_eq!(request.prompt_tokens(), 2 + CHAT_TOKENS_PER_MESSAGE);
    }

    #[test]
    fn max_completion_tokens_wins_over_max_tokens() {
        let body = br#"{"messages":[{"content":"a"}],"max_tokens":5,"max_completion_tokens":9}"#;
        let request = InferenceRequest::parse(Endpoint::Chat, body).unwrap();
        assert_eq!(request.max_tokens, Some(9));
    }

    #[test]
    fn content_parts_are_joined() {
        let body = br#"{"messages":[{"role":"user","content":[{"type":"text","text":"abcd"},
            {"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"efgh"}]}]}"#;
        let request = InferenceRequest::parse(Endpoint::Chat, body).unwrap();
        let message = ChatMessage { role: "user".into(), text: "abcdefgh".into() };
        assert_eq!(request.prompt, PromptInput::Messages(vec![message]));
    }

    #[test]
    fn completion_prompts_in_every_shape() {
        let parse = |body: &[u8]| InferenceRequest::parse(Endpoint::Completions, body);
        assert_eq!(parse(br#"{"prompt":"abcdabcd"}"#).unwrap().prompt_tokens(), 2);
        assert_eq!(parse(br#"{"prompt":["abcd","ab"]}"#).unwrap().prompt_tokens(), 2);
        assert_eq!(parse(br#"{"prompt":[1,2,3]}"#).unwrap().prompt_tokens(), 3);
        assert_eq!(parse(br#"{"prompt":[[1,2],[3]]}"#).unwrap().prompt_tokens(), 3);
        assert!(matches!(
            parse(br#"{"prompt":[1,"a"]}"#),
            Err(RequestParseError::InvalidField { field: "prompt", .. })
        ));
    }

    #[test]
    fn choices_out_of_the_api_bound_and_empty_chats_are_refused_by_field() {
        let chat = |body: &[u8]| InferenceRequest::parse(Endpoint::Chat, body);
        let text = |body: &[u8]| InferenceRequest::parse(Endpoint::Completions, body);
        let one = r#""messages":[{"role":"user","content":"hi"}]"#;
        for n in [1, MAX_CHOICES] {
            assert!(chat(format!(r#"{{{one},"n":{n}}}"#).as_bytes()).is_ok(), "n = {n}");
        }
        for n in [0, MAX_CHOICES + 1, 100_000] {
            let refused = chat(format!(r#"{{{one},"n":{n}}}"#).as_bytes()).unwrap_err();
            assert_eq!(refused.field(), Some("n"), "n = {n}");
            let refused = text(format!(r#"{{"prompt":"hi","n":{n}}}"#).as_bytes()).unwrap_err();
            assert_eq!(refused.field(), Some("n"), "n = {n}");
        }
        assert!(matches!(
            chat(br#"{"messages":[{},{}],"n":-1}"#),
            Err(RequestParseError::InvalidJson(_))
        ));
        let empty = chat(br#"{"messages":[]}"#).unwrap_err();
        assert!(matches!(empty, RequestParseError::InvalidField { field: "messages", .. }));
        assert_eq!(chat(br#"{"model":"m"}"#).unwrap_err().field(), Some("messages"));
    }

    #[test]
    fn bad_bodies_are_named() {
        assert!(matches!(
            InferenceRequest::parse(Endpoint::Chat, b"{not json"),
            Err(RequestParseError::InvalidJson(_))
        ));
        // JSON is UTF-8 (RFC 8259): a body that is not is refused whole, wherever the bad
        // byte is, and escapes that are valid JSON still decode.
        let not_utf8 =
            InferenceRequest::parse(Endpoint::Chat, b"{\"model\":\"m\xff\",\"messages\":[]}");
        assert!(matches!(not_utf8, Err(RequestParseError::InvalidJson(m)) if m.contains("UTF-8")));
        let escaped =
            br#"{"model":"\u00e9\ud83d\ude00","messages":[{"role":"user","content":"\n"}]}"#;
        let parsed = InferenceRequest::parse(Endpoint::Chat, escaped).unwrap();
        assert_eq!(parsed.model.as_deref(), Some("\u{e9}\u{1f600}"));
        assert_eq!(
            InferenceRequest::parse(Endpoint::Chat, b"{}"),
            Err(RequestParseError::MissingMessages)
        );
        assert_eq!(
            InferenceRequest::parse(Endpoint::Completions, b"{}"),
            Err(RequestParseError::MissingPrompt)
        );
    }
}
