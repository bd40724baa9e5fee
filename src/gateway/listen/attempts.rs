//! The attempts of one classified inference request: admission (a place and a replica, or
//! 429), then up to `retry.max_attempts` sends. Another replica is tried only when the
//! request cannot have run: the connection was refused or closed before the request was
//! written, or the replica answered 503 before any byte went to the client; and only while
//! the retry budget allows. A streamed request its replica has not answered in time is
//! also sent once more ([`super::hedge`]), and the first answer wins. Every outcome of the
//! send that answered feeds passive health, and so does a send that failed while the other
//! answered (a send dropped because the other answered first is not recorded).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::gateway::forward::Sending;
use crate::gateway::forward::upstream_body::UpstreamBody;
use bytes::Bytes;
use http::request::Parts;
use http::{Response, StatusCode};

use super::hedge::{self, Hedged};
use super::hot_copy;
use super::rescue;
use super::respond::{Placed, respond};
use crate::gateway::admission::{AdmissionPermit, HeldBody, Placement};
use crate::gateway::body::{ProxyBody, boxed};
use crate::gateway::config::reliability::NO_REPLICA_LIMIT;
use crate::gateway::context::RequestCtx;
use crate::gateway::error::GatewayError;
use crate::gateway::observe::OverheadPhase;
use crate::gateway::pick::predict::headroom::predicted_for;
use crate::gateway::pick::predict::{EngineEntry, LatencyProbe};
use crate::gateway::pick::prefix::PrefixFeedback;
use crate::gateway::pick::{InFlightGuard, Picker, PromptKey, PromptPick, Replica, RequestShape};
use crate::gateway::state::GatewayState;
use crate::gateway::state::variants::Variant;
use crate::openai::InferenceRequest;
use crate::openai::request::Endpoint;

/// What the attempts send, and where they may send it (the rest is in the context).
pub struct Forwarding<'a> {
    /// The canary variant that serves the request: its pool, policy and connections.
    pub variant: &'a Variant,
    pub parts: &'a Parts,
    pub body: &'a Bytes,
    /// Its size and SLO, for policies that predict latency.
    pub shape: RequestShape,
    /// The replicas serving the request's model (`None`: any).
    pub serving: Option<&'a [String]>,
    /// Streamed: held while its replica has too many unanswered ones.
    pub streams: bool,
}

/// Where one request may go: its variant's replicas serving its model.
struct VariantPlacement<'a> {
    variant: &'a Variant,
    picker: &'a Picker,
    serving: Option<&'a [String]>,
    shape: &'a RequestShape,
    prompt: Option<&'a PromptPick<'a>>,
}

impl Placement for VariantPlacement<'_> {
    fn pick(&self, limit: u64) -> Option<Arc<Replica>> {
        let (picker, serving) = (self.picker, self.serving);
        self.variant.pick_for(picker, serving, None, limit, self.shape, self.prompt)
    }

    fn scope(&self) -> u64 {
        self.variant.scope_for(self.serving)
    }
}

/// Estimated prompt tokens from which the model's tokenizer runs off the async workers.
const TOKENIZE_OFF_THREAD: u64 = 1024;

/// A failed attempt that another replica may take over.
enum Retryable {
    /// 503 before any byte: passed on as is if no retry happens.
    Unavailable(InFlightGuard, Response<UpstreamBody>),
    Refused(GatewayError),
}

