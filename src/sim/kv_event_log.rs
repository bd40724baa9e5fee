//! The engine's prefix-cache changes, step by step, as the KV-cache events vLLM publishes
//! ([`crate::kv_events::wire::Event`]); [`super::kv_events`] sends them.
//!
//! The simulator keys its cache by its own cheap chained hashes ([`super::prefix_cache`]);
//! the events name blocks as vLLM does, by the `sha256_cbor` chain of the same token ids
//! ([`BlockHasher`], seed [`DEFAULT_SEED`]). A request brings both ([`PromptEventBlocks`],
//! hashed on its API worker), and the log remembers the event hash of every block while it
//! is cached, so that an eviction, which the cache reports by its own hash, names the block
//! as the store did.
//!
//! As vLLM does: one `BlockStored` per run of consecutive blocks a request caches in a step
//! (its token ids, `parent` the block before the run, `None` for a prompt's first block), one
//! `BlockRemoved` per evicted block, evictions first (the engine evicts to make room for the
//! blocks it then fills).

use std::collections::HashMap;

use crate::kv_events::block_hash::{BlockHasher, DEFAULT_SEED};
use crate::kv_events::wire::Event;

/// A prompt's full blocks as the events name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptEventBlocks {
    /// The event hash of each full block, in prompt order.
    hashes: Vec<u64>,
    /// The prompt's token ids up to the end of its last full block.
    token_ids: Vec<u64>,
}

impl PromptEventBlocks {
    /// Hashes the full blocks of `token_ids` (the ids the simulator caches,
    /// [`crate::prompt_tokens::prompt_token_ids`]) with vLLM's default seed.
    pub fn new(mut token_ids: Vec<u64>, block_size: u64) -> Self {
        let block_size = block_size.max(1) as usize;
        let hashes = BlockHasher::new(DEFAULT_SEED).event_hashes(&token_ids, block_size);
        token_ids.truncate(hashes.len() * block_size);
        Self { hashes, token_ids }
    }

    /// The event hashes of the full blocks, in prompt order.
    pub fn hashes(&self) -> &[u64] {
        &self.hashes
    }
}

/// One engine's events since its last step, and the event hash of each block it caches.
#[derive(Debug)]
pub struct KvEventLog {
    block_size: u64,
    /// The event hash of every cached block, by the simulator's hash of it: an entry per
    /// block the cache holds, added when it is cached and taken out when it is evicted, so
    /// never more than the cache's `kv_cache_tokens / block_size`.
    event_hashes: HashMap<u64, u64>,
    pending: Vec<Event>,
}

impl KvEventLog {
    pub fn new(block_size: u64) -> Self {
        Self { block_size: block_size.max(1), event_hashes: HashMap::new(), pending: Vec::new() }
    }

    /// Records that the blocks at `newly_cached` (ascending indexes into the prompt's full
    /// blocks) were just cached; `cache_hashes` are the simulator's hashes of the same
    /// blocks.
    pub fn stored(
        &mut self,
        cache_hashes: &[u64],
        prompt: &PromptEventBlocks,
        newly_cached: &[usize],
    ) {
        let size = self.block_size as usize;
        let known = cache_hashes.len().min(prompt.hashes.len());
        let newly_cached: Vec<usize> =
            newly_cached.iter().copied().filter(|&i| i < known).collect();
        for run in newly_cached.chunk_by(|before, after| before + 1 == *after) {
            let (first, end) = (run[0], run[run.len() - 1] + 1);
            let pairs = cache_hashes[first..end].iter().zip(&prompt.hashes[first..end]);
            self.event_hashes.extend(pairs.map(|(&cache_hash, &hash)| (cache_hash, hash)));
            self.pending.push(Event::Stored {
                hashes: prompt.hashes[first..end].to_vec(),
                parent: first.checked_sub(1).map(|before| prompt.hashes[before]),
                token_ids: prompt.token_ids[first * size..end * size].to_vec(),
                block_size: self.block_size as u32,
                keyed: false,
            });
        }
    }

    /// Records that the blocks with these simulator hashes were evicted.
    pub fn evicted(&mut self, cache_hashes: &[u64]) {
        for cache_hash in cache_hashes {
            if let Some(hash) = self.event_hashes.remove(cache_hash) {
                self.pending.push(Event::Removed { hashes: vec![hash] });
            }
        }
    }

    /// The events recorded since the last call, in order.
    pub fn take(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.pending)
    }

    /// Blocks cached now, as far as the events said.
    pub fn cached_blocks(&self) -> usize {
        self.event_hashes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt_tokens::block_hashes;

    fn prompt(first_token: u64, tokens: u64) -> (Vec<u64>, PromptEventBlocks) {
        let ids: Vec<u64> = (first_token..first_token + tokens).collect();
        (block_hashes(&ids, 4), PromptEventBlocks::new(ids, 4))
    }

    #[test]
    fn a_prompt_is_hashed_as_the_engine_hashes_it_over_its_full_blocks() {
        let ids: Vec<u64> = (100..111).collect();
        let blocks = PromptEventBlocks::new(ids.clone(), 4);
        assert_eq!(blocks.hashes(), BlockHasher::new(DEFAULT_SEED).event_hashes(&ids, 4));
        assert_eq!(blocks.hashes().len(), 2);
        assert_eq!(blocks.token_ids, ids[..8], "the partial last block is left out");
    }

    #[test]
    fn each_run_of_new_blocks_is_one_store_chained_to_the_block_before_it() {
        let (cache_hashes, blocks) = prompt(0, 20);
        let mut log = KvEventLog::new(4);
        // Blocks 0 and 1, then 3 and 4 (block 2 was cached already, by another request).
        log.stored(&cache_hashes, &blocks, &[0, 1, 3, 4]);
        let events = log.take();
        let event_hashes = blocks.hashes();
        assert_eq!(
            events,
            [
                Event::Stored {
                    hashes: event_hashes[..2].to_vec(),
                    parent: None,
                    token_ids: (0..8).collect(),
                    block_size: 4,
                    keyed: false,
                },
                Event::Stored {
                    hashes: event_hashes[3..5].to_vec(),
                    parent: Some(event_hashes[2]),
                    token_ids: (12..20).collect(),
                    block_size: 4,
                    keyed: false,
                },
            ]
        );
        assert!(log.take().is_empty(), "taken once");
        assert_eq!(log.cached_blocks(), 4);
    }

    #[test]
    fn an_eviction_names_the_block_by_the_hash_it_was_stored_under() {
        let (cache_hashes, blocks) = prompt(0, 12);
        let mut log = KvEventLog::new(4);
        log.stored(&cache_hashes, &blocks, &[0, 1, 2]);
        log.take();
        log.evicted(&[cache_hashes[2], cache_hashes[1], 12345]);
        let removed = [blocks.hashes()[2], blocks.hashes()[1]]
            .map(|hash| Event::Removed { hashes: vec![hash] });
        assert_eq!(log.take(), removed, "one event per block; an unknown block is no event");
        assert_eq!(log.cached_blocks(), 1, "the map holds only what is cached");
    }
}
