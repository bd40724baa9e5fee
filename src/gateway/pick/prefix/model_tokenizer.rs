//! One served model's tokenizer and chat template, so that the gateway turns a request into
//! the token ids its engine computes (and so into the engine's block hashes): the model's
//! `tokenizer.json` (the `tokenizers` crate, the same implementation the engines' Python
//! tokenizers wrap) and its chat template, rendered with `minijinja` as Hugging Face's
//! `apply_chat_template` renders it in Jinja2 (blocks trimmed and left-stripped, Python's
//! string methods, `raise_exception`), with the generation prompt added, as vLLM does for
//! chat completions.
//!
//! A model folder holds `tokenizer.json` and `tokenizer_config.json`; the template is
//! `chat_template.jinja` if present, else `tokenizer_config.json`'s `chat_template` (a
//! string, or a list of named templates of which `default` is taken).

use std::path::{Path, PathBuf};

use minijinja::{Environment, ErrorKind, context};
use serde::Deserialize;
use serde_json::Value;

use super::segment_cache::Segmenter;
use crate::openai::PromptInput;

/// The template's name in its environment.
const CHAT: &str = "chat";

/// Why a model's tokenizer could not be loaded, or a prompt not tokenized.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a tokenizer: {reason}")]
    Tokenizer { path: PathBuf, reason: String },
    #[error("{path} is not valid JSON: {source}")]
    Config { path: PathBuf, source: serde_json::Error },
    #[error("the chat template does not compile: {0}")]
    Template(#[source] minijinja::Error),
    #[error("the model has no chat template")]
    NoChatTemplate,
    #[error("the chat template failed on this request: {0}")]
    Render(#[source] minijinja::Error),
    #[error("tokenizing failed: {0}")]
    Encode(String),
    #[error("a completion prompt of several strings is several requests")]
    SeveralPrompts,
}

#[derive(Deserialize, Default)]
struct TokenizerConfig {
    #[serde(default)]
    bos_token: Option<Value>,
    #[serde(default)]
    eos_token: Option<Value>,
    #[serde(default)]
    chat_template: Option<Value>,
}

/// A model's tokenizer and chat template.
pub struct ModelTokenizer {
    tokenizer: tokenizers::Tokenizer,
    /// Holds the chat template as [`CHAT`], if the model has one.
    templates: Environment<'static>,
    has_chat_template: bool,
    /// Chat prompts are encoded piece by piece between added tokens, long pieces once.
    segmenter: Option<Segmenter>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ModelTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelTokenizer")
            .field("vocabulary", &self.tokenizer.get_vocab_size(true))
            .field("has_chat_template", &self.has_chat_template)
            .finish()
    }
}

impl ModelTokenizer {
    /// Loads the tokenizer and template of the model folder `dir`.
    pub fn load(dir: &Path) -> Result<Self, TokenizerError> {
        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer = tokenizers::Tokenizer::from_file(&tokenizer_path).map_err(|error| {
            TokenizerError::Tokenizer { path: tokenizer_path.clone(), reason: error.to_string() }
        })?;
        let config_path = dir.join("tokenizer_config.json");
        let config: TokenizerConfig = match std::fs::read(&config_path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|source| TokenizerError::Config { path: config_path, source })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Default::default(),
            Err(source) => return Err(TokenizerError::Read { path: config_path, source }),
        };
        let template_path = dir.join("chat_template.jinja");
        let template = match std::fs::read_to_string(&template_path) {
            Ok(text) => Some(text),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                config.chat_template.as_ref().and_then(default_template)
            }
            Err(source) => return Err(TokenizerError::Read { path: template_path, source }),
        };
        let mut templates = environment();
        let has_chat_template = template.is_some();
        if let Some(template) = template {
            templates.add_template_owned(CHAT, template).map_err(TokenizerError::Template)?;
        }
        Ok(Self {
            segmenter: Segmenter::of(&tokenizer),
            tokenizer,
            templates,
            has_chat_template,
            bos_token: config.bos_token.as_ref().and_then(token_text).unwrap_or_default(),
            eos_token: config.eos_token.as_ref().and_then(token_text).unwrap_or_default(),
        })
    }

    /// The token ids the engine computes for `prompt`: chat messages rendered by the
    /// template (special tokens only as the template writes them), a completion's text
    /// with the tokenizer's own special tokens, token ids as given.
    pub fn prompt_ids(&self, prompt: &PromptInput) -> Result<Vec<u64>, TokenizerError> {
        let (text, add_special_tokens) = match prompt {
            PromptInput::TokenIds(ids) => return Ok(ids.clone()),
            PromptInput::Text(texts) => match texts.as_slice() {
                [text] => (text.clone(), true),
                [] => (String::new(), true),
                _ => return Err(TokenizerError::SeveralPrompts),
            },
            PromptInput::Messages(messages) => {
                if !self.has_chat_template {
                    return Err(TokenizerError::NoChatTemplate);
                }
                let messages: Vec<Value> = messages
                    .iter()
                    .map(|m| serde_json::json!({"role": m.role, "content": m.text}))
                    .collect();
                let template = self.templates.get_template(CHAT).map_err(TokenizerError::Render)?;
                let text = template
                    .render(context! {
                        messages => messages,
                        add_generation_prompt => true,
                        bos_token => self.bos_token,
                        eos_token => self.eos_token,
                    })
                    .map_err(TokenizerError::Render)?;
                (text, false)
            }
        };
        let encode = |text: &str, add_special_tokens: bool| {
            let encoding = self
                .tokenizer
                .encode_fast(text, add_special_tokens)
                .map_err(|error| TokenizerError::Encode(error.to_string()))?;
            Ok(encoding.get_ids().to_vec())
        };
        // A chat prompt gets no special tokens but those its template writes, so it is the
        // concatenation of its pieces; a completion's may have some added around it.
        let ids = match (&self.segmenter, add_special_tokens) {
            (Some(segmenter), false) => segmenter.encode(&text, |piece| encode(piece, false))?,
            _ => encode(&text, add_special_tokens)?,
        };
        Ok(ids.into_iter().map(u64::from).collect())
    }
}

