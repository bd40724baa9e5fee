//! The request path, phase by phase: route, then for inference requests
//! classify -> pick -> forward -> observe; debug requests go straight to their replica;
//! other paths go to a picked replica untouched.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;

use tracing::Instrument;

use super::ListenerRole;
use super::attempts::{self, Forwarding};
use super::body_deadline::{BodyTimedOut, DeadlineBody};
use super::respond::{ENTRY_HEADER, Proxied, REPLICA_HEADER, respond, tag};
use crate::gateway::access_log::{self, AccessContext, AccessRecord};
use crate::gateway::admission::HeldBody;
use crate::gateway::admission::fair_order::{DEFAULT_BAND, Flow, MAX_BAND};
use crate::gateway::body::{ProxyBody, boxed};
use crate::gateway::classify::{self, Classification, ClassifyMethod, model_name};
use crate::gateway::entry::Entry;
use crate::gateway::error::GatewayError;
use crate::gateway::forward::debug::{DebugSlot, split_debug_path};
use crate::gateway::observe::DEFAULT_VARIANT;
use crate::gateway::pick::{InFlightGuard, Replica, RequestShape, serving};
use crate::gateway::request_id::{self, REQUEST_ID_HEADER};
use crate::gateway::state::GatewayState;
use crate::openai::request::Endpoint;

/// Serves one request under its request id (accepted or created, sent upstream, returned
/// on the response, in every log line of the request and in its access line).
pub async fn dispatch(
    state: Arc<GatewayState>,
    role: ListenerRole,
    mut request: Request<Incoming>,
) -> Response<ProxyBody> {
    let id = request_id::accept_or_create(request.headers_mut());
    let span = tracing::info_span!("request", request_id = request_id::as_text(&id));
    let access_log = state.config.access_log;
    let access = access_log.then(|| AccessContext {
        request_id: request_id::as_text(&id).to_string(),
        method: request.method().to_string(),
        path: request.uri().path().to_string(),
        status: 0,
    });
    // Each future is built inside its `.await`: a future held in a local and then moved
    // into another is laid out twice in this one's state.
    let mut response = match access {
        // Boxed: the access log is opt-in, and its scope would double this future's size.
        Some(access) => {
            Box::pin(access_log::scope(
                access,
                serve_request(state, role, request).instrument(span),
            ))
            .await
        }
        // Without the access log the request needs no task-local context at all.
        None => serve_request(state, role, request).instrument(span).await,
    };
    response.headers_mut().insert(REQUEST_ID_HEADER, id);
    response
}

/// Routes and checks the key; errors become OpenAI-shape responses here and nowhere else.
async fn serve_request(
    state: Arc<GatewayState>,
    role: ListenerRole,
    request: Request<Incoming>,
) -> Response<ProxyBody> {
    let received_at = Instant::now();
    let path = request.uri().path().to_string();
    let route = route(role, &request);
    // The debug entry checks its own, narrower, permission.
    if !matches!(route, Route::Debug)
        && let Err(error) = authenticate(&state, &request)
    {
        return error_response(&state, Entry::Short, &path, received_at, error);
    }
    let (entry, result) = match route {
        Route::Debug => (Entry::Debug, debug(&state, role, request, received_at).await),
        Route::Inference(endpoint) => inference(&state, role, endpoint, request, received_at).await,
        Route::Models => match super::models::list(&state) {
            Some(list) => (Entry::Short, Ok(list)),
            None => (Entry::Short, other(&state, request, received_at).await),
        },
        Route::Other => (Entry::Short, other(&state, request, received_at).await),
    };
    result.unwrap_or_else(|error| error_response(&state, entry, &path, received_at, error))
}

/// The gateway's own answer to a failed request: logged, counted, tagged, access-logged.
fn error_response(
    state: &GatewayState,
    entry: Entry,
    path: &str,
    received_at: Instant,
    error: GatewayError,
) -> Response<ProxyBody> {
    tracing::warn!(%error, path, entry = entry.as_str(), "request failed");
    let kind = error.kind_label();
    state.metrics.record_error(entry.as_str(), kind);
    let strategy = state.connector(entry).strategy();
    let mut response = error.into_response();
    tag(response.headers_mut(), entry, strategy, DEFAULT_VARIANT, None);
    if let Some(access) = access_log::current() {
        access_log::emit(&AccessRecord {
            request_id: &access.request_id,
            method: &access.method,
            path,
            entry: entry.as_str(),
            variant: DEFAULT_VARIANT,
            replica: "-",
            status: response.status().as_u16(),
            ttft: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            duration: received_at.elapsed(),
            outcome: kind,
        });
    }
    response
}

/// With `[auth]`, every request on an inference listener needs a known key.
fn authenticate(state: &GatewayState, request: &Request<Incoming>) -> Result<(), GatewayError> {
    let Some(keys) = &state.config.auth else { return Ok(()) };
    let label = keys.check(request.headers())?;
    if keys.count_by_key {
        state.metrics.requests_by_key.with_label_values(&[label.as_str()]).inc();
    }
    Ok(())
}

