//! Workloads whose requests share prompt prefixes, for prefix caches and the routers that
//! use them: shared-prefix groups `sp_g16_p6000_q1200_o100`, a hot prefix
//! `hot_p4000_q500_o100_h50`, and multi-turn conversations `mt_c8_t6_i500_o100` (run by
//! [`super::conversation`]).
//!
//! # Prompts
//! Every text is drawn from the seed, so two runs (and two targets) get the same bytes, and
//! a shared context is byte-equal in every request that carries it: a real vLLM hits its
//! cache on it as the simulator does. A request is a system message holding the shared
//! context and a user message holding its own question (for `/v1/completions`, the two
//! texts one after the other), so its prompt is `p + q` tokens under the shared estimator.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::tokens::{CHAT_TOKENS_PER_MESSAGE, synthetic_text};

use super::workload::{MAX_TOKENS_PER_REQUEST, Shape, WorkloadError, number};

const MAX_GROUPS: u64 = 1_000_000;
const MAX_CONCURRENCY: u64 = 100_000;
const MAX_REQUESTS: u64 = 10_000_000;
const MAX_TURNS: u64 = 1000;

/// Which requests share which prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Sharing {
    /// Each request carries the context of one of this many groups, drawn evenly.
    Groups(u64),
    /// This percentage of requests carries one hot context; every other one is unique.
    Hot { percent: u64 },
}

/// A shared-prefix workload: `sp_gG_pP_qQ_oO` or `hot_pP_qQ_oO[_hH]`, each with optional
/// `_cN` (concurrency) and `_rN` (requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PrefixSpec {
    pub sharing: Sharing,
    /// Tokens of the shared context (with its message's template tokens).
    pub prefix_tokens: u64,
    /// Tokens of each request's own question (with its message's template tokens).
    pub question_tokens: u64,
    pub output_tokens: u64,
    pub concurrency: Option<usize>,
    pub requests: Option<u64>,
}

/// Multi-turn conversations: `mt_cC_tT_iI_oO`. C conversations run at once, each sends T
/// turns one after another; turn k's prompt is the conversation so far (every earlier user
/// message and the answer the target gave to it) plus a new user message of I tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ConversationSpec {
    pub conversations: u64,
    pub turns: u64,
    pub message_tokens: u64,
    pub output_tokens: u64,
}

/// One shared-prefix request: its context (and which one it is) and its question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixPrompt {
    /// The context's identity: a group number, or `None` for a unique one.
    pub group: Option<u64>,
    pub context: String,
    pub question: String,
}

/// The `letter -> number` fields of an underscore-separated spec after its `kind_` head.
fn fields(
    spec: &str,
    allowed: &'static str,
    max: impl Fn(char) -> (&'static str, u64),
) -> Result<Vec<(char, u64)>, WorkloadError> {
    let mut found = Vec::new();
    for part in spec.split('_').skip(1) {
        let mut chars = part.chars();
        let letter = chars.next().filter(|letter| allowed.contains(*letter));
        let Some(letter) = letter else {
            return Err(WorkloadError::UnknownField {
                spec: spec.to_string(),
                part: part.to_string(),
                expected: allowed,
            });
        };
        let (name, limit) = max(letter);
        found.push((letter, number(spec, part, name, chars.as_str(), limit)?));
    }
    Ok(found)
}

fn required(spec: &str, found: &[(char, u64)], letter: char) -> Result<u64, WorkloadError> {
    optional(found, letter).ok_or(WorkloadError::MissingField { spec: spec.to_string(), letter })
}

fn optional(found: &[(char, u64)], letter: char) -> Option<u64> {
    found.iter().rev().find(|(l, _)| *l == letter).map(|(_, value)| *value)
}

fn limits(letter: char) -> (&'static str, u64) {
    match letter {
        'g' => ("groups", MAX_GROUPS),
        'c' => ("concurrency", MAX_CONCURRENCY),
        'r' => ("requests", MAX_REQUESTS),
        't' => ("turns", MAX_TURNS),
        'h' => ("hot percentage", 100),
        'p' => ("prefix tokens", MAX_TOKENS_PER_REQUEST),
        'q' => ("question tokens", MAX_TOKENS_PER_REQUEST),
        'i' => ("message tokens", MAX_TOKENS_PER_REQUEST),
        _ => ("output tokens", MAX_TOKENS_PER_REQUEST),
    }
}

/// Parses `sp_...` and `hot_...`.
pub fn parse_prefix(spec: &str) -> Result<PrefixSpec, WorkloadError> {
    let hot = spec.starts_with("hot_");
    let found = fields(spec, if hot { "pqohcr" } else { "gpqocr" }, limits)?;
    let sharing = if hot {
        Sharing::Hot { percent: optional(&found, 'h').unwrap_or(50) }
    } else {
        Sharing::Groups(required(spec, &found, 'g')?)
    };
    Ok(PrefixSpec {
        sharing,
        prefix_tokens: required(spec, &found, 'p')?,
        question_tokens: required(spec, &found, 'q')?,
        output_tokens: required(spec, &found, 'o')?,
        concurrency: optional(&found, 'c').map(|c| c as usize),
        requests: optional(&found, 'r'),
    })
}

/// Parses `mt_...`.
pub fn parse_conversations(spec: &str) -> Result<ConversationSpec, WorkloadError> {
    let found = fields(spec, "ctio", limits)?;
    Ok(ConversationSpec {
        conversations: required(spec, &found, 'c')?,
        turns: required(spec, &found, 't')?,
        message_tokens: required(spec, &found, 'i')?,
        output_tokens: required(spec, &found, 'o')?,
    })
}

/// A seeded generator for one stream of text: `(seed, what, which)` never collide.
pub fn text_rng(seed: u64, what: u64, which: u64) -> StdRng {
    let mut mixer = StdRng::seed_from_u64(seed ^ what.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    StdRng::seed_from_u64(mixer.random::<u64>() ^ which)
}

const CONTEXT_TEXT: u64 = 1;
const UNIQUE_CONTEXT_TEXT: u64 = 2;
const QUESTION_TEXT: u64 = 3;
const PICK: u64 = 4;

impl PrefixSpec {
    /// Every request's shape: the context and question together.
    pub fn shape(&self) -> Shape {
        Shape {
            input_tokens: self.prefix_tokens + self.question_tokens,
            output_tokens: self.output_tokens,
        }
    }

    /// The prompt of request `index` under `seed`.
    pub fn prompt(&self, seed: u64, index: u64) -> PrefixPrompt {
        let mut pick = text_rng(seed, PICK, index);
        let group = match self.sharing {
            Sharing::Groups(groups) => Some(pick.random_range(0..groups)),
            Sharing::Hot { percent } => (pick.random_range(0..100) < percent).then_some(0),
        };
        let context_tokens = self.prefix_tokens.saturating_sub(CHAT_TOKENS_PER_MESSAGE);
        let mut context_rng = match group {
            Some(group) => text_rng(seed, CONTEXT_TEXT, group),
            None => text_rng(seed, UNIQUE_CONTEXT_TEXT, index),
        };
        let question_tokens = self.question_tokens.saturating_sub(CHAT_TOKENS_PER_MESSAGE);
        PrefixPrompt {
            group,
            context: synthetic_text(context_tokens, &mut context_rng),
            question: synthetic_text(question_tokens, &mut text_rng(seed, QUESTION_TEXT, index)),
        }
    }
}
