//! A debug trace of every prompt placement, at target `laneway::placement`: per candidate
//! the blocks it holds of the prompt, its cost and what the cost was made of (its own
//! in-flight requests, the engine's reported running and waiting, the prefill this gateway
//! knows is queued there, how late its waiting streams are, the prefill speed the pick read
//! for it: learned, its engine's by the pick's reading, or configured), and
//! the replica chosen; and, before a conversation's turn contends away from its home,
//! which rule let it. Built only when enabled (`RUST_LOG=info,laneway::placement=debug`;
//! it then also takes each candidate's model lock for its sample count), so a pick pays
//! nothing for it otherwise. It answers "why did this request miss its cache?" request by
//! request.

use std::fmt::Write;
use std::sync::Arc;

use super::PromptKey;
use super::index::Held;
use crate::gateway::pick::policy::PickContext;
use crate::gateway::pick::replica::Replica;

/// Whether the trace is on.
pub fn enabled() -> bool {
    tracing::enabled!(target: "laneway::placement", tracing::Level::DEBUG)
}

/// One candidate as [`fastest`](super::cost::fastest) scored it.
#[derive(Debug, Clone, Copy)]
pub struct Scored {
    pub replica: usize,
    pub held: Held,
    /// Its estimated TTFT, in microseconds.
    pub ttft_us: f64,
    /// What recomputing blocks another candidate holds was charged, in microseconds.
    pub recompute_us: f64,
    /// The prefill speed the pick read for it, in microseconds a token.
    pub prefill_us_per_token: f64,
}

impl Scored {
    /// What the pick weighs: the TTFT and the recompute charge.
    pub fn cost_us(&self) -> f64 {
        self.ttft_us + self.recompute_us
    }
}

/// Writes the trace of one pick that chose `chosen`.
pub fn emit(
    replicas: &[Arc<Replica>],
    key: &PromptKey,
    scored: &[Scored],
    chosen: usize,
    context: &PickContext,
) {
    let mut candidates = String::new();
    for s in scored {
        let replica = &replicas[s.replica];
        let reported = replica
            .load
            .fresh_report(context.epoch, context.now, context.fresh_for)
            .map_or_else(|| "-".to_string(), |r| format!("{}+{}", r.running, r.waiting));
        let _ = write!(
            candidates,
            "{}{} held={}{} ttft={:.1}ms recompute={:.1}ms in_flight={} reported={} ahead={} \
             late={:.2} slope={:.1}us samples={}",
            if candidates.is_empty() { "" } else { "; " },
            replica.name,
            s.held.blocks,
            if s.held.computing { "(computing)" } else { "" },
            s.ttft_us / 1e3,
            s.recompute_us / 1e3,
            replica.load.in_flight(),
            reported,
            replica.latency.ahead_of_next(),
            replica.latency.late_factor(context.now),
            s.prefill_us_per_token,
            replica.latency.samples().0,
        );
    }
    write_line(&replicas[chosen], "fastest", key, &candidates);
}

/// Writes the trace of a pick that chose `chosen` to measure it again (it holds as much of
/// the prompt as any candidate and had no request of its size for a while).
pub fn emit_measured_again(
    replicas: &[Arc<Replica>],
    key: &PromptKey,
    candidates: &[usize],
    held: &[Held],
    chosen: usize,
) {
    let mut holding = String::new();
    for (&i, held) in candidates.iter().zip(held) {
        let separator = if holding.is_empty() { "" } else { "; " };
        let _ = write!(holding, "{separator}{} held={}", replicas[i].name, held.blocks);
    }
    write_line(&replicas[chosen], "measure_again", key, &holding);
}

/// Writes why a conversation's turn contends among several replicas: its `home`, where
/// bounded load sends it, where this gateway last placed it, and the replica far faster
/// alone, with each candidate's time alone as [`super::conversation`] judged it. A turn
/// that moved shows here which rule let it.
pub fn emit_contenders(
    replicas: &[Arc<Replica>],
    (home, bounded, last, faster): (usize, usize, Option<usize>, Option<usize>),
    candidates: &[(usize, Option<f64>)],
) {
    let name = |i: Option<usize>| i.map_or("-", |i| replicas[i].name.as_str());
    let mut alone = String::new();
    for &(i, alone_us) in candidates {
        let separator = if alone.is_empty() { "" } else { "; " };
        let us = alone_us.map_or_else(|| "-".to_string(), |us| format!("{:.1}ms", us / 1e3));
        let _ = write!(alone, "{separator}{} alone={us}", replicas[i].name);
    }
    tracing::debug!(
        target: "laneway::placement",
        home = replicas[home].name.as_str(),
        bounded = replicas[bounded].name.as_str(),
        last = name(last),
        faster = name(faster),
        alone,
        "conversation contends"
    );
}

fn write_line(chosen: &Replica, reason: &str, key: &PromptKey, candidates: &str) {
    tracing::debug!(
        target: "laneway::placement",
        chosen = chosen.name.as_str(),
        reason,
        prompt_tokens = key.prompt_tokens,
        session = key.session.is_some(),
        candidates,
        "placed"
    );
}