enum Route {
    Debug,
    Inference(Endpoint),
    /// `GET /v1/models`: the union of the replicas' lists.
    Models,
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
        None if path == "/v1/models" && request.method() == Method::GET => Route::Models,
        None => Route::Other,
    }
}

/// Inference: classify, then admit, pick and forward, then observe.
async fn inference(
    state: &Arc<GatewayState>,
    role: ListenerRole,
    endpoint: Endpoint,
    request: Request<Incoming>,
    received_at: Instant,
) -> (Entry, Result<Response<ProxyBody>, GatewayError>) {
    match classify_request(state, role, endpoint, request).await {
        Ok(classified) => {
            let entry = classified.classification.entry;
            // A client that leaves before the response headers (a non-streamed request
            // waits for its whole generation) drops this future: count it here, as the
            // response body counts those who leave later.
            let abandoned = AbandonedBeforeHeaders::arm(state, entry);
            let result = pick_and_forward(state, classified, received_at).await;
            abandoned.disarm();
            (entry, result)
        }
        Err((entry, error)) => (entry, Err(error)),
    }
}

/// Counts `client_disconnect` when dropped armed: the request future went away before it
/// produced a response.
struct AbandonedBeforeHeaders<'a> {
    state: &'a GatewayState,
    entry: Entry,
    armed: bool,
}

impl<'a> AbandonedBeforeHeaders<'a> {
    fn arm(state: &'a GatewayState, entry: Entry) -> Self {
        Self { state, entry, armed: true }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for AbandonedBeforeHeaders<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.state.metrics.record_error(self.entry.as_str(), "client_disconnect");
        }
    }
}

/// A request whose body is read and whose entry is decided.
struct Classified {
    parts: Parts,
    body: Bytes,
    classification: Classification,
    /// The body's `model`, read by the same parse.
    model: Option<String>,
}

/// Phase 1, classify: method check, body read within the limit, entry decided. On error,
/// the entry the request was headed for (for the error's labels).
async fn classify_request(
    state: &Arc<GatewayState>,
    role: ListenerRole,
    endpoint: Endpoint,
    request: Request<Incoming>,
) -> Result<Classified, (Entry, GatewayError)> {
    let named = named_entry(role, &request).map_err(|error| (Entry::Short, error))?;
    let headed_for = named.map_or(Entry::Short, |(entry, _)| entry);
    if request.method() != Method::POST {
        let method = request.method().clone();
        let path = endpoint.path().to_string();
        return Err((headed_for, GatewayError::MethodNotAllowed { method, path }));
    }
    let (parts, body) = request.into_parts();
    let limits = (state.config.body_limit_bytes, state.config.reliability.timeouts.client_body);
    let body = read_body(&parts, body, limits).await.map_err(|error| (headed_for, error))?;
    let threshold = state.config.short_threshold_tokens;
    let (classification, model) =
        classify::classify_with_model(endpoint, &body, named, threshold, true)
            .map_err(|error| (headed_for, GatewayError::BadBody(error)))?;
    let labels = [classification.entry.as_str(), classification.method.as_str()];
    state.metrics.classified.with_label_values(&labels).inc();
    Ok(Classified { parts, body, classification, model })
}

/// Phases 2 to 4: pick a replica, forward with the entry's strategy (a refused connection
/// is retried once elsewhere), and hand the response to the observer as it streams.
async fn pick_and_forward(
    state: &Arc<GatewayState>,
    classified: Classified,
    received_at: Instant,
) -> Result<Response<ProxyBody>, GatewayError> {
    let Classified { mut parts, body, classification, model } = classified;
    let entry = classification.entry;
    let replicas = state.picker.snapshot();
    let route = serving::route(&state.config.models, &replicas, model.as_deref())?;
    state.metrics.requests_by_model.with_label_values(&[route.label.as_str()]).inc();
    let body = match &route.rewrite {
        Some(name) => {
            let renamed = model_name::rename_model(&body, name).map_err(GatewayError::BadBody)?;
            // The replica reads exactly the declared length: declare the new one.
            parts.headers.insert(http::header::CONTENT_LENGTH, renamed.len().into());
            renamed
        }
        None => body,
    };
    let asked_band = priority_band(&parts.headers)?;
    let tenant = state.tenants.of(&parts.headers);
    let flow = match &tenant {
        Some(tenant) => tenant.flow(asked_band),
        None => Flow { band: asked_band.unwrap_or(DEFAULT_BAND), ..Flow::default() },
    };
    let quota = match &tenant {
        Some(tenant) => {
            let prompt_tokens = classification.prompt_tokens;
            Some(state.tenants.admit(tenant, prompt_tokens).await?)
        }
        None => None,
    };
    // Assign the canary variant; its pool, policy and strategy serve the request.
    let variant = state.variants.choose(entry, &parts.headers, &state.picker, &state.metrics);
    let slo = classify::slo::request_slo(state.config.entry(entry).slo, &parts.headers)?;
    let shape = RequestShape { prompt_tokens: classification.prompt_tokens, slo };
    let forwarding = Forwarding {
        entry,
        variant,
        parts: &parts,
        body: &body,
        prompt_tokens: classification.prompt_tokens,
        shape,
        received_at,
        serving: route.serving.as_deref(),
        flow,
        quota: parking_lot::Mutex::new(quota),
    };
    // The response carries the tenant's `x-ratelimit-*` headers (see `respond`).
    attempts::forward(state, forwarding).await
}

