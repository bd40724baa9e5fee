//! The request path, phase by phase: route, then for inference requests
//! classify -> pick -> forward -> observe; debug requests go straight to their replica;
//! other paths go to a picked replica untouched.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;

use super::ListenerRole;
use super::respond::{ENTRY_HEADER, Proxied, REPLICA_HEADER, respond, tag};
use crate::gateway::body::{ProxyBody, boxed, full};
use crate::gateway::classify::{self, ClassifyMethod};
use crate::gateway::entry::Entry;
use crate::gateway::error::GatewayError;
use crate::gateway::forward::debug::split_debug_path;
use crate::gateway::pick::InFlightGuard;
use crate::gateway::state::GatewayState;
use crate::openai::request::Endpoint;

/// Attempts per inference request: a second replica is tried only when the first refused
/// the connection (nothing was sent, so a retry cannot run the request twice).
const MAX_ATTEMPTS: usize = 2;

/// Serves one request; errors become OpenAI-shape responses here and nowhere else.
pub async fn dispatch(
    state: Arc<GatewayState>,
    role: ListenerRole,
    request: Request<Incoming>,
) -> Response<ProxyBody> {
    let received_at = Instant::now();
    let path = request.uri().path().to_string();
    let (entry, result) = match route(role, &request) {
        Route::Debug => (Entry::Debug, debug(&state, request, received_at).await),
        Route::Inference(endpoint) => inference(&state, role, endpoint, request, received_at).await,
        Route::Other => (Entry::Short, other(&state, request, received_at).await),
    };
    result.unwrap_or_else(|error| {
        tracing::warn!(%error, path, entry = entry.as_str(), "request failed");
        state.metrics.record_error(entry.as_str(), error.kind_label());
        let strategy = state.connector(entry).strategy();
        let mut response = error.into_response();
        tag(response.headers_mut(), entry, strategy, None);
        response
    })
}

enum Route {
    Debug,
    Inference(Endpoint),
    Other,
}

fn route(role: ListenerRole, request: &Request<Incoming>) -> Route {
    let path = request.uri().path();
    let asks_debug = request.headers().get(ENTRY_HEADER).is_some_and(|v| v.as_bytes() == b"debug");
    if role == ListenerRole::Entry(Entry::Debug) || path.starts_with("/debug/") || asks_debug {
        return Route::Debug;
    }
    match Endpoint::from_path(path) {
        Some(endpoint) => Route::Inference(endpoint),
        None => Route::Other,
    }
}

/// Inference: read the body, classify, then pick and forward (retrying a refused connect).
async fn inference(
    state: &Arc<GatewayState>,
    role: ListenerRole,
    endpoint: Endpoint,
    request: Request<Incoming>,
    received_at: Instant,
) -> (Entry, Result<Response<ProxyBody>, GatewayError>) {
    // Phase 1: classify.
    let named = match named_entry(role, &request) {
        Ok(named) => named,
        Err(error) => return (Entry::Short, Err(error)),
    };
    let fallback_entry = named.map_or(Entry::Short, |(entry, _)| entry);
    if request.method() != Method::POST {
        let error = GatewayError::MethodNotAllowed {
            method: request.method().clone(),
            path: endpoint.path().to_string(),
        };
        return (fallback_entry, Err(error));
    }
    let (parts, body) = request.into_parts();
    let body = match read_body(&parts, body, state.config.body_limit_bytes).await {
        Ok(body) => body,
        Err(error) => return (fallback_entry, Err(error)),
    };
    let threshold = state.config.short_threshold_tokens;
    let classification = match classify::classify(endpoint, &body, named, threshold) {
        Ok(classification) => classification,
        Err(error) => return (fallback_entry, Err(GatewayError::BadBody(error))),
    };
    let entry = classification.entry;
    state
        .metrics
        .classified
        .with_label_values(&[entry.as_str(), classification.method.as_str()])
        .inc();
    // Phases 2 and 3: pick and forward.
    let connector = state.connector(entry);
    let mut excluded: Option<String> = None;
    for attempt in 1..=MAX_ATTEMPTS {
        let Some(replica) = state.picker.pick(excluded.as_deref()) else {
            let error = match excluded {
                None => GatewayError::NoReplica,
                Some(replica) => GatewayError::UpstreamConnect {
                    replica,
                    source: "no other replica to try".into(),
                },
            };
            return (entry, Err(error));
        };
        let guard = InFlightGuard::acquire(replica.clone(), classification.prompt_tokens);
        let upstream_request = rebuild(&parts, full(body.clone()));
        state.metrics.record_overhead("request", received_at);
        match connector.send(&replica, upstream_request, None).await {
            Ok(upstream) => {
                replica.load.connect_failures.store(0, std::sync::atomic::Ordering::Relaxed);
                // Phase 4: observe, as the body streams.
                let proxied = Proxied {
                    entry,
                    strategy: connector.strategy(),
                    received_at,
                    inference: true,
                    prompt_tokens: classification.prompt_tokens,
                    guard,
                };
                return (entry, Ok(respond(state, proxied, upstream)));
            }
            Err(error) => {
                if error.retry_allowed() {
                    replica
                        .load
                        .connect_failures
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                if !error.retry_allowed() || attempt == MAX_ATTEMPTS {
                    return (entry, Err(error));
                }
                tracing::warn!(%error, "retrying on another replica");
                state.metrics.record_error(entry.as_str(), error.kind_label());
                excluded = Some(replica.name.clone());
            }
        }
    }
    unreachable!("the last attempt returns")
}

/// The entry fixed before reading the body: by dedicated listener, else by header.
fn named_entry(
    role: ListenerRole,
    request: &Request<Incoming>,
) -> Result<Option<(Entry, ClassifyMethod)>, GatewayError> {
    if let ListenerRole::Entry(entry) = role {
        return Ok(Some((entry, ClassifyMethod::Listener)));
    }
    let Some(value) = request.headers().get(ENTRY_HEADER) else {
        return Ok(None);
    };
    let name = value.to_str().map_err(|_| GatewayError::BadHeader("x-laneway-entry"))?;
    let entry = name.parse::<Entry>().map_err(GatewayError::UnknownEntry)?;
    Ok(Some((entry, ClassifyMethod::Header)))
}

/// Buffers the body, refusing it as soon as it is known to be over `limit`.
async fn read_body(parts: &Parts, body: Incoming, limit: usize) -> Result<Bytes, GatewayError> {
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(GatewayError::PayloadTooLarge { limit });
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => {
            Err(GatewayError::PayloadTooLarge { limit })
        }
        Err(error) => Err(GatewayError::ClientBody(error)),
    }
}