pub async fn forward(
    state: &Arc<GatewayState>,
    request: Forwarding<'_>,
    ctx: &mut RequestCtx,
) -> Result<Response<ProxyBody>, GatewayError> {
    let admission = &state.shared.admission;
    let key = prompt_key(state, &request, ctx.prompt_tokens).await;
    let prefix = &state.shared.prefix;
    if let Some(key) = &key {
        prefix.recall_shared(key).await;
    }
    let prompt =
        key.as_ref().map(|key| PromptPick { key, router: prefix, config: &state.config.prefix });
    let placement = VariantPlacement {
        variant: request.variant,
        picker: &state.picker,
        serving: request.serving,
        shape: &request.shape,
        prompt: prompt.as_ref(),
    };
    let (mut guard, permit) = admission.admit_as(&placement, ctx.prompt_tokens, &ctx.flow).await?;
    let mut replica = guard.replica().clone();
    let mut prefix_feedback = key.as_ref().map(|key| prefix.place(&replica, key));
    if let (Some(key), Some(feedback)) = (&key, &prefix_feedback) {
        let hit_tokens = feedback.predicted_tokens();
        hot_copy::after_placement(state, &request, ctx.entry, key, &replica, hit_tokens);
    }
    // A streamed request's prompt reaches the engine when the replica answers.
    let entry = if request.streams { EngineEntry::AtAnswer } else { EngineEntry::AtPlacement };
    // The prefill a request owes its replica is the part of its prompt not cached there:
    // what the replica's latency model predicts with and learns its slope from. Learnt from
    // whole prompts, a fleet that mostly hits taught a slope near zero, and a hit looked worth
    // nothing against load.
    let probe = |replica: &Arc<Replica>, feedback: Option<&PrefixFeedback>| {
        let cached = feedback.map_or(0, PrefixFeedback::predicted_tokens);
        let owed = ctx.prompt_tokens.saturating_sub(cached);
        LatencyProbe::begin(replica.clone(), owed, &state.picker.context(Instant::now()), entry)
    };
    let mut placement = probe(&replica, prefix_feedback.as_ref());
    state.shared.retry_budget.deposit();
    let reliability = &state.config.reliability;
    let connector = &request.variant.connector;
    let mut attempt = 1;
    loop {
        // The response headers are due within `timeouts.first_byte_ms`, a wait for a place
        // among the replica's unanswered streamed requests included (held until it
        // answers): a replica that stops answering holds nobody longer than without one.
        let deadline = connector.first_byte_deadline();
        let unanswered = if request.streams {
            admission.limits().max_unanswered_per_replica
        } else {
            NO_REPLICA_LIMIT
        };
        let metrics = &state.shared.reliability_metrics;
        let (waiting, held) = (&metrics.answer_gate_waiting, &metrics.answer_gate_held);
        let entering = replica.load.answer_gate.enter_counted(unanswered, waiting, held);
        let Ok(answer_place) = tokio::time::timeout_at(deadline, entering).await else {
            // The replica's own requests time out and count against its health; this one
            // never reached it.
            return Err(connector.first_byte_timed_out(&replica));
        };
        state.metrics.record_overhead(OverheadPhase::Request, ctx.received_at);
        let sending = Sending::Buffered(request.parts, request.body.clone());
        let first = connector.send_by(&replica, sending, deadline);
        let hedged = match hedge_after(&request, attempt) {
            None => Hedged::First(first.await, Vec::new()),
            Some(after) => {
                let prompt = prompt.as_ref();
                let prompt_tokens = ctx.prompt_tokens;
                let start = || start_hedge(state, &request, prompt, prompt_tokens, deadline);
                let sent_at = tokio::time::Instant::now();
                let until = sent_at + request.shape.slo.ttft.saturating_sub(after);
                let rescue = rescue_when_freed(state, &request, prompt, (sent_at, until), start);
                hedge::send(first, after, start, rescue).await
            }
        };
        drop(answer_place);
        let (sent, failed_hedges) = match hedged {
            Hedged::First(sent, failed_hedges) => (sent, failed_hedges),
            Hedged::Later(response, (hedge_guard, hedge_probe), first_failed, failed_hedges) => {
                if let Some(error) = first_failed {
                    record_send_failure(state, &replica, &error);
                }
                state.shared.reliability_metrics.hedges.with_label_values(&["won"]).inc();
                replica = hedge_guard.replica().clone();
                prefix_feedback = key.as_ref().map(|key| prefix.place(&replica, key));
                placement = hedge_probe;
                guard = hedge_guard;
                (Ok(response), failed_hedges)
            }
        };
        for ((hedge_guard, _), error) in failed_hedges {
            record_send_failure(state, hedge_guard.replica(), &error);
        }
        let last = attempt >= reliability.retry.max_attempts;
        let retryable = match sent {
            Err(error @ GatewayError::UpstreamTimeout { .. }) => {
                record_send_failure(state, &replica, &error);
                return Err(error);
            }
            Ok(upstream) => {
                replica.load.clear_failures();
                state.health.record_status(&replica, upstream.status());
                if upstream.status() != StatusCode::SERVICE_UNAVAILABLE || last {
                    let placed =
                        Placed { guard, prefix: prefix_feedback, latency: Some(placement) };
                    return Ok(finish(state, ctx, placed, upstream, permit));
                }
                Retryable::Unavailable(guard, upstream)
            }
            Err(error) => {
                drop(guard);
                record_send_failure(state, &replica, &error);
                if !error.retry_allowed() || last {
                    return Err(error);
                }
                Retryable::Refused(error)
            }
        };
        match next_replica(state, &request, ctx.prompt_tokens, &replica) {
            Some(next) => {
                let to = &next.replica().name;
                let request_id = ctx.request_id_text();
                tracing::warn!(request_id, from = %replica.name, %to, attempt, "retrying on another replica");
                if let Retryable::Refused(error) = &retryable {
                    state.metrics.record_error(ctx.entry.as_str(), error.kind_label());
                }
                replica = next.replica().clone();
                prefix_feedback = key.as_ref().map(|key| prefix.place(&replica, key));
                placement = probe(&replica, prefix_feedback.as_ref());
                guard = next;
                attempt += 1;
            }
            None => {
                return match retryable {
                    Retryable::Unavailable(guard, upstream) => {
                        let latency = Some(placement);
                        let placed = Placed { guard, prefix: prefix_feedback, latency };
                        Ok(finish(state, ctx, placed, upstream, permit))
                    }
                    Retryable::Refused(error) => Err(error),
                };
            }
        }
    }
}

