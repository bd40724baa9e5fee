//! The simulated tokenizer and KV-block hashes, shared by the simulator (which caches
//! blocks) and the gateway (which predicts where they are cached): turns a request's
//! rendered prompt into token ids, so that equal prompt prefixes give equal token prefixes
//! (what prefix caching keys on), with exactly as many tokens as the shared estimator
//! counts (`src/tokens.rs`), and cuts them into chained block hashes.
//!
//! # Tokens
//! - Text: every run of four ASCII bytes is one token (the bytes packed into its id) and
//!   every non-ASCII character is one token; the ASCII bytes left over at the end of a text
//!   make one more. That is `ceil(ascii_bytes / 4) + non_ascii_chars`, the estimator's count.
//! - Chat: each message is rendered as a template would, in order: a start marker, its
//!   role, its text, an end marker and a separator (the estimator's 4 tokens per message).
//! - Completion text prompts are tokenized as given (several strings one after another);
//!   token-id prompts are their ids.
//! - An empty prompt is one beginning-of-sequence token, as the engine counts it.
//!
//! # Blocks
//! A prompt is cut into blocks of `block_size` tokens; only full blocks have a hash. The
//! hash of block `i` covers its tokens and the hash of block `i - 1`, so equal hashes mean
//! equal prompts from the first token up to the block's end.

use crate::openai::PromptInput;

/// Ids of the special tokens live above every text token id (text ids stay below 2^40).
const SPECIAL: u64 = 1 << 48;
const BEGIN_OF_SEQUENCE: u64 = SPECIAL;
const MESSAGE_START: u64 = SPECIAL + 1;
const MESSAGE_END: u64 = SPECIAL + 2;
const MESSAGE_SEPARATOR: u64 = SPECIAL + 3;
/// Role tokens: a hash of the role name in this range.
const ROLE: u64 = 2 << 48;
/// Non-ASCII characters: their code point in this range.
const CHARACTER: u64 = 1 << 40;

/// The hash every chain starts from.
const CHAIN_ROOT: u64 = 0x6c61_6e65_7761_7900;

/// A 64-bit finaliser (splitmix64's): cheap, and every input bit moves every output bit.
pub fn mix(mut value: u64) -> u64 {
    value = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    value = (value ^ (value >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    value = (value ^ (value >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    value ^ (value >> 31)
}

/// The chained hashes of the full blocks of `tokens` (a trailing partial block has none).
pub fn block_hashes(tokens: &[u64], block_size: usize) -> Vec<u64> {
    let mut parent = CHAIN_ROOT;
    tokens
        .chunks_exact(block_size.max(1))
        .map(|block| {
            parent = block.iter().fold(mix(parent), |hash, &token| mix(hash ^ token));
            parent
        })
        .collect()
}

/// The prompt's token ids; their count is the estimator's (at least 1).
pub fn prompt_token_ids(prompt: &PromptInput) -> Vec<u64> {
    let mut tokens = Vec::new();
    match prompt {
        PromptInput::Messages(messages) => {
            for message in messages {
                tokens.push(MESSAGE_START);
                tokens.push(role_token(&message.role));
                text_tokens(&message.text, &mut tokens);
                tokens.push(MESSAGE_END);
                tokens.push(MESSAGE_SEPARATOR);
            }
        }
        PromptInput::Text(texts) => {
            for text in texts {
                text_tokens(text, &mut tokens);
            }
        }
        PromptInput::TokenIds(ids) => tokens.extend_from_slice(ids),
    }
    if tokens.is_empty() {
        tokens.push(BEGIN_OF_SEQUENCE);
    }
    tokens
}

/// Appends the tokens of one text: four ASCII bytes or one other character each.
fn text_tokens(text: &str, tokens: &mut Vec<u64>) {
    let mut piece: u64 = 0;
    let mut bytes = 0;
    for character in text.chars() {
        if character.is_ascii() {
            piece = piece << 8 | character as u64;
            bytes += 1;
            if bytes == 4 {
                tokens.push(ascii_token(piece, bytes));
                (piece, bytes) = (0, 0);
            }
        } else {
            tokens.push(CHARACTER | character as u64);
        }
    }
    if bytes > 0 {
        tokens.push(ascii_token(piece, bytes));
    }
}

/// An ASCII piece's id: its bytes and their count, so "a" and "\0a" differ.
fn ascii_token(piece: u64, bytes: u64) -> u64 {
    bytes << 32 | piece
}

fn role_token(role: &str) -> u64 {
    let hash = role.bytes().fold(0u64, |hash, byte| mix(hash ^ u64::from(byte)));
    ROLE | (hash & (SPECIAL - 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::request::Endpoint;
    use crate::openai::{ChatMessage, InferenceRequest};

    fn chat(messages: &[(&str, &str)]) -> PromptInput {
        PromptInput::Messages(
            messages
                .iter()
                .map(|(role, text)| ChatMessage { role: role.to_string(), text: text.to_string() })
                .collect(),
        )
    }

    #[test]
    fn counts_match_the_estimator() {
        let bodies: &[(Endpoint, &str)] = &[
            (Endpoint::Chat, r#"{"messages":[{"role":"user","content":"abcdefgh"}]}"#),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"system","content":"ab日cd"},{"role":"user","content":""}]}"#,
            ),
            (Endpoint::Chat, r#"{"messages":[{}]}"#),
            (Endpoint::Completions, r#"{"prompt":"ab日本語cde"}"#),
            (Endpoint::Completions, r#"{"prompt":["abcd","ab"]}"#),
            (Endpoint::Completions, r#"{"prompt":""}"#),
            (Endpoint::Completions, r#"{"prompt":[[1,2],[3]]}"#),
        ];
        for (endpoint, body) in bodies {
            let request = InferenceRequest::parse(*endpoint, body.as_bytes()).unwrap();
            let count = prompt_token_ids(&request.prompt).len() as u64;
            assert_eq!(count, request.prompt_tokens().max(1), "{body}");
        }
    }

    #[test]
    fn tokens_are_deterministic_and_equal_prefixes_give_equal_tokens() {
        let shared = "the and for you ".repeat(40);
        let first = chat(&[("system", &shared), ("user", "one question")]);
        let second = chat(&[("system", &shared), ("user", "another question")]);
        let (a, b) = (prompt_token_ids(&first), prompt_token_ids(&second));
        assert_eq!(a, prompt_token_ids(&first));
        // The system message (4 template tokens around 160 text tokens) is shared, and so
        // are the user message's start and role tokens.
        let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        assert_eq!(common, 4 + 160 + 2);
    }

    #[test]
    fn roles_and_order_matter() {
        let user = prompt_token_ids(&chat(&[("user", "abcd")]));
        let system = prompt_token_ids(&chat(&[("system", "abcd")]));
        assert_ne!(user, system);
        let ab = prompt_token_ids(&chat(&[("user", "aaaa"), ("user", "bbbb")]));
        let ba = prompt_token_ids(&chat(&[("user", "bbbb"), ("user", "aaaa")]));
        assert_ne!(ab, ba);
    }
}
