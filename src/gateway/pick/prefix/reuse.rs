//! How much of the recent prompts this gateway placed was expected cached where they went
//! ([`RecentReuse`]): the traffic's prefix reuse, over prompts of at least one full block (a
//! shorter one has nothing to cache). Where most of it was, a prompt new to every replica is
//! likely the first of a group that will follow it (a shared context's first request, a
//! conversation's first turn), and the replica it goes to becomes that group's home; where
//! little was (distinct prompts), it is likely asked once.
//!
//! `prefix_latency` reads it before measuring a replica again with a new prompt
//! ([`super::policy`]): on three real replicas, two sharing a core and four times slower at
//! prefill, the first requests of 13 of 24 shared contexts (three rounds of 8) were sent to
//! measure a slower replica again, and every later request of those contexts hit there, each
//! slower than on the fast replica.

use std::sync::atomic::{AtomicU64, Ordering};

/// About how many prompts the share is taken over: each placement weighs `1 / WINDOW`.
const WINDOW: f64 = 32.0;

/// From this mean share on, a new prompt is expected to be followed: a group of k requests
/// whose first computes its prefix and whose later ones hit it averages about (k - 1) / k,
/// a half once each new prefix is asked for again.
const FOLLOWED_FROM: f64 = 0.5;

/// The decayed mean, over placed prompts, of the share of each one's tokens expected cached.
#[derive(Debug)]
pub struct RecentReuse {
    /// The share, as the bits of an `f64`.
    share_bits: AtomicU64,
}

impl Default for RecentReuse {
    /// Before any placement no reuse is known: a fresh gateway measures replicas again with
    /// new prompts, which is how it learns a slower replica's speed in its first seconds,
    /// until its traffic shows that its prefixes are reused.
    fn default() -> Self {
        Self { share_bits: AtomicU64::new(0.0f64.to_bits()) }
    }
}

impl RecentReuse {
    /// A prompt of `prompt_tokens` was placed where `cached_tokens` of it were expected.
    pub fn observe(&self, cached_tokens: u64, prompt_tokens: u64) {
        if prompt_tokens == 0 {
            return;
        }
        let placed = (cached_tokens.min(prompt_tokens) as f64) / prompt_tokens as f64;
        let _ = self.share_bits.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            let share = f64::from_bits(bits);
            Some((share + (placed - share) / WINDOW).to_bits())
        });
    }

    /// The decayed mean share of a placed prompt's tokens expected cached, 0 to 1.
    pub fn share(&self) -> f64 {
        f64::from_bits(self.share_bits.load(Ordering::Relaxed))
    }

    /// Whether a prompt new to every replica is expected to be followed by others that
    /// share its prefix.
    pub fn new_prompts_are_followed(&self) -> bool {
        self.share() >= FOLLOWED_FROM
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_contexts_bring_the_share_up_and_distinct_prompts_bring_it_down() {
        let reuse = RecentReuse::default();
        assert!(!reuse.new_prompts_are_followed(), "no reuse known before any placement");
        // A shared 3,000-token context asked for again and again: its first request
        // computes everything, each later one hits all but its 100-token question. From the
        // 23rd later one (0.968 * (1 - (31/32)^23) >= 0.5), new prompts are expected to be
        // followed.
        reuse.observe(0, 3100);
        let shared = (0..).take_while(|_| {
            reuse.observe(3000, 3100);
            !reuse.new_prompts_are_followed()
        });
        assert_eq!(shared.count(), 22);
        for _ in 0..40 {
            reuse.observe(3000, 3100);
        }
        // Then distinct 500-token prompts, only a 16-token chat template cached: the 18th
        // brings the share under a half again (0.032 + (0.837 - 0.032) * (31/32)^18 < 0.5).
        let distinct = (0..).take_while(|_| {
            reuse.observe(16, 500);
            reuse.new_prompts_are_followed()
        });
        assert_eq!(distinct.count(), 17);
    }

    #[test]
    fn a_prompt_of_no_tokens_changes_nothing() {
        let reuse = RecentReuse::default();
        reuse.observe(0, 100);
        let share = reuse.share();
        reuse.observe(0, 0);
        assert_eq!(reuse.share(), share);
        // Cached tokens past the prompt's count as the whole prompt.
        reuse.observe(500, 100);
        assert!(reuse.share() > share && reuse.share() <= 1.0);
    }
}
