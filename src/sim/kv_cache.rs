//! The engine's KV-cache accounting, in tokens: what running requests reserve privately,
//! plus the blocks of the prefix cache ([`PrefixCache`]).
//!
//! # Accounting
//! A request is admitted when its reservation fits: `prompt + max_tokens` tokens, less the
//! prompt blocks it finds cached (those are shared, only referenced). When its first chunk
//! is scheduled it looks again, and references the blocks cached since. As each chunk is
//! scheduled, the full prompt blocks it covers move from its private reservation into the
//! prefix cache, still referenced by it (vLLM caches a block when it allocates it, so a
//! request scheduled later in the same step already hits it); when it ends, its private
//! tokens are freed and its blocks become evictable. Cached blocks that nothing references do not block admission: they are
//! evicted (least recently released first) to make room. So at every moment
//! `private + 16 x cached_blocks <= capacity`, and the usage reported (vLLM's
//! `kv_cache_usage_perc`) counts only what running requests hold.
//!
//! # vLLM's cap on hits
//! The engine recomputes at least the prompt's last token, so a hit covers at most
//! `floor((prompt - 1) / block_size)` blocks: a fully cached prompt still prefills its last
//! partial block, or its whole last block when the prompt fills its blocks exactly.

use super::prefix_cache::PrefixCache;
use super::profile::EngineProfile;

/// What one running request holds.
#[derive(Debug, Default)]
pub struct SequenceBlocks {
    /// The chained hashes of its prompt's full blocks.
    hashes: Vec<u64>,
    /// Hashes of the cached blocks it references, in prompt order.
    held: Vec<u64>,
    /// Blocks of `hashes` already looked at (hit at admission, or computed since).
    settled: usize,
    /// Tokens reserved outside the prefix cache.
    private: u64,
}

/// A request's admission: its blocks, the prompt tokens served from the cache, and the
/// cached blocks evicted to make room for it.
#[derive(Debug)]
pub struct Admission {
    pub blocks: SequenceBlocks,
    pub cached_tokens: u64,
    /// The hashes of the blocks evicted, in eviction order.
    pub evicted: Vec<u64>,
}

/// One replica's KV cache.
#[derive(Debug)]
pub struct KvCache {
    capacity: u64,
    block_size: u64,
    /// Tokens reserved by running requests outside the prefix cache.
    private: u64,
    /// `None` when prefix caching is off.
    prefix: Option<PrefixCache>,
}

impl KvCache {
    pub fn new(profile: &EngineProfile) -> Self {
        Self {
            capacity: profile.kv_cache_tokens,
            block_size: profile.block_size.max(1),
            private: 0,
            prefix: profile.enable_prefix_caching.then(PrefixCache::new),
        }
    }

    /// Reserves space for a request with these prompt block hashes and lengths, if it fits
    /// (evicting unreferenced cached blocks as needed); `None` if it does not fit now.
    pub fn admit(&mut self, hashes: &[u64], prompt: u64, max_tokens: u64) -> Option<Admission> {
        let size = self.block_size;
        let max_hit = self.max_hit_blocks(prompt);
        let (hit, newly_referenced) = match &self.prefix {
            Some(cache) => {
                let hit = cache.longest_hit(hashes, max_hit);
                (hit, cache.evictable_among(&hashes[..hit]))
            }
            None => (0, 0),
        };
        let cached_tokens = hit as u64 * size;
        let private = prompt + max_tokens - cached_tokens;
        let referenced = self.referenced_blocks() + newly_referenced;
        if self.private + referenced * size + private > self.capacity {
            return None;
        }
        let held = hashes[..hit].to_vec();
        if let Some(cache) = &mut self.prefix {
            cache.acquire(&held);
        }
        self.private += private;
        let evicted = self.evict_to_fit();
        let blocks = SequenceBlocks { hashes: hashes.to_vec(), held, settled: hit, private };
        Some(Admission { blocks, cached_tokens, evicted })
    }