/// How long a streamed request waits for its first send's answer before a hedge (only the
/// first attempt hedges: a retry already went elsewhere).
fn hedge_after(request: &Forwarding<'_>, attempt: u32) -> Option<std::time::Duration> {
    (request.streams && attempt == 1).then(|| request.shape.slo.hedge_after())?
}

/// A send that failed: its replica's passive health counts it (and its load a refused
/// connection), whether or not the request was answered by another send.
fn record_send_failure(state: &GatewayState, replica: &Replica, error: &GatewayError) {
    if let Some(reason) = error.replica_failure() {
        state.health.record_failure(replica, reason);
    }
    if let GatewayError::UpstreamConnect { .. } = error {
        replica.load.record_failure();
    }
}

/// What a hedge holds while it runs: its place on its replica and its latency probe.
type HedgePlace = (InFlightGuard, LatencyProbe);

/// A hedge: a place on the replica the policy picks now and the send there, if the retry
/// budget allows one more send. The pick sees the prompt as the first one did, so a
/// prefix-aware policy keeps the hedge where the prompt is cached: often the same replica,
/// on a fresh connection that another of its API processes may take. A hedge does not wait
/// at its replica's answer gate, nor go elsewhere when that replica's backlog is full: one
/// connection is not a burst, and the race is won by the first response headers (sent once
/// a request is preprocessed, before its prefill), so a hedge sent to a replica without the
/// prompt cached often wins the race and loses the first token
/// (`benches/results/2026-12-02-hedge-gate/`).
fn start_hedge<'a>(
    state: &'a GatewayState,
    request: &'a Forwarding<'_>,
    prompt: Option<&PromptPick<'_>>,
    prompt_tokens: u64,
    deadline: tokio::time::Instant,
) -> Option<(HedgePlace, impl Future<Output = Result<Response<UpstreamBody>, GatewayError>> + 'a)> {
    let limit = state.shared.admission.limits().max_in_flight_per_replica;
    let next = hedge_pick(state, request, prompt)?;
    let guard = InFlightGuard::try_acquire(next.clone(), prompt_tokens, limit)?;
    let hedges = &state.shared.reliability_metrics.hedges;
    if !state.shared.retry_budget.try_withdraw() {
        hedges.with_label_values(&["denied"]).inc();
        return None;
    }
    hedges.with_label_values(&["sent"]).inc();
    // Only streamed requests hedge.
    let context = state.picker.context(Instant::now());
    let probe = LatencyProbe::begin(next.clone(), prompt_tokens, &context, EngineEntry::AtAnswer);
    let connector = &request.variant.connector;
    let sending = Sending::Buffered(request.parts, request.body.clone());
    let send = async move { connector.send_by(&next, sending, deadline).await };
    Some(((guard, probe), send))
}

/// Where the policy would place a hedge now.
fn hedge_pick(
    state: &GatewayState,
    request: &Forwarding<'_>,
    prompt: Option<&PromptPick<'_>>,
) -> Option<Arc<Replica>> {
    let limit = state.shared.admission.limits().max_in_flight_per_replica;
    let variant: &Variant = request.variant;
    variant.pick_for(&state.picker, request.serving, None, limit, &request.shape, prompt)
}