/// A request with the client's method, target and headers and the given body.
fn rebuild(parts: &Parts, body: ProxyBody) -> Request<ProxyBody> {
    let mut request = Request::new(body);
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = parts.uri.clone();
    *request.version_mut() = parts.version;
    *request.headers_mut() = parts.headers.clone();
    request
}

/// Debug entry: to the named replica, untouched, no parsing, no retry.
async fn debug(
    state: &Arc<GatewayState>,
    request: Request<Incoming>,
    received_at: Instant,
) -> Result<Response<ProxyBody>, GatewayError> {
    let (name, path) = debug_target(&request)?;
    let replica = state.picker.by_name(&name).ok_or(GatewayError::UnknownReplica(name))?;
    let guard = InFlightGuard::acquire(replica.clone(), 0);
    let connector = state.connector(Entry::Debug);
    state.metrics.record_overhead("request", received_at);
    let upstream = connector.send(&replica, request.map(boxed), path).await?;
    let proxied = Proxied {
        entry: Entry::Debug,
        strategy: connector.strategy(),
        received_at,
        inference: false,
        prompt_tokens: 0,
        guard,
    };
    Ok(respond(state, proxied, upstream))
}

/// The replica a debug request names, and the path to send it (`None`: its own path).
fn debug_target(
    request: &Request<Incoming>,
) -> Result<(String, Option<PathAndQuery>), GatewayError> {
    if let Some(path_and_query) = request.uri().path_and_query()
        && let Some((name, path)) = split_debug_path(path_and_query)
    {
        return Ok((name.to_string(), Some(path)));
    }
    let name = request.headers().get(REPLICA_HEADER).ok_or(GatewayError::MissingReplica)?;
    let name = name.to_str().map_err(|_| GatewayError::BadHeader("x-laneway-replica"))?;
    Ok((name.to_string(), None))
}

/// Paths the gateway does not interpret (`/v1/models`, `/health`, ...): a picked replica
/// answers, through the short entry's connections.
async fn other(
    state: &Arc<GatewayState>,
    request: Request<Incoming>,
    received_at: Instant,
) -> Result<Response<ProxyBody>, GatewayError> {
    let replica = state.picker.pick(None).ok_or(GatewayError::NoReplica)?;
    let guard = InFlightGuard::acquire(replica.clone(), 0);
    let connector = state.connector(Entry::Short);
    state.metrics.record_overhead("request", received_at);
    let upstream = connector.send(&replica, request.map(boxed), None).await?;
    let proxied = Proxied {
        entry: Entry::Short,
        strategy: connector.strategy(),
        received_at,
        inference: false,
        prompt_tokens: 0,
        guard,
    };
    Ok(respond(state, proxied, upstream))
}