    /// Extends a request's hit, as it is scheduled its first prompt chunk, with the leading
    /// blocks cached since its admission, those another request is computing in this very
    /// step included (vLLM caches a full block when it allocates it, "so that the block can
    /// be reused by other requests in the same batch"). Returns the prompt tokens added.
    pub fn extend_hit(&mut self, blocks: &mut SequenceBlocks, prompt: u64) -> u64 {
        let max_hit = self.max_hit_blocks(prompt);
        let Some(cache) = &mut self.prefix else { return 0 };
        let hit = cache.longest_hit(&blocks.hashes, max_hit);
        if hit <= blocks.settled || blocks.held.len() != blocks.settled {
            return 0;
        }
        let found = &blocks.hashes[blocks.settled..hit];
        cache.acquire(found);
        blocks.held.extend_from_slice(found);
        let tokens = found.len() as u64 * self.block_size;
        blocks.settled = hit;
        // Referencing cached blocks never takes more room than the private tokens freed.
        blocks.private -= tokens;
        self.private -= tokens;
        tokens
    }

    /// The most leading blocks a prompt of `prompt` tokens can hit (vLLM's cap, above).
    fn max_hit_blocks(&self, prompt: u64) -> usize {
        (prompt.saturating_sub(1) / self.block_size) as usize
    }

    /// Moves the full prompt blocks a request computes up to `prefilled` tokens into the
    /// prefix cache, as its chunk is scheduled. Returns the indexes (into the prompt's
    /// blocks) of those it cached: not the ones another request cached first, of which it
    /// keeps its own copy.
    pub fn prefilled(&mut self, blocks: &mut SequenceBlocks, prefilled: u64) -> Vec<usize> {
        let Some(cache) = &mut self.prefix else { return Vec::new() };
        let full = ((prefilled / self.block_size) as usize).min(blocks.hashes.len());
        let mut cached = Vec::new();
        for index in blocks.settled.min(full)..full {
            let hash = blocks.hashes[index];
            if cache.insert(hash) {
                blocks.held.push(hash);
                blocks.private -= self.block_size;
                self.private -= self.block_size;
                cached.push(index);
            }
        }
        blocks.settled = blocks.settled.max(full);
        cached
    }

    /// Frees a finished or aborted request's reservation; its blocks stay cached.
    pub fn release(&mut self, blocks: SequenceBlocks) {
        self.private -= blocks.private;
        if let Some(cache) = &mut self.prefix {
            cache.release(&blocks.held);
        }
    }

    /// Tokens running requests hold (their reservations and the blocks they reference).
    pub fn used_tokens(&self) -> u64 {
        self.private + self.referenced_blocks() * self.block_size
    }

    /// Cached blocks, referenced or not.
    pub fn cached_blocks(&self) -> u64 {
        self.prefix.as_ref().map_or(0, PrefixCache::blocks)
    }

    /// Whether a block with this hash is cached.
    pub fn is_cached(&self, hash: u64) -> bool {
        self.prefix.as_ref().is_some_and(|cache| cache.contains(hash))
    }

    fn referenced_blocks(&self) -> u64 {
        self.prefix.as_ref().map_or(0, |cache| cache.blocks() - cache.evictable_blocks())
    }

