//! The small trait every balancing policy implements.

use std::sync::Arc;
use std::time::Instant;

use super::prefix::PromptPick;
use super::replica::Replica;
use crate::gateway::config::EntrySlo;

/// What a policy may look at besides the replicas.
#[derive(Debug, Clone, Copy)]
pub struct PickContext {
    /// The replica set's time base for scrape ages.
    pub epoch: Instant,
    pub now: Instant,
    /// Reported figures older than this are ignored.
    pub fresh_for: std::time::Duration,
    /// A replica not to pick (the one a retry is moving away from).
    pub exclude: Option<usize>,
}

impl PickContext {
    /// The requests on `replica` as best known now: this gateway's, or its engine's fresh
    /// report of running and waiting ones (every gateway's and client's), whichever is more.
    pub fn requests_on(&self, replica: &Replica) -> u64 {
        replica.load.requests_on(self.epoch, self.now, self.fresh_for)
    }
}

/// What a policy may know of the request itself: its size and the latency it must meet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestShape {
    /// Estimated prompt tokens.
    pub prompt_tokens: u64,
    /// The entry's SLO, tightened by the request's `x-laneway-slo-*` headers.
    pub slo: EntrySlo,
}

/// Chooses one replica among candidates. Implementations must not block or lock: they run
/// on every request.
pub trait Policy: Send + Sync {
    fn name(&self) -> &'static str;

    /// The index of the chosen replica, `None` if no candidate is left.
    fn pick(&self, replicas: &[Arc<Replica>], context: &PickContext) -> Option<usize>;

    /// Whether the policy reads the request's prompt: the request path computes a
    /// [`PromptPick`] (tokens, block hashes, session) only for those that do.
    fn reads_prompts(&self) -> bool {
        false
    }

    /// Picks for a request whose prompt is known; a policy blind to prompts picks by the
    /// request's shape as usual.
    fn pick_prompt(
        &self,
        replicas: &[Arc<Replica>],
        context: &PickContext,
        _prompt: &PromptPick<'_>,
        request: &RequestShape,
    ) -> Option<usize> {
        self.pick_for(replicas, context, request)
    }

    /// As [`Policy::pick`], for a request of known shape; policies blind to requests keep
    /// this default.
    fn pick_for(
        &self,
        replicas: &[Arc<Replica>],
        context: &PickContext,
        _request: &RequestShape,
    ) -> Option<usize> {
        self.pick(replicas, context)
    }
}

/// The candidates left after the exclusion, as indices.
pub(super) fn candidate_count(replicas: &[Arc<Replica>], context: &PickContext) -> usize {
    replicas.len() - usize::from(context.exclude.is_some_and(|i| i < replicas.len()))
}

/// Maps the n-th candidate to its index, skipping the excluded one.
pub(super) fn nth_candidate(n: usize, context: &PickContext) -> usize {
    match context.exclude {
        Some(excluded) if n >= excluded => n + 1,
        _ => n,
    }
}