/// The band `x-laneway-priority` asks for (0..=9), if any.
fn priority_band(headers: &http::HeaderMap) -> Result<Option<u8>, GatewayError> {
    let Some(value) = headers.get(PRIORITY_HEADER) else { return Ok(None) };
    let band = value.to_str().ok().and_then(|text| text.trim().parse::<u8>().ok());
    match band {
        Some(band) if band <= MAX_BAND => Ok(Some(band)),
        _ => Err(GatewayError::BadHeader("x-laneway-priority")),
    }
}

/// The header a request names its priority band in.
const PRIORITY_HEADER: &str = "x-laneway-priority";

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
    // Repeats that disagree could be read differently by another proxy on the path.
    if request.headers().get_all(ENTRY_HEADER).iter().any(|other| other != value) {
        return Err(GatewayError::BadHeader("x-laneway-entry"));
    }
    let name = value.to_str().map_err(|_| GatewayError::BadHeader("x-laneway-entry"))?;
    let entry = name.parse::<Entry>().map_err(GatewayError::UnknownEntry)?;
    Ok(Some((entry, ClassifyMethod::Header)))
}

/// Buffers the body, refusing it as soon as it is known to be over `limit`, or once it has
/// taken longer than `deadline` to arrive.
async fn read_body(
    parts: &Parts,
    body: Incoming,
    (limit, deadline): (usize, Duration),
) -> Result<Bytes, GatewayError> {
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(GatewayError::PayloadTooLarge { limit });
    }
    match Limited::new(DeadlineBody::new(body, deadline), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => {
            Err(GatewayError::PayloadTooLarge { limit })
        }
        Err(error) if error.is::<BodyTimedOut>() => {
            Err(GatewayError::ClientBodyTimeout { after: deadline })
        }
        Err(error) => Err(GatewayError::ClientBody(error)),
    }
}

/// A request with the client's method, target and headers and the given body.
pub(super) fn rebuild(parts: &Parts, body: ProxyBody) -> Request<ProxyBody> {
    let mut request = Request::new(body);
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = parts.uri.clone();
    *request.version_mut() = parts.version;
    *request.headers_mut() = parts.headers.clone();
    request
}

/// Debug entry: to the named replica, untouched, no parsing, no retry; only where the
/// config serves it, for keys allowed to debug, a few at a time per replica.
async fn debug(
    state: &Arc<GatewayState>,
    role: ListenerRole,
    request: Request<Incoming>,
    received_at: Instant,
) -> Result<Response<ProxyBody>, GatewayError> {
    let access = &state.config.debug_access;
    if role != ListenerRole::Entry(Entry::Debug) && !access.on_smart_listener {
        return Err(GatewayError::DebugNotServedHere);
    }
    if let Some(keys) = &state.config.auth {
        keys.check_debug(request.headers(), state.config.admin.token.as_deref())?;
    }
    let (name, path) = debug_target(&request)?;
    let replica = state.picker.by_name(&name).ok_or(GatewayError::UnknownReplica(name))?;
    let limit = access.max_in_flight_per_replica;
    let slot = DebugSlot::try_take(replica.clone(), limit)
        .ok_or_else(|| GatewayError::DebugBusy { replica: replica.name.clone(), limit })?;
    let response = pass_through(state, Entry::Debug, replica, request, path, received_at).await?;
    Ok(response.map(|body| boxed(HeldBody::new(body, slot))))
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
    pass_through(state, Entry::Short, replica, request, None, received_at).await
}

/// Sends a request the gateway does not interpret to `replica` through `entry`'s
/// connections (to `path` if given) and streams the answer back, counted in flight.
async fn pass_through(
    state: &Arc<GatewayState>,
    entry: Entry,
    replica: Arc<Replica>,
    request: Request<Incoming>,
    path: Option<PathAndQuery>,
    received_at: Instant,
) -> Result<Response<ProxyBody>, GatewayError> {
    let guard = InFlightGuard::acquire(replica.clone(), 0);
    let connector = state.connector(entry);
    state.metrics.record_overhead("request", received_at);
    let deadline = state.config.reliability.timeouts.client_body;
    let request = request.map(|body| boxed(DeadlineBody::new(body, deadline)));
    let upstream = connector.send(&replica, request, path).await?;
    let proxied = Proxied {
        entry,
        strategy: connector.strategy(),
        variant: DEFAULT_VARIANT.into(),
        received_at,
        inference: false,
        prompt_tokens: 0,
        guard,
        prefix: None,
        quota: None,
        placement: None,
    };
    Ok(respond(state, proxied, upstream))
}