    /// Evicts unreferenced blocks until the cache fits; returns their hashes.
    fn evict_to_fit(&mut self) -> Vec<u64> {
        let Some(cache) = &mut self.prefix else { return Vec::new() };
        let mut evicted = Vec::new();
        while self.private + cache.blocks() * self.block_size > self.capacity {
            match cache.evict_one() {
                Some(hash) => evicted.push(hash),
                None => break,
            }
        }
        evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::prefix_cache::block_hashes;
    use crate::sim::profile::Profile;

    fn cache(capacity: u64) -> KvCache {
        let mut profile = Profile::built_in("tiny").unwrap().engine;
        profile.kv_cache_tokens = capacity;
        KvCache::new(&profile)
    }

    /// The block hashes of a prompt of `tokens` tokens whose ids start at `first`.
    fn prompt(first: u64, tokens: u64) -> Vec<u64> {
        block_hashes(&(first..first + tokens).collect::<Vec<_>>(), 16)
    }

    /// Admits, prefills and finishes one request; returns its cached tokens.
    fn serve(kv: &mut KvCache, hashes: &[u64], tokens: u64, max_tokens: u64) -> u64 {
        let mut admission = kv.admit(hashes, tokens, max_tokens).expect("fits");
        kv.prefilled(&mut admission.blocks, tokens);
        kv.release(admission.blocks);
        admission.cached_tokens
    }

    #[test]
    fn finished_prompts_stay_cached_and_are_evicted_least_recent_first() {
        let mut kv = cache(200);
        let (a, b, c) = (prompt(0, 64), prompt(1000, 64), prompt(2000, 100));
        assert_eq!(serve(&mut kv, &a, 64, 16), 0);
        assert_eq!(serve(&mut kv, &b, 64, 16), 0);
        assert_eq!((kv.cached_blocks(), kv.used_tokens()), (8, 0), "cached, not in use");

        // 130 tokens do not fit beside 128 cached ones in 200, but unreferenced blocks do
        // not block admission: four are evicted, all of the prompt released first.
        let running = kv.admit(&c, 100, 30).expect("evictable blocks make room");
        assert_eq!(kv.cached_blocks(), 4);
        assert_eq!(running.evicted, [a[3], a[2], a[1], a[0]], "named, tail first");
        assert!(a.iter().all(|&hash| !kv.is_cached(hash)));
        assert!(b.iter().all(|&hash| kv.is_cached(hash)));
        kv.release(running.blocks);

        // B is hit up to its last full block before its last token; A is gone.
        assert_eq!(serve(&mut kv, &b, 64, 16), 48);
        assert_eq!(serve(&mut kv, &a, 64, 16), 0);
    }

    #[test]
    fn a_tail_is_evicted_before_its_head() {
        let mut kv = cache(200);
        let a = prompt(0, 128);
        serve(&mut kv, &a, 128, 8);
        // A 100 + 20 token request needs 120 of 200: three of A's eight blocks must go.
        let running = kv.admit(&prompt(5000, 100), 100, 20).unwrap();
        let kept: Vec<bool> = a.iter().map(|&hash| kv.is_cached(hash)).collect();
        assert_eq!(kept, [true, true, true, true, true, false, false, false]);
        kv.release(running.blocks);
        assert_eq!(serve(&mut kv, &a, 128, 8), 5 * 16, "the surviving head is still a hit");
    }

    #[test]
    fn referenced_blocks_hold_their_space() {
        let mut kv = cache(200);
        let a = prompt(0, 64);
        let mut running = kv.admit(&a, 64, 16).unwrap();
        kv.prefilled(&mut running.blocks, 64);
        assert_eq!(kv.used_tokens(), 80);
        assert!(kv.admit(&prompt(1000, 100), 100, 21).is_none(), "121 > 200 - 80");
        // A second request on the same prompt shares the blocks instead of reserving them.
        let shared = kv.admit(&a, 64, 16).unwrap();
        assert_eq!(shared.cached_tokens, 48);
        assert_eq!(kv.used_tokens(), 80 + (64 - 48 + 16));
    }

    #[test]
    fn a_request_admitted_beside_another_hits_the_blocks_that_one_is_scheduled_to_compute() {
        let mut kv = cache(1000);
        let a = prompt(0, 100);
        let mut first = kv.admit(&a, 100, 10).unwrap();
        let mut second = kv.admit(&a, 100, 10).unwrap();
        assert_eq!((first.cached_tokens, second.cached_tokens), (0, 0), "nothing cached yet");
        assert_eq!(kv.used_tokens(), 220);
        // The first is scheduled a 40-token chunk: its two full blocks are cached at once.
        assert_eq!(kv.prefilled(&mut first.blocks, 40), [0, 1]);
        assert_eq!(kv.extend_hit(&mut second.blocks, 100), 32);
        assert_eq!(kv.used_tokens(), 220 - 32, "shared blocks are held once");
        // Both compute the rest: the blocks the first caches are the second's own copies.
        assert_eq!(kv.prefilled(&mut first.blocks, 100), [2, 3, 4, 5]);
        assert!(kv.prefilled(&mut second.blocks, 100).is_empty(), "cached by the first");
        kv.release(first.blocks);
        kv.release(second.blocks);
        assert_eq!((kv.used_tokens(), kv.cached_blocks()), (0, 6));
        // Scheduled later, a request gets every cached block up to its last token's.
        let mut third = kv.admit(&prompt(0, 96), 96, 10).unwrap();
        assert_eq!(third.cached_tokens, 80, "capped before the last token");
        assert_eq!(kv.extend_hit(&mut third.blocks, 96), 0);
        kv.release(third.blocks);
    }

    #[test]
    fn without_prefix_caching_nothing_is_shared() {
        let mut profile = Profile::built_in("tiny").unwrap().engine;
        profile.enable_prefix_caching = false;
        let mut kv = KvCache::new(&profile);
        let a = prompt(0, 64);
        assert_eq!(serve(&mut kv, &a, 64, 16), 0);
        assert_eq!(serve(&mut kv, &a, 64, 16), 0);
        assert_eq!((kv.cached_blocks(), kv.used_tokens()), (0, 0));
    }
}
