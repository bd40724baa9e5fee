//! Self-correction: each prefix-aware request carries its prediction (the blocks the index
//! expected its replica to hold) to the end of its response, where the replica's
//! `usage.prompt_tokens_details.cached_tokens` says what it really held.
//!
//! Both figures are counted (`laneway_prefix_tokens_total{source}`), over the same
//! requests. A report short of the prediction means the replica evicted the block of the
//! prompt where its report ends; it evicts least recently used first, so every entry the
//! index holds for that replica that was last used before that block is taken as gone and
//! dropped. The missed blocks themselves stay: the request just computed them again.
//!
//! The report is in the engine's tokens, the prediction in the index's. So the report is
//! scaled by the prompt's two lengths (the engine's `usage.prompt_tokens` against the
//! index's count), and it is short only when it misses by more than what the engine may
//! round away: one of its caching units ([`super::cache_granularity`]) and
//! [`COUNT_SLACK`] of the prediction for where two tokenizations place a boundary. An
//! engine of 128-token blocks reports a 2,416-token prompt prefix as 2,304 cached; read as
//! an eviction, every such hit dropped the other prompts' entries on that replica.
//!
//! A miss is not always an eviction: a block placed by a request still prefilling when
//! this one arrived was not computed yet. So only a block the index no longer marked
//! computing when this request was placed (its placement's first token had come) counts as
//! evicted.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::PrefixRouter;
use super::index::Placed;
use crate::gateway::pick::replica::Replica;

/// The share of a prediction a report may miss by, beyond one caching unit, and not be an
/// eviction: two tokenizations of one text place a boundary a few tokens apart.
pub const COUNT_SLACK: f64 = 1.0 / 16.0;

/// What a placement expects of its replica.
pub struct Prediction {
    /// What the index held before.
    pub placed: Placed,
    /// The block hashes this request computes (the index had none of them there).
    pub created: Vec<u64>,
    pub block_size: u64,
    /// The prompt's length as the index counts it.
    pub prompt_tokens: u64,
    /// Tokens added to the replica's owed prefill, released at the first token.
    pub owed: u64,
}

/// One request's prediction, until its replica reports.
pub struct PrefixFeedback {
    router: Arc<PrefixRouter>,
    replica: Arc<Replica>,
    placed: Placed,
    created: Vec<u64>,
    block_size: u64,
    prompt_tokens: u64,
    owed: u64,
    prefill_pending: bool,
}

impl PrefixFeedback {
    pub(super) fn new(
        router: Arc<PrefixRouter>,
        replica: Arc<Replica>,
        prediction: Prediction,
    ) -> Self {
        let Prediction { placed, created, block_size, prompt_tokens, owed } = prediction;
        Self {
            router,
            replica,
            placed,
            created,
            block_size,
            prompt_tokens,
            owed,
            prefill_pending: true,
        }
    }

    /// Tokens the index predicted as cached.
    pub fn predicted_tokens(&self) -> u64 {
        self.placed.matched as u64 * self.block_size
    }

    /// The first token came: this request's prefill is no longer queued on the replica.
    pub fn prefill_done(&mut self) {
        if !std::mem::replace(&mut self.prefill_pending, false) {
            return;
        }
        let owed = std::mem::take(&mut self.owed);
        self.replica.load.prefill_owed_tokens.fetch_sub(owed, Ordering::Relaxed);
        self.router.index.computed(&self.replica.name, &std::mem::take(&mut self.created));
    }

    /// The replica reported `cached_tokens` of the `engine_prompt_tokens` it counted in
    /// this request's prompt.
    pub fn report(&mut self, cached_tokens: u64, engine_prompt_tokens: u64) {
        self.prefill_done();
        let tokens = &self.router.metrics.tokens;
        let predicted = self.predicted_tokens();
        tokens.with_label_values(&["predicted"]).inc_by(predicted);
        tokens.with_label_values(&["reported"]).inc_by(cached_tokens);
        let unit = self.replica.cache_granularity.observe(cached_tokens);
        // The engine's tokens as the index counts them.
        let scale = match engine_prompt_tokens {
            0 => 1.0,
            engine => self.prompt_tokens as f64 / engine as f64,
        };
        let reported = cached_tokens as f64 * scale;
        let slack = unit as f64 * scale + COUNT_SLACK * predicted as f64;
        if reported + slack >= predicted as f64 {
            return;
        }
        let reported_blocks = (reported / self.block_size.max(1) as f64) as usize;
        if let Some(evicted) = self.placed.previous.get(reported_blocks)
            && !evicted.computing
        {
            let (index, metrics) = (&self.router.index, &self.router.metrics);
            let dropped = index.evicted_before(&self.replica.name, evicted.tick);
            metrics.corrected.inc_by(dropped as u64);
            metrics.index_bytes.set(index.bytes() as i64);
            if let Some(fill) = index.fill(&self.replica.name) {
                let name = self.replica.name.as_str();
                let gauge = |figure: &str| metrics.cache_blocks.with_label_values(&[name, figure]);
                gauge("learned_capacity").set(fill.capacity as i64);
                gauge("resident").set(fill.resident as i64);
            }
        }
    }
}

impl Drop for PrefixFeedback {
    /// Released without a first token (an error, a client gone): the owed prefill is no
    /// longer queued, and its blocks stop counting as computing (they may be cached or
    /// not; a later report says which).
    fn drop(&mut self) {
        if std::mem::replace(&mut self.prefill_pending, false) {
            self.replica.load.prefill_owed_tokens.fetch_sub(self.owed, Ordering::Relaxed);
            self.router.index.computed(&self.replica.name, &self.created);
        }
    }
}
