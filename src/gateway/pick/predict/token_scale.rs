//! How many of its engine's tokens a replica counts for each prompt token this gateway
//! counts, learned from the `usage.prompt_tokens` of its answers.
//!
//! The gateway counts a prompt's tokens by approximation (`prompt_tokens`), and its latency
//! models learn and predict in those; the engine's prefill counters
//! ([`super::engine_speed`]) give seconds per token of the model's own tokenizer. On the
//! real `tiny` model the engine counts 2,450 tokens where the gateway counts 1,575, and its
//! 80 us a token, read as 80 us a counted token, made every prefill ahead look a third
//! cheaper than it was once the engine's slope replaced the gateway's own.

use std::sync::atomic::{AtomicU64, Ordering};

/// Prompts shorter than this (as the gateway counts them) teach nothing: a chat template's
/// few tokens would dominate their ratio.
const MIN_COUNTED: u64 = 64;
/// Weight of each new ratio: the last ~20 answers count most.
const WEIGHT: f64 = 0.05;

/// The learned ratio; 1 until an answer reports its count.
#[derive(Debug, Default)]
pub struct TokenScale {
    /// Engine tokens per counted token, as `f64` bits; 0 (the default): none learned yet.
    engine_per_counted_bits: AtomicU64,
}

impl TokenScale {
    /// Engine tokens per counted token: 1 until learned.
    pub fn engine_per_counted(&self) -> f64 {
        match f64::from_bits(self.engine_per_counted_bits.load(Ordering::Relaxed)) {
            ratio if ratio > 0.0 => ratio,
            _ => 1.0,
        }
    }

    /// An answer reported `engine` prompt tokens for a prompt the gateway counted as
    /// `counted`.
    pub fn observe(&self, counted: u64, engine: u64) {
        if counted < MIN_COUNTED || engine == 0 {
            return;
        }
        let ratio = engine as f64 / counted as f64;
        let _ = self.engine_per_counted_bits.fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            |bits| {
                let old = f64::from_bits(bits);
                let new = if old > 0.0 { old + WEIGHT * (ratio - old) } else { ratio };
                Some(new.to_bits())
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_is_learned_from_answers_long_enough_to_tell() {
        let scale = TokenScale::default();
        assert_eq!(scale.engine_per_counted(), 1.0);
        // A template's few tokens on a short prompt say nothing.
        scale.observe(10, 40);
        assert_eq!(scale.engine_per_counted(), 1.0);
        scale.observe(1575, 2450);
        assert!((scale.engine_per_counted() - 2450.0 / 1575.0).abs() < 1e-12);
        // Later answers move it a little each, toward what they say.
        for _ in 0..200 {
            scale.observe(1000, 1200);
        }
        assert!((scale.engine_per_counted() - 1.2).abs() < 1e-3, "{}", scale.engine_per_counted());
        scale.observe(1000, 0);
        assert!((scale.engine_per_counted() - 1.2).abs() < 1e-3);
    }

    #[test]
    fn the_engines_slope_is_read_per_counted_token() {
        use crate::gateway::pick::predict::{EngineReading, EngineWork, LatencyEstimate};
        let estimate = LatencyEstimate::default();
        let mut work = EngineWork::default();
        let mut at = std::time::Instant::now();
        estimate.observe_engine_work(work, at);
        // A window of four prefills of 1,000 uncached engine tokens, 80 ms each, one at a
        // time (a window a minute).
        let mut close_window = || {
            work.prefill_seconds += 4.0 * 0.08;
            work.prefills += 4.0;
            work.computed_tokens += 4000.0;
            at += std::time::Duration::from_secs(60);
            estimate.observe_engine_work(work, at);
        };
        for _ in 0..3 {
            close_window();
        }
        let slope = || estimate.ttft_slope(EngineReading::Fitted);
        assert!((slope() - 80e-6).abs() < 1e-9, "{}", slope());
        // The engine counts 1.5 tokens for each the gateway counts.
        estimate.observe_prompt_count(1000, 1500);
        close_window();
        assert!((slope() - 120e-6).abs() < 1e-9, "{}", slope());
    }
}
