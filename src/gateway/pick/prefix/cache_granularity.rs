//! The unit a replica's engine caches prompts in, learned from its reports: the greatest
//! common divisor of every non-zero `cached_tokens` it has reported. vLLM caches whole
//! KV blocks (16 tokens on GPUs, 128 on its CPU backend) and reports a multiple of the
//! block; SGLang caches single tokens. Its reports soon have no common divisor but the
//! block, and stay there.
//!
//! Until two reports differ, the divisor is one report's whole count, so it is read capped
//! at [`LARGEST_UNIT`] tokens: a replica that served one cached prompt over and over must
//! not hide a whole eviction as rounding.
//!
//! Why it matters: a report up to one unit short of the index's prediction is the engine
//! rounding down to its block, not an eviction ([`super::feedback`]). Without it, every
//! hit on a 128-token engine read as an eviction when the index counted 16-token blocks,
//! and dropped every other prompt's entries older than the hit's tail.

use std::sync::atomic::{AtomicU64, Ordering};

/// The largest unit read: above any block size vLLM takes (128 on its CPU backend, 16 by
/// default on GPUs).
pub const LARGEST_UNIT: u64 = 256;

/// One replica's learned caching unit, in its engine's tokens (0 while unknown).
#[derive(Debug, Default)]
pub struct CacheGranularity {
    tokens: AtomicU64,
}

impl CacheGranularity {
    /// Learns from one report and returns the unit, at most [`LARGEST_UNIT`]: 0 until a
    /// non-zero report came.
    pub fn observe(&self, cached_tokens: u64) -> u64 {
        if cached_tokens != 0 {
            let _ = self.tokens.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |unit| {
                let next = greatest_common_divisor(unit, cached_tokens);
                (next != unit).then_some(next)
            });
        }
        self.tokens()
    }

    /// The unit learned so far, at most [`LARGEST_UNIT`] (0 while unknown).
    pub fn tokens(&self) -> u64 {
        self.tokens.load(Ordering::Relaxed).min(LARGEST_UNIT)
    }
}

/// Euclid's; `gcd(0, n)` is `n`.
fn greatest_common_divisor(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_in_whole_blocks_teach_the_block_and_a_token_level_cache_teaches_one() {
        let blocks = CacheGranularity::default();
        assert_eq!(blocks.observe(0), 0, "a miss teaches nothing");
        assert_eq!(blocks.observe(2304), LARGEST_UNIT, "one report: capped");
        assert_eq!(blocks.observe(2944), 128);
        assert_eq!(blocks.observe(0), 128);
        assert_eq!(blocks.observe(3072), 128, "a multiple of the block keeps it");
        let tokens = CacheGranularity::default();
        tokens.observe(2304);
        assert_eq!(tokens.observe(2305), 1);
        assert_eq!(tokens.tokens(), 1);
    }
}
