//! Turning a replica's response into the client's: the body wrapped for observation, the
//! `x-laneway-*` headers added, nothing else changed. The replica's headers are in the map
//! or, from laneway's own client, in their lines beside it (`replica_headers`).

use std::sync::Arc;
use std::time::Instant;

use crate::gateway::forward::upstream_body::UpstreamBody;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{HeaderName, Response};

use crate::gateway::body::{ProxyBody, boxed};
use crate::gateway::config::{DEFAULT_VARIANT_NAME, Entry, Strategy};
use crate::gateway::context::RequestCtx;
use crate::gateway::forward::replica_headers::ReplicaHeaders;
use crate::gateway::forward::request::strip_hop_by_hop;
use crate::gateway::headers::{ENTRY, REPLICA, STRATEGY, VARIANT};
use crate::gateway::observe::{BodyKind, ObservedBody, OverheadPhase, Recorder, StreamWatchdog};
use crate::gateway::pick::InFlightGuard;
use crate::gateway::pick::predict::LatencyProbe;
use crate::gateway::pick::prefix::PrefixFeedback;
use crate::gateway::state::GatewayState;

/// Sets, with `set`, the headers that tell a client where its request went (`replica`: the
/// replica's name as a header value, made once per replica).
pub fn tag(
    mut set: impl FnMut(HeaderName, HeaderValue),
    entry: Entry,
    strategy: Strategy,
    variant: &str,
    replica: Option<&HeaderValue>,
) {
    set(ENTRY, HeaderValue::from_static(entry.as_str()));
    set(STRATEGY, HeaderValue::from_static(strategy.as_str()));
    // Variant names are validated as plain ASCII, so the conversion cannot fail; outside
    // canaries the name is the default one, which needs no copy.
    let variant = if variant == DEFAULT_VARIANT_NAME {
        Ok(HeaderValue::from_static(DEFAULT_VARIANT_NAME))
    } else {
        HeaderValue::from_str(variant)
    };
    if let Ok(value) = variant {
        set(VARIANT, value);
    }
    if let Some(value) = replica {
        set(REPLICA, value.clone());
    }
}

/// Where a request was placed: what the attempt that answered adds to its context.
pub struct Placed {
    /// Its place in the replica's in-flight count, held until the body ends.
    pub guard: InFlightGuard,
    /// A `prefix_aware` placement's prediction, checked against the replica's usage.
    pub prefix: Option<PrefixFeedback>,
    /// Where an inference request was placed, so that its stream teaches the replica's
    /// latency estimate.
    pub latency: Option<LatencyProbe>,
}

impl Placed {
    /// A request placed by no policy (debug, passthrough): only counted in flight.
    pub fn counted(guard: InFlightGuard) -> Self {
        Self { guard, prefix: None, latency: None }
    }
}

/// Builds the client's response around the replica's, streaming and observed.
pub fn respond(
    state: &Arc<GatewayState>,
    ctx: RequestCtx,
    placed: Placed,
    upstream: Response<UpstreamBody>,
) -> Response<ProxyBody> {
    let headers_at = Instant::now();
    let status = upstream.status();
    let serving = placed.guard.replica();
    let (replica, replica_header) = (serving.clone(), serving.name_header.clone());
    if status.is_server_error() {
        state.metrics.record_error(ctx.entry.as_str(), "upstream_status");
    }
    let (mut parts, body) = upstream.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if let Some(ticket) = &ctx.quota {
        ticket.headers.apply(&mut parts.headers);
    }
    // Beside the replica's lines if it sent them as such: no map is built for either.
    let set = ReplicaHeaders::setter(&mut parts.headers, &mut parts.extensions);
    tag(set, ctx.entry, ctx.strategy, &ctx.variant, replica_header.as_ref());
    let timeouts = &state.config.reliability.timeouts;
    let watchdog = StreamWatchdog::new(
        timeouts.idle,
        timeouts.total,
        (ctx.received_at, tokio::time::Instant::from_std(headers_at)),
        state.shared.abort_streams.clone(),
    );
    let content_type = match parts.extensions.get::<ReplicaHeaders>() {
        Some(replica) => replica.content_type(),
        None => parts.headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes),
    };
    let kind = body_kind(ctx.inference, content_type);
    let inference = ctx.inference;
    let mut recorder = Recorder::new(state.metrics.clone(), ctx, (replica, status), kind);
    // Set in place: the recorder is large, and each by-value step would copy it.
    if inference {
        recorder.set_canary(state.shared.canary.clone());
        let slo = crate::gateway::capacity::request_slo(&state.config);
        recorder.set_capacity(placed.guard.replica().clone(), slo);
    }
    if let Some(prefix) = placed.prefix {
        recorder.set_prefix(prefix);
    }
    if let Some(mut latency) = placed.latency {
        latency.answered();
        recorder.set_placement(latency);
    }
    let health = state.health.clone();
    let mut guard = placed.guard;
    guard.mark_answered();
    let body = ObservedBody::new(body, recorder, guard, watchdog, health);
    let body = boxed(body);
    state.metrics.record_overhead(OverheadPhase::FirstByte, headers_at);
    Response::from_parts(parts, body)
}

fn body_kind(inference: bool, content_type: Option<&[u8]>) -> BodyKind {
    if !inference {
        return BodyKind::Opaque;
    }
    let content_type = content_type.unwrap_or_default();
    if content_type.starts_with(b"text/event-stream") {
        BodyKind::Stream
    } else if content_type.starts_with(b"application/json") {
        BodyKind::Json
    } else {
        BodyKind::Opaque
    }
}
