//! One request measured on its replica ([`LatencyProbe`]), from the pick to the end of its
//! stream: what it owes the replica's pending prefill, and what it teaches the replica's
//! [`super::LatencyEstimate`] when its first token comes and when it ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::gateway::clock;
use crate::gateway::pick::policy::PickContext;
use crate::gateway::pick::predict::envelope;
use crate::gateway::pick::predict::overdue::Waiting;
use crate::gateway::pick::replica::Replica;

/// When a request's prompt joins its replica's engine queue (see
/// [`super::LatencyEstimate::engine_prefill_tokens`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineEntry {
    /// When the replica answers: a streamed request, answered once preprocessed.
    AtAnswer,
    /// At placement: a request whose answer comes with its whole completion.
    AtPlacement,
}

/// One request measured on its replica, from the pick to the end of its stream: owes its
/// prompt tokens to the replica's pending prefill until its first token (and to its
/// engine's from the time the engine has it), then feeds what it measured back into the
/// replica's estimate.
#[derive(Debug)]
pub struct LatencyProbe {
    replica: Arc<Replica>,
    prompt_tokens: u64,
    /// The engine's prompt tokens ahead of this one when it joined them (`None`: not yet).
    queued_ahead: Option<u64>,
    /// Other requests on the replica when this one was placed: this gateway's, or its
    /// engine's report if that says more ([`PickContext::requests_on`]).
    others: u64,
    /// Whether the engine reported requests this gateway did not send when this one was
    /// placed: their prompts may have been ahead of it, unseen.
    others_unseen: bool,
    /// How reported figures are read when the stream ends.
    context: PickContext,
    predicted_ttft: f64,
    placed_at: Instant,
    /// A streamed request's share of the replica's waiting ones, until its first token.
    waiting: Option<Waiting>,
    prefill_open: bool,
    /// Streams in flight on the replica when this one's first token came.
    decoding_with: Option<u64>,
}

impl LatencyProbe {
    /// Places a request of `prompt_tokens` on `replica` at `context.now`.
    pub fn begin(
        replica: Arc<Replica>,
        prompt_tokens: u64,
        context: &PickContext,
        entry: EngineEntry,
    ) -> Self {
        let now = context.now;
        let estimate = &replica.latency;
        estimate.placements.fetch_add(1, Ordering::Relaxed);
        let size = envelope::bucket(prompt_tokens as f64);
        estimate.last_placed_by_size[size].store(clock::micros_at(now), Ordering::Relaxed);
        // What its pick read, before its own tokens join the pending ones. Read as the
        // engine's part only, the last prompts of a burst were predicted one prefill each,
        // and a replica serving the burst at its modelled pace looked several times late.
        let ahead = estimate.ahead_of_next();
        estimate.pending_prefill_tokens.fetch_add(prompt_tokens, Ordering::Relaxed);
        // The request's own in-flight guard is already held; the engine has not seen it.
        let own_others = replica.load.in_flight().saturating_sub(1);
        let reported = replica.load.fresh_report(context.epoch, now, context.fresh_for);
        let engine_others = reported.map_or(0, |r| r.running + r.waiting);
        let others = own_others.max(engine_others);
        let others_unseen = engine_others > own_others;
        let predicted_ttft = estimate.predict(ahead, prompt_tokens, others + 1).ttft;
        // Against the model's own prediction, not a scaled one: a late replica's new
        // requests would otherwise excuse the lateness of those before them.
        let waiting =
            (entry == EngineEntry::AtAnswer).then(|| estimate.overdue.enter(now, predicted_ttft));
        let mut probe = Self {
            replica,
            prompt_tokens,
            queued_ahead: None,
            others,
            others_unseen,
            context: *context,
            predicted_ttft,
            placed_at: now,
            waiting,
            prefill_open: true,
            decoding_with: None,
        };
        if entry == EngineEntry::AtPlacement {
            probe.answered();
        }
        probe
    }

    pub fn replica(&self) -> &Arc<Replica> {
        &self.replica
    }

    /// The replica answered: the prompt is in its engine, behind what is queued there now.
    /// Once; nothing after the first token.
    pub fn answered(&mut self) {
        if self.prefill_open && self.queued_ahead.is_none() {
            let engine = &self.replica.latency.engine_prefill_tokens;
            self.queued_ahead = Some(engine.fetch_add(self.prompt_tokens, Ordering::Relaxed));
        }
    }

    /// The first token came at `now`: the prefill model learns, and the prediction's
    /// error `|predicted - measured| / measured` is returned (once).
    pub fn first_token(&mut self, now: Instant) -> Option<f64> {
        // A first token is an answer too, should none have been seen.
        self.answered();
        let queued_ahead = self.queued_ahead.unwrap_or(0);
        if !self.close_prefill() {
            return None;
        }
        let ttft = now.saturating_duration_since(self.placed_at);
        self.decoding_with = Some(self.streams_at(now));
        let tokens = (queued_ahead, self.prompt_tokens);
        let alone = queued_ahead == 0 && !self.others_unseen;
        self.replica.latency.observe_prefill(tokens, self.others, alone, ttft);
        let measured = ttft.as_secs_f64();
        self.replica.latency.remeasure.first_token(self.predicted_ttft, measured);
        (measured > 0.0).then(|| (self.predicted_ttft - measured).abs() / measured)
    }

    /// The stream ended complete with `tpot`: the decode model learns, against the mean of
    /// the streams in flight at its first token and at its end (a replica taking on load
    /// while the stream decoded slowed it more than the count at the start says).
    pub fn finished(&mut self, tpot: Duration) {
        if let Some(at_first_token) = self.decoding_with.take() {
            let at_end = self.streams_at(Instant::now());
            let in_flight = (at_first_token + at_end) as f64 / 2.0;
            self.replica.latency.observe_decode(in_flight, tpot);
        }
    }

    /// Streams on the replica at `now`, this one included.
    fn streams_at(&self, now: Instant) -> u64 {
        let context = PickContext { now, ..self.context };
        context.requests_on(&self.replica).max(1)
    }

    /// Gives back the pending prompt tokens; whether they were still owed.
    fn close_prefill(&mut self) -> bool {
        if !std::mem::replace(&mut self.prefill_open, false) {
            return false;
        }
        let estimate = &self.replica.latency;
        if let Some(waiting) = self.waiting.take() {
            estimate.overdue.leave(waiting);
        }
        let owed = self.prompt_tokens;
        give_back(&estimate.pending_prefill_tokens, owed);
        if self.queued_ahead.is_some() {
            give_back(&estimate.engine_prefill_tokens, owed);
        }
        true
    }
}

impl Drop for LatencyProbe {
    fn drop(&mut self) {
        self.close_prefill();
    }
}

/// Takes `tokens` off `counter`, never below zero, even if counts were ever out of step.
fn give_back(counter: &AtomicU64, tokens: u64) {
    let _ = counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(tokens)));
}