/// A rescue ([`super::rescue`]): from the hedge point until a send could no longer meet
/// the TTFT objective (`ttft - after` after the first send), one more send when a process
/// frees on a replica the request may go to and the policy would place it there now (a
/// process freed on a replica the policy avoids, one past its TPOT objective say, is left
/// to other requests).
async fn rescue_when_freed<S>(
    state: &GatewayState,
    request: &Forwarding<'_>,
    prompt: Option<&PromptPick<'_>>,
    (sent_at, until): (tokio::time::Instant, tokio::time::Instant),
    start: impl FnOnce() -> Option<S>,
) -> Option<S> {
    // Not where placement follows the prompt: a rescue there lost first tokens and cache
    // hits on shared prefixes (TTFT p90 +42 to +123 ms in three runs,
    // `benches/results/2026-12-03-rescue/prefix-sp/`), as a hedge to an uncached replica
    // does: its answer comes before its prefill and wins the race.
    if prompt.is_some() {
        return None;
    }
    // Listed only when polled, at the hedge point: a request answered before costs nothing.
    let replicas = request.variant.replicas_for(&state.picker, request.serving);
    // A freed process is an idle one only where the replica's streams are fewer than its
    // processes, which its learned TTFT at that concurrency says: in a fleet past its
    // capacity a rescue would be one more request on a busy process.
    let in_time = |freed: &Replica| {
        let left = request.shape.slo.ttft.saturating_sub(sent_at.elapsed());
        predicted_for(freed, &request.shape, &state.picker.context(Instant::now())).ttft
            <= left.as_secs_f64()
    };
    let placed_there = |freed: &Replica| {
        in_time(freed)
            && hedge_pick(state, request, prompt).is_some_and(|pick| pick.name == freed.name)
    };
    // The hedge's own pick, a moment after `placed_there`'s, goes there too.
    rescue::process_freed(replicas, until, placed_there).await?;
    let started = start();
    if started.is_some() {
        state.shared.reliability_metrics.hedges.with_label_values(&["rescue"]).inc();
    }
    started
}

/// A place on another replica with room, if the retry budget allows one more retry.
fn next_replica(
    state: &GatewayState,
    request: &Forwarding<'_>,
    prompt_tokens: u64,
    failed: &Replica,
) -> Option<InFlightGuard> {
    let limit = state.shared.admission.limits().max_in_flight_per_replica;
    let variant: &Variant = request.variant;
    let (picker, exclude) = (&state.picker, Some(failed.name.as_str()));
    let next = variant.pick_for(picker, request.serving, exclude, limit, &request.shape, None)?;
    if next.name == failed.name {
        return None;
    }
    let guard = InFlightGuard::try_acquire(next, prompt_tokens, limit)?;
    let retries = &state.shared.reliability_metrics.retries;
    if state.shared.retry_budget.try_withdraw() {
        retries.with_label_values(&["sent"]).inc();
        Some(guard)
    } else {
        retries.with_label_values(&["denied"]).inc();
        None
    }
}

/// The client's response, holding its admission place until the body ends.
fn finish(
    state: &Arc<GatewayState>,
    ctx: &mut RequestCtx,
    placed: Placed,
    upstream: Response<UpstreamBody>,
    permit: AdmissionPermit,
) -> Response<ProxyBody> {
    respond(state, ctx.hand_over(), placed, upstream).map(|body| boxed(HeldBody::new(body, permit)))
}

/// The prompt's block hashes and session, when the variant's policy places by prompt and
/// the body parses (a body that does not is the replica's to refuse; it is placed by load).
/// A long prompt that the served model's tokenizer reads is read on a blocking thread: that
/// takes up to a millisecond per thousand new tokens, which would stall every stream this
/// worker relays.
async fn prompt_key(
    state: &Arc<GatewayState>,
    request: &Forwarding<'_>,
    estimated_tokens: u64,
) -> Option<PromptKey> {
    if !request.variant.reads_prompts(&state.picker) {
        return None;
    }
    let endpoint = Endpoint::from_path(request.parts.uri.path())?;
    let parsed = InferenceRequest::parse(endpoint, request.body).ok()?;
    if estimated_tokens >= TOKENIZE_OFF_THREAD && state.engine_tokens.has_tokenizer(&parsed) {
        let (state, headers) = (state.clone(), request.parts.headers.clone());
        let read =
            move || PromptKey::new(&parsed, &headers, &state.config.prefix, &state.engine_tokens);
        return tokio::task::spawn_blocking(read).await.ok();
    }
    let (headers, config) = (&request.parts.headers, &state.config.prefix);
    Some(PromptKey::new(&parsed, headers, config, &state.engine_tokens))
}
