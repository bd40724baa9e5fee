//! The prompt-length estimator shared by the simulator, the gateway's classifier and the
//! load generator, so that all three agree on what "a 1000-token prompt" means.
//!
//! # The estimator
//! `tokens(text) = ceil(ascii_bytes / 4) + non_ascii_chars`.
//!
//! Four ASCII bytes per token is the usual rule of thumb for English BPE vocabularies
//! (Llama, Qwen, GPT); a non-ASCII character (CJK, emoji) is counted as one token, which
//! is close for CJK and an over-count for accented Latin text. It is an estimate: the exact
//! count needs the model's tokenizer, which the gateway can be given (`tokenizer.json`).
//! Synthetic prompts made by [`synthetic_text`] hit the asked count exactly under this rule.

use rand::Rng;

/// Estimated tokens in a piece of prompt text.
pub fn estimate_text_tokens(text: &str) -> u64 {
    let mut ascii_bytes: u64 = 0;
    let mut non_ascii_chars: u64 = 0;
    for &byte in text.as_bytes() {
        if byte.is_ascii() {
            ascii_bytes += 1;
        } else if byte & 0b1100_0000 != 0b1000_0000 {
            // A UTF-8 leading byte starts a new character; continuation bytes do not.
            non_ascii_chars += 1;
        }
    }
    ascii_bytes.div_ceil(4) + non_ascii_chars
}

/// Tokens the chat template adds around every message (role markers, separators).
pub const CHAT_TOKENS_PER_MESSAGE: u64 = 4;

/// The words synthetic prompts are built from: each is three letters, and with its trailing
/// space exactly four ASCII bytes, so one word is one estimated token.
const WORDS: &[&str] = &[
    "the", "and", "for", "you", "are", "not", "but", "all", "any", "can", "her", "was", "one",
    "our", "out", "day", "get", "has", "him", "his", "how", "man", "new", "now", "old", "see",
    "two", "way", "who", "boy", "did", "its", "let", "put", "say", "she", "too", "use",
];

/// Word `n` (wrapping) of the synthetic vocabulary: one estimated token with its space, so
/// generated output re-estimates to the count of tokens it stands for.
pub fn synthetic_word(n: u64) -> &'static str {
    WORDS[(n % WORDS.len() as u64) as usize]
}

/// Synthetic prompt text of exactly `tokens` estimated tokens, drawn from `rng` so that a
/// seeded generator makes the same prompts every run.
pub fn synthetic_text(tokens: u64, rng: &mut impl Rng) -> String {
    let mut text = String::with_capacity(tokens as usize * 4);
    for _ in 0..tokens {
        text.push_str(WORDS[rng.random_range(0..WORDS.len())]);
        text.push(' ');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn ascii_counts_four_bytes_per_token_rounding_up() {
        assert_eq!(estimate_text_tokens(""), 0);
        assert_eq!(estimate_text_tokens("abc"), 1);
        assert_eq!(estimate_text_tokens("abcd"), 1);
        assert_eq!(estimate_text_tokens("abcde"), 2);
    }

    #[test]
    fn non_ascii_characters_count_one_each() {
        // Three CJK characters (three bytes each) and two ASCII bytes.
        assert_eq!(estimate_text_tokens("日本語ab"), 3 + 1);
    }

    #[test]
    fn synthetic_text_hits_the_asked_count_and_is_seeded() {
        for tokens in [0, 1, 7, 1000, 9000] {
            let text = synthetic_text(tokens, &mut StdRng::seed_from_u64(7));
            assert_eq!(estimate_text_tokens(&text), tokens);
        }
        let a = synthetic_text(50, &mut StdRng::seed_from_u64(1));
        let b = synthetic_text(50, &mut StdRng::seed_from_u64(1));
        let c = synthetic_text(50, &mut StdRng::seed_from_u64(2));
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
