//! vLLM's automatic prefix caching, as a table of KV blocks keyed by chained block hashes.
//!
//! # The model
//! - A prompt is cut into blocks of `block_size` tokens; only full blocks are cached, keyed
//!   by their chained hash ([`block_hashes`], shared with the gateway's prefix index).
//! - A block is referenced by every running request that uses it. A block no request
//!   references stays cached (its hash still answers lookups) but is evictable: when space
//!   is needed, the least recently released evictable block goes first.
//! - A request releases its blocks last to first, so a prompt's tail is evicted before its
//!   head (vLLM frees blocks in reverse order for the same reason: a prefix is only useful
//!   from the start).

use std::collections::{BTreeMap, HashMap};

pub use crate::prompt_tokens::block_hashes;

#[derive(Debug, Clone, Copy)]
struct Block {
    /// Running requests using the block.
    refs: u32,
    /// When it was last released (orders the evictable blocks).
    released_at: u64,
}

/// The cached blocks of one replica, with their references and eviction order.
#[derive(Debug, Default)]
pub struct PrefixCache {
    blocks: HashMap<u64, Block>,
    /// Unreferenced blocks by release tick, oldest first.
    evictable: BTreeMap<u64, u64>,
    tick: u64,
}

impl PrefixCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Blocks held, referenced or not.
    pub fn blocks(&self) -> u64 {
        self.blocks.len() as u64
    }

    /// Blocks no running request references.
    pub fn evictable_blocks(&self) -> u64 {
        self.evictable.len() as u64
    }

    /// Whether a block with this hash is cached.
    pub fn contains(&self, hash: u64) -> bool {
        self.blocks.contains_key(&hash)
    }

    /// How many of the leading `hashes` are cached, at most `max_blocks`.
    pub fn longest_hit(&self, hashes: &[u64], max_blocks: usize) -> usize {
        hashes.iter().take(max_blocks).take_while(|hash| self.blocks.contains_key(hash)).count()
    }

    /// Of `hashes` (all cached), how many are evictable now.
    pub fn evictable_among(&self, hashes: &[u64]) -> u64 {
        hashes.iter().filter(|hash| self.blocks.get(hash).is_some_and(|b| b.refs == 0)).count()
            as u64
    }

    /// References cached blocks for a request (they stop being evictable).
    pub fn acquire(&mut self, hashes: &[u64]) {
        for hash in hashes {
            if let Some(block) = self.blocks.get_mut(hash) {
                if block.refs == 0 {
                    self.evictable.remove(&block.released_at);
                }
                block.refs += 1;
            }
        }
    }

    /// Caches a block a request just computed, referenced by it. Returns false (and caches
    /// nothing) when the hash is already cached: the request keeps its own copy.
    pub fn insert(&mut self, hash: u64) -> bool {
        if self.blocks.contains_key(&hash) {
            return false;
        }
        self.blocks.insert(hash, Block { refs: 1, released_at: 0 });
        true
    }

    /// Drops a request's references, last block first; unreferenced blocks become
    /// evictable, the most recently released last.
    pub fn release(&mut self, hashes: &[u64]) {
        for hash in hashes.iter().rev() {
            let Some(block) = self.blocks.get_mut(hash) else { continue };
            block.refs = block.refs.saturating_sub(1);
            if block.refs == 0 {
                self.tick += 1;
                block.released_at = self.tick;
                self.evictable.insert(self.tick, *hash);
            }
        }
    }

    /// Evicts the least recently released unreferenced block; returns its hash.
    pub fn evict_one(&mut self) -> Option<u64> {
        let (_, hash) = self.evictable.pop_first()?;
        self.blocks.remove(&hash);
        Some(hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_hashes_chain_over_full_blocks() {
        let tokens: Vec<u64> = (0..40).collect();
        let hashes = block_hashes(&tokens, 16);
        assert_eq!(hashes.len(), 2, "the 8-token tail has no hash");
        // A block's hash depends on the blocks before it: the same 16 tokens at the start
        // and after another block hash differently.
        let repeated: Vec<u64> = (0..16).chain(0..16).collect();
        let chain = block_hashes(&repeated, 16);
        assert_ne!(chain[0], chain[1]);
        // Changing one token of block 0 changes every later hash; block 1's own tokens
        // only change block 1 onwards.
        let mut edited = tokens.clone();
        edited[3] = 99;
        let after = block_hashes(&edited, 16);
        assert!(after.iter().zip(&hashes).all(|(a, b)| a != b));
        let mut late = tokens.clone();
        late[20] = 99;
        let after = block_hashes(&late, 16);
        assert_eq!(after[0], hashes[0]);
        assert_ne!(after[1], hashes[1]);
        assert_eq!(block_hashes(&tokens, 16), hashes, "deterministic");
    }

    #[test]
    fn referenced_blocks_are_never_evicted_and_release_order_is_lru() {
        let mut cache = PrefixCache::new();
        for hash in [1, 2, 3, 4] {
            assert!(cache.insert(hash));
        }
        assert!(!cache.insert(2), "a cached hash is not cached twice");
        assert_eq!(cache.evict_one(), None, "every block is referenced");
        cache.release(&[1, 2]);
        cache.release(&[3, 4]);
        // Released tail first within each request, requests in release order.
        let order: Vec<u64> = std::iter::from_fn(|| cache.evict_one()).collect();
        assert_eq!(order, vec![2, 1, 4, 3]);
        assert_eq!(cache.blocks(), 0);
    }

    #[test]
    fn a_hit_makes_blocks_recently_used_again() {
        let mut cache = PrefixCache::new();
        for hash in [1, 2, 3] {
            cache.insert(hash);
        }
        cache.release(&[1]);
        cache.release(&[2]);
        cache.release(&[3]);
        assert_eq!(cache.longest_hit(&[1, 2, 9], 3), 2);
        assert_eq!(cache.longest_hit(&[1, 2, 3], 1), 1);
        cache.acquire(&[1]);
        assert_eq!(cache.evictable_blocks(), 2);
        cache.release(&[1]);
        let order: Vec<u64> = std::iter::from_fn(|| cache.evict_one()).collect();
        assert_eq!(order, vec![2, 3, 1]);
    }
}