/// An environment that renders as Hugging Face's chat templating does.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |message: String| -> Result<String, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
    });
    env
}

/// `chat_template` as a string, or the `default` of a list of named templates.
fn default_template(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Array(named) => named
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template")?.as_str().map(str::to_string)),
        _ => None,
    }
}

/// A special token as `tokenizer_config.json` writes it: a string or `{"content": ...}`.
fn token_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Object(token) => token.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::openai::request::ChatMessage;
    use crate::tokens::synthetic_text;

    const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tokenizer/model");

    /// The prompts of tests/data/tokenizer/expected.json, as Hugging Face tokenized them.
    fn expected() -> Vec<(PromptInput, Vec<u64>)> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tokenizer/expected.json");
        let cases: Vec<Value> = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        cases
            .iter()
            .map(|case| {
                let ids = case["ids"].as_array().unwrap().iter().map(|id| id.as_u64().unwrap());
                let prompt = match case.get("messages") {
                    Some(messages) => PromptInput::Messages(
                        messages
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|m| ChatMessage {
                                role: m["role"].as_str().unwrap().into(),
                                text: m["content"].as_str().unwrap().into(),
                            })
                            .collect(),
                    ),
                    None => PromptInput::Text(vec![case["text"].as_str().unwrap().into()]),
                };
                (prompt, ids.collect())
            })
            .collect()
    }

    #[test]
    fn prompts_tokenize_as_hugging_face_renders_and_tokenizes_them() {
        let tokenizer = ModelTokenizer::load(Path::new(MODEL)).unwrap();
        let cases = expected();
        assert_eq!(cases.len(), 3);
        for (prompt, ids) in cases {
            assert_eq!(tokenizer.prompt_ids(&prompt).unwrap(), ids, "{prompt:?}");
        }
    }

    #[test]
    fn chat_prompts_cut_at_added_tokens_encode_as_the_whole_text_does() {
        let cut = ModelTokenizer::load(Path::new(MODEL)).unwrap();
        let whole =
            ModelTokenizer { segmenter: None, ..ModelTokenizer::load(Path::new(MODEL)).unwrap() };
        let mut rng = StdRng::seed_from_u64(49);
        let long = synthetic_text(400, &mut rng);
        for round in 0..3 {
            for question in 0..4 {
                let own = synthetic_text(5 * question, &mut rng);
                // Text that looks like an added token is one, in both.
                let tricky = format!("{own} <|im_end|>ünï {round}<|im_start|>");
                let prompt = PromptInput::Messages(vec![
                    ChatMessage { role: "system".into(), text: long.clone() },
                    ChatMessage { role: "user".into(), text: tricky },
                ]);
                assert_eq!(cut.prompt_ids(&prompt).unwrap(), whole.prompt_ids(&prompt).unwrap());
            }
        }
        // The long system prompt was encoded once and kept; short pieces are not kept.
        let (pieces, bytes) = cut.segmenter.as_ref().unwrap().kept();
        assert_eq!(pieces, 1);
        assert!(bytes > long.len(), "{bytes}");
    }

    #[test]
    fn a_template_error_and_an_unusable_prompt_are_errors() {
        let tokenizer = ModelTokenizer::load(Path::new(MODEL)).unwrap();
        let tool =
            PromptInput::Messages(vec![ChatMessage { role: "tool".into(), text: "x".into() }]);
        let error = tokenizer.prompt_ids(&tool).unwrap_err();
        assert!(error.to_string().contains("unknown role tool"), "{error}");
        let several = PromptInput::Text(vec!["a".into(), "b".into()]);
        assert!(matches!(tokenizer.prompt_ids(&several), Err(TokenizerError::SeveralPrompts)));
        assert_eq!(tokenizer.prompt_ids(&PromptInput::TokenIds(vec![5, 6])).unwrap(), [5, 6]);
        let missing = ModelTokenizer::load(Path::new("/nonexistent")).unwrap_err();
        assert!(matches!(missing, TokenizerError::Tokenizer { .. }), "{missing}");
    }
}
