//! Token ids of prompt segments already seen. A tokenizer cuts its input at its added
//! tokens (`<|im_start|>`, `<|eot_id|>`, ...) before anything else and encodes each piece
//! between them on its own, so a rendered chat prompt's ids are its pieces' ids with the
//! added tokens' ids between them. Prompts that share a prefix (a system prompt, a
//! document, a conversation's earlier turns) share those pieces: each long piece is
//! encoded once and its ids kept, up to a byte budget (oldest first out).
//!
//! Used only where it is exact: an added token that strips the spaces around it, must be a
//! whole word, or is matched after normalization would make the cut differ from the
//! tokenizer's; a tokenizer with one such token is not cut (see [`Segmenter::of`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use parking_lot::Mutex;

/// Pieces shorter than this are encoded each time: cheap, and too many to keep.
const MIN_CACHED_BYTES: usize = 256;
/// What the cache may hold: each piece's text and its ids.
const BUDGET_BYTES: usize = 32 << 20;

/// A tokenizer's added tokens as cut points, and the ids of long pieces seen.
pub struct Segmenter {
    added: AhoCorasick,
    /// The id of each pattern of `added`.
    ids: Vec<u32>,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    ids: HashMap<Arc<str>, Arc<[u32]>>,
    order: VecDeque<Arc<str>>,
    bytes: usize,
}

impl Segmenter {
    /// The segmenter of `tokenizer`, if cutting at its added tokens is exactly what it does.
    pub fn of(tokenizer: &tokenizers::Tokenizer) -> Option<Self> {
        let added = tokenizer.get_added_tokens_decoder();
        let mut tokens: Vec<(u32, String)> = Vec::new();
        for (&id, token) in &added {
            if token.lstrip || token.rstrip || token.single_word {
                return None;
            }
            if !token.normalized {
                tokens.push((id, token.content.clone()));
            }
        }
        if tokens.is_empty() {
            return None;
        }
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(tokens.iter().map(|(_, content)| content))
            .ok()?;
        let ids = tokens.iter().map(|&(id, _)| id).collect();
        Some(Self { added: automaton, ids, cache: Mutex::default() })
    }

    /// The ids of `text`: added tokens as their ids, every piece between them by `encode`
    /// (or as kept from before).
    pub fn encode<E>(
        &self,
        text: &str,
        mut encode: impl FnMut(&str) -> Result<Vec<u32>, E>,
    ) -> Result<Vec<u32>, E> {
        let mut ids = Vec::with_capacity(text.len() / 3);
        let mut start = 0;
        for found in self.added.find_iter(text) {
            self.piece(&text[start..found.start()], &mut ids, &mut encode)?;
            ids.push(self.ids[found.pattern().as_usize()]);
            start = found.end();
        }
        self.piece(&text[start..], &mut ids, &mut encode)?;
        Ok(ids)
    }

    fn piece<E>(
        &self,
        piece: &str,
        ids: &mut Vec<u32>,
        encode: &mut impl FnMut(&str) -> Result<Vec<u32>, E>,
    ) -> Result<(), E> {
        if piece.is_empty() {
            return Ok(());
        }
        if piece.len() < MIN_CACHED_BYTES {
            ids.extend(encode(piece)?);
            return Ok(());
        }
        if let Some(kept) = self.cache.lock().ids.get(piece).cloned() {
            ids.extend_from_slice(&kept);
            return Ok(());
        }
        let encoded: Arc<[u32]> = encode(piece)?.into();
        ids.extend_from_slice(&encoded);
        self.cache.lock().keep(piece.into(), encoded);
        Ok(())
    }

    /// Pieces kept, and the bytes they take.
    #[cfg(test)]
    pub fn kept(&self) -> (usize, usize) {
        let cache = self.cache.lock();
        (cache.ids.len(), cache.bytes)
    }
}

impl Cache {
    fn keep(&mut self, piece: Arc<str>, ids: Arc<[u32]>) {
        let bytes = piece.len() + 4 * ids.len();
        if bytes > BUDGET_BYTES || self.ids.contains_key(&piece) {
            return;
        }
        while self.bytes + bytes > BUDGET_BYTES {
            let Some(oldest) = self.order.pop_front() else { break };
            if let Some(gone) = self.ids.remove(&oldest) {
                self.bytes -= oldest.len() + 4 * gone.len();
            }
        }
        self.order.push_back(piece.clone());
        self.ids.insert(piece, ids);
        self.bytes += bytes;
    }
}
