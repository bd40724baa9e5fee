//! Turning a replica's response into the client's: the body wrapped for observation, the
//! `x-laneway-*` headers added, nothing else changed.

use std::sync::Arc;
use std::time::Instant;

use http::header::{CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, Response};

use crate::gateway::headers::{ENTRY, REPLICA, STRATEGY, VARIANT};
use hyper::body::Incoming;

use crate::gateway::body::{ProxyBody, boxed};
use crate::gateway::config::{Entry, Strategy};
use crate::gateway::forward::request::strip_hop_by_hop;
use crate::gateway::observe::access_log;
use crate::gateway::observe::{
    BodyKind, ObservedBody, Recorder, RequestLabels, StreamWatchdog, status_class,
};
use crate::gateway::pick::InFlightGuard;
use crate::gateway::pick::predict::LatencyProbe;
use crate::gateway::pick::prefix::PrefixFeedback;
use crate::gateway::quota::QuotaTicket;
use crate::gateway::state::GatewayState;

/// Adds the headers that tell a client where its request went.
pub fn tag(
    headers: &mut HeaderMap,
    entry: Entry,
    strategy: Strategy,
    variant: &str,
    replica: Option<&str>,
) {
    headers.insert(ENTRY, HeaderValue::from_static(entry.as_str()));
    headers.insert(STRATEGY, HeaderValue::from_static(strategy.as_str()));
    // Variant names are validated as plain ASCII, so the conversion cannot fail.
    if let Ok(value) = HeaderValue::from_str(variant) {
        headers.insert(VARIANT, value);
    }
    if let Some(value) = replica.and_then(|name| HeaderValue::from_str(name).ok()) {
        headers.insert(REPLICA, value);
    }
}

/// What is known about a request when its response comes back.
pub struct Proxied {
    pub entry: Entry,
    pub strategy: Strategy,
    /// The canary variant that served it (`default` outside canaries).
    pub variant: Arc<str>,
    pub received_at: Instant,
    /// The response is from an inference path (so tokens can be measured).
    pub inference: bool,
    pub prompt_tokens: u64,
    pub guard: InFlightGuard,
    /// A `prefix_aware` placement's prediction, checked against the replica's usage.
    pub prefix: Option<PrefixFeedback>,
    /// A tenant's hold, released (and its tokens settled) when the body ends.
    pub quota: Option<QuotaTicket>,
    /// Where an inference request was placed, so that its stream teaches the replica's
    /// latency estimate.
    pub placement: Option<LatencyProbe>,
}

/// Builds the client's response around the replica's, streaming and observed.
pub fn respond(
    state: &Arc<GatewayState>,
    proxied: Proxied,
    upstream: Response<Incoming>,
) -> Response<ProxyBody> {
    let headers_at = Instant::now();
    let status = upstream.status();
    let replica = proxied.guard.replica().name.clone();
    if status.is_server_error() {
        state.metrics.record_error(proxied.entry.as_str(), "upstream_status");
    }
    let kind = body_kind(proxied.inference, upstream.headers());
    let labels = RequestLabels {
        entry: proxied.entry,
        strategy: proxied.strategy,
        variant: proxied.variant.clone(),
        replica: replica.clone(),
        status_class: status_class(status),
    };
    let mut recorder = Recorder::new(
        state.metrics.clone(),
        labels,
        kind,
        proxied.received_at,
        proxied.prompt_tokens,
    );
    if proxied.inference {
        recorder = recorder.with_canary(state.shared.canary.clone());
        let slo = crate::gateway::capacity::request_slo(&state.config);
        recorder = recorder.with_capacity(proxied.guard.replica().clone(), slo);
    }
    if let Some(prefix) = proxied.prefix {
        recorder = recorder.with_prefix(prefix);
    }
    let rate_limits = proxied.quota.as_ref().map(|ticket| ticket.headers);
    recorder = recorder.with_quota(proxied.quota);
    if let Some(placement) = proxied.placement {
        recorder = recorder.with_placement(placement);
    }
    if let Some(mut access) = access_log::current() {
        access.status = status.as_u16();
        recorder = recorder.with_access(access);
    }
    let (mut parts, body) = upstream.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if let Some(rate_limits) = rate_limits {
        rate_limits.apply(&mut parts.headers);
    }
    tag(&mut parts.headers, proxied.entry, proxied.strategy, &proxied.variant, Some(&replica));
    let timeouts = &state.config.reliability.timeouts;
    let watchdog = StreamWatchdog::new(
        timeouts.idle,
        timeouts.total,
        proxied.received_at,
        state.shared.abort_streams.clone(),
    );
    let body = ObservedBody::new(body, recorder, proxied.guard)
        .with_reliability(watchdog, state.health.clone());
    let body = boxed(body);
    state.metrics.record_overhead("first_byte", headers_at);
    Response::from_parts(parts, body)
}

fn body_kind(inference: bool, headers: &HeaderMap) -> BodyKind {
    if !inference {
        return BodyKind::Opaque;
    }
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if content_type.starts_with("text/event-stream") {
        BodyKind::Stream
    } else if content_type.starts_with("application/json") {
        BodyKind::Json
    } else {
        BodyKind::Opaque
    }
}
