//! The request path, phase by phase: framing checked, then route; inference requests go
//! classify -> pick -> forward -> observe; debug requests go straight to their replica;
//! the other routes a listener serves (`/v1/models`, `/health`, forwarded paths) are
//! answered by the gateway or go to a picked replica untouched; any other path is a 404.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Method, Request, Response, Version};
use http_body_util::BodyExt;
use tracing::Instrument;

use super::ListenerRole;
use super::attempts::{self, Forwarding};
use super::client_body::ClientBody;
use super::respond::{Placed, respond, tag};
use super::upload::Upload;
use crate::gateway::admission::HeldBody;
use crate::gateway::body::{ProxyBody, boxed};
use crate::gateway::classify::{self, ClassifyMethod, model_name};
use crate::gateway::client_fault;
use crate::gateway::config::{DEFAULT_BAND, Entry, Flow, MAX_BAND, RoutesConfig};
use crate::gateway::context::RequestCtx;
use crate::gateway::error::{GatewayError, Side};
use crate::gateway::forward::debug::{DebugSlot, split_debug_path};
use crate::gateway::forward::replica_headers::ReplicaHeaders;
use crate::gateway::framing::{FramingError, Refused, check_map};
use crate::gateway::headers;
use crate::gateway::listen::request_id;
use crate::gateway::observe::access_log::{self, AccessRecord};
use crate::gateway::observe::{DEFAULT_VARIANT, OverheadPhase};
use crate::gateway::pick::{InFlightGuard, Replica, RequestShape, serving};
use crate::gateway::state::GatewayState;
use crate::openai::request::Endpoint;

/// Serves one request, received (its head complete) at `received_at`, under its request id (accepted or created, sent upstream, returned
/// on the response, in its access line and in every line logged about it).
///
/// The request's span is a debug one: a span at the level lines are logged at costs every
/// request a formatted copy of its fields even when nothing is logged, so the lines the
/// request path logs at info and above name the request id themselves.
pub async fn dispatch(
    state: Arc<GatewayState>,
    role: ListenerRole,
    mut request: Request<ClientBody>,
    received_at: Instant,
) -> Response<ProxyBody> {
    let id = request_id::accept_or_create(request.headers_mut());
    let span = tracing::debug_span!("request", request_id = request_id::as_text(&id));
    let headed_for = (Entry::Short, state.connector(Entry::Short).strategy());
    let (method, uri) = (request.method().clone(), request.uri().clone());
    let access_log = state.config.access_log;
    let mut ctx = RequestCtx::new(id.clone(), (method, uri), received_at, headed_for, access_log);
    let mut response = serve_request(state, role, request, &mut ctx).instrument(span).await;
    ReplicaHeaders::set(&mut response, headers::REQUEST_ID, id);
    response
}

/// Routes and checks the key; errors become OpenAI-shape responses here and nowhere else.
async fn serve_request(
    state: Arc<GatewayState>,
    role: ListenerRole,
    request: Request<ClientBody>,
    ctx: &mut RequestCtx,
) -> Response<ProxyBody> {
    if let Err(refused) = framing_verdict(&request) {
        return error_response(&state, ctx, GatewayError::Framing(refused));
    }
    let route = route(role, &state.config.routes, &request);
    // The debug entry checks its own, narrower, permission; the health route none.
    if !matches!(route, Route::Debug | Route::Health)
        && let Err(error) = authenticate(&state, &request)
    {
        return error_response(&state, ctx, error);
    }
    let result = match route {
        Route::Debug => debug(&state, role, request, ctx).await,
        Route::Inference(endpoint) => inference(&state, role, endpoint, request, ctx).await,
        Route::Models => match super::models::list(&state) {
            Some(list) => Ok(list),
            None => forward_untouched(&state, request, ctx).await,
        },
        Route::Health => own_health(&state),
        Route::Forward => forward_untouched(&state, request, ctx).await,
        Route::NotFound => {
            let (method, path) = (request.method().clone(), request.uri().path().to_string());
            Err(GatewayError::RouteNotFound { method, path })
        }
    };
    result.unwrap_or_else(|error| error_response(&state, ctx, error))
}

/// The gateway's own answer to a failed request: logged, counted, tagged, access-logged.
fn error_response(
    state: &GatewayState,
    ctx: &RequestCtx,
    error: GatewayError,
) -> Response<ProxyBody> {
    let (entry, path, request_id) = (ctx.entry.as_str(), ctx.path(), ctx.request_id_text());
    // A bad request is the client's to fix: it is not a warning about the fleet.
    match error.side() {
        Side::Client => tracing::info!(%error, request_id, path, entry, "request refused"),
        side => {
            let side = side.as_str();
            tracing::warn!(%error, request_id, path, entry, side, "request failed")
        }
    }
    let kind = error.kind_label();
    state.metrics.record_error(entry, kind);
    let strategy = state.connector(ctx.entry).strategy();
    let mut response = error.into_response();
    let map = response.headers_mut();
    tag(
        |name, value| {
            map.insert(name, value);
        },
        ctx.entry,
        strategy,
        DEFAULT_VARIANT,
        None,
    );
    if ctx.access_log {
        access_log::emit(&AccessRecord {
            request_id: ctx.request_id_text(),
            method: ctx.method.as_str(),
            path,
            entry,
            variant: DEFAULT_VARIANT,
            replica: "-",
            status: response.status().as_u16(),
            ttft: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            duration: ctx.received_at.elapsed(),
            outcome: kind,
        });
    }
    response
}

/// With `[auth]`, every request on an inference listener needs a known key.
fn authenticate(state: &GatewayState, request: &Request<ClientBody>) -> Result<(), GatewayError> {
    let Some(keys) = &state.config.auth else { return Ok(()) };
    let label = keys.check(request.headers())?;
    if keys.count_by_key {
        state.metrics.requests_by_key.with_label_values(&[label.as_str()]).inc();
    }
    Ok(())
}

/// The framing refusal of a request (see [`super::framing`]): marked by laneway's own
/// reader, or found here for a method any server passes on (`CONNECT`) and for HTTP/1
/// requests hyper read.
fn framing_verdict(request: &Request<ClientBody>) -> Result<(), FramingError> {
    if let Some(Refused(error)) = request.extensions().get::<Refused>() {
        return Err(*error);
    }
    if request.method() == Method::CONNECT {
        return Err(FramingError::Connect);
    }
    if matches!(request.body(), ClientBody::Hyper(_)) && request.version() < Version::HTTP_2 {
        return check_map(request.headers(), request.version() == Version::HTTP_11);
    }
    Ok(())
}

/// What a listener does with a request.
enum Route {
    Debug,
    Inference(Endpoint),
    /// `GET /v1/models`: the union of the replicas' lists.
    Models,
    /// `GET /health`: the gateway's own (200 while a replica takes requests).
    Health,
    /// Untouched to a picked replica: the OpenAI routes the gateway does not interpret
    /// (`/v1/embeddings`, `/v1/responses`) and the paths `[routes] forward` opens.
    Forward,
    /// Anything else: a 404 that never reaches a replica (a replica's control endpoints
    /// among them: `/reset_prefix_cache`, `/sleep`, `/flush_cache`, ...).
    NotFound,
}

fn route(role: ListenerRole, opened: &RoutesConfig, request: &Request<ClientBody>) -> Route {
    let path = request.uri().path();
    let asks_debug =
        headers::find(request.headers(), &headers::ENTRY).is_some_and(|v| v.as_bytes() == b"debug");
    if role == ListenerRole::Entry(Entry::Debug) || path.starts_with("/debug/") || asks_debug {
        return Route::Debug;
    }
    if let Some(endpoint) = Endpoint::from_path(path) {
        return Route::Inference(endpoint);
    }
    let method = request.method();
    match path {
        "/v1/models" if method == Method::GET => Route::Models,
        "/health" if method == Method::GET || method == Method::HEAD => Route::Health,
        "/v1/embeddings" | "/v1/responses" => Route::Forward,
        _ if path.starts_with("/v1/responses/") => Route::Forward,
        _ if opened.forwards(path) => Route::Forward,
        _ => Route::NotFound,
    }
}

/// The gateway's own health: 200 (empty, as vLLM answers) while some replica takes new
/// requests, the OpenAI-shape 503 otherwise.
fn own_health(state: &GatewayState) -> Result<Response<ProxyBody>, GatewayError> {
    if !state.picker.snapshot().iter().any(|replica| replica.accepts_new_requests()) {
        return Err(GatewayError::NoReplica);
    }
    Ok(Response::new(crate::gateway::body::empty()))
}

/// Inference: classify, then admit, pick and forward, then observe.
async fn inference(
    state: &Arc<GatewayState>,
    role: ListenerRole,
    endpoint: Endpoint,
    request: Request<ClientBody>,
    ctx: &mut RequestCtx,
) -> Result<Response<ProxyBody>, GatewayError> {
    let classified = classify_request(state, role, endpoint, request, ctx).await?;
    // A client that leaves before the response headers (a non-streamed request waits for
    // its whole generation) drops this future: count it here, as the response body counts
    // those who leave later.
    let abandoned = AbandonedBeforeHeaders::arm(state, ctx.entry);
    let result = pick_and_forward(state, classified, ctx).await;
    abandoned.disarm();
    result
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

/// A request whose body is read and whose entry is decided (in its context).
struct Classified {
    parts: Parts,
    body: Bytes,
    /// The body's `model`, read by the same parse.
    model: Option<String>,
    /// The body asks for a streamed answer.
    streams: bool,
}

/// Phase 1, classify: method check, body read within the limit, entry and prompt estimate
/// decided. Until the entry is known, the context names the one the request is headed for
/// (for an error's labels).
async fn classify_request(
    state: &Arc<GatewayState>,
    role: ListenerRole,
    endpoint: Endpoint,
    request: Request<ClientBody>,
    ctx: &mut RequestCtx,
) -> Result<Classified, GatewayError> {
    let named = named_entry(role, &request)?;
    if let Some((entry, _)) = named {
        ctx.entry = entry;
    }
    if request.method() != Method::POST {
        let method = request.method().clone();
        let path = endpoint.path().to_string();
        return Err(GatewayError::MethodNotAllowed { method, path });
    }
    let (parts, body) = request.into_parts();
    let limits = (state.config.body_limit_bytes, state.config.reliability.timeouts.client_body);
    let body = read_body(&parts, body, limits).await?;
    let threshold = state.config.short_threshold_tokens;
    let (classification, model) =
        classify::classify_with_model(endpoint, &body, named, threshold, true)
            .map_err(GatewayError::BadBody)?;
    let labels = [classification.entry.as_str(), classification.method.as_str()];
    state.metrics.classified.with_label_values(&labels).inc();
    ctx.entry = classification.entry;
    ctx.strategy = state.connector(ctx.entry).strategy();
    ctx.inference = true;
    ctx.prompt_tokens = classification.prompt_tokens;
    Ok(Classified { parts, body, model, streams: classification.streams })
}

/// Phases 2 to 4: pick a replica, forward with the entry's strategy (a refused connection
/// is retried once elsewhere), and hand the response to the observer as it streams.
async fn pick_and_forward(
    state: &Arc<GatewayState>,
    classified: Classified,
    ctx: &mut RequestCtx,
) -> Result<Response<ProxyBody>, GatewayError> {
    let Classified { mut parts, body, model, streams } = classified;
    let entry = ctx.entry;
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
    ctx.flow = match &tenant {
        Some(tenant) => tenant.flow(asked_band),
        None => Flow { band: asked_band.unwrap_or(DEFAULT_BAND), ..Flow::default() },
    };
    if let Some(tenant) = &tenant {
        // The response carries the tenant's `x-ratelimit-*` headers (see `respond`).
        ctx.quota = Some(state.tenants.admit(tenant, ctx.prompt_tokens).await?);
    }
    // Assign the canary variant; its pool, policy and strategy serve the request.
    let variant = state.variants.choose(entry, &parts.headers, &state.picker, &state.metrics);
    ctx.variant = variant.name.clone();
    ctx.strategy = variant.connector.strategy();
    let slo = classify::slo::request_slo(state.config.entry(entry).slo, &parts.headers)?;
    let shape = RequestShape { prompt_tokens: ctx.prompt_tokens, slo };
    let serving = route.serving.as_deref();
    let forwarding = Forwarding { variant, parts: &parts, body: &body, shape, serving, streams };
    attempts::forward(state, forwarding, ctx).await
}

/// The band `x-laneway-priority` asks for (0..=9), if any.
fn priority_band(request_headers: &http::HeaderMap) -> Result<Option<u8>, GatewayError> {
    let Some(value) = headers::find(request_headers, &headers::PRIORITY) else {
        return Ok(None);
    };
    let band = value.to_str().ok().and_then(|text| text.trim().parse::<u8>().ok());
    match band {
        Some(band) if band <= MAX_BAND => Ok(Some(band)),
        _ => Err(GatewayError::BadHeader {
            name: "x-laneway-priority",
            reason: "must be a band from 0 to 9",
        }),
    }
}

/// The entry fixed before reading the body: by dedicated listener, else by header.
fn named_entry(
    role: ListenerRole,
    request: &Request<ClientBody>,
) -> Result<Option<(Entry, ClassifyMethod)>, GatewayError> {
    if let ListenerRole::Entry(entry) = role {
        return Ok(Some((entry, ClassifyMethod::Listener)));
    }
    let Some(value) = headers::find(request.headers(), &headers::ENTRY) else {
        return Ok(None);
    };
    // Repeats that disagree could be read differently by another proxy on the path.
    if headers::find_all(request.headers(), &headers::ENTRY).any(|other| other != value) {
        return Err(GatewayError::BadHeader {
            name: "x-laneway-entry",
            reason: "is repeated with different values",
        });
    }
    let name = value.to_str().map_err(|_| GatewayError::BadHeader {
        name: "x-laneway-entry",
        reason: "is not valid text",
    })?;
    let entry = name.parse::<Entry>().map_err(GatewayError::UnknownEntry)?;
    Ok(Some((entry, ClassifyMethod::Header)))
}

/// Buffers the body, refusing it as soon as it is known to be over `limit`, or once it has
/// taken longer than `deadline` to arrive. A body laneway's own server read whole (within
/// the same deadline) is taken as it is.
async fn read_body(
    parts: &Parts,
    body: ClientBody,
    (limit, deadline): (usize, Duration),
) -> Result<Bytes, GatewayError> {
    let body = match body.into_whole() {
        Ok(whole) if whole.len() > limit => return Err(GatewayError::PayloadTooLarge { limit }),
        Ok(whole) => return Ok(whole),
        Err(body) => body,
    };
    // The same limits and the same errors as a body streamed through (see [`Upload`]).
    let upload = Upload::new(body, declared_length(parts), (limit, deadline))?;
    match upload.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) => Err(match client_fault::under(error.as_ref()) {
            Some(fault) => GatewayError::client_fault(fault),
            None => GatewayError::ClientBody(error),
        }),
    }
}

/// The body length a request's head declares, if it declares one.
fn declared_length(parts: &Parts) -> Option<u64> {
    let value = parts.headers.get(http::header::CONTENT_LENGTH)?;
    crate::gateway::forward::wire::content_length(value.as_bytes())
}

/// Debug entry: to the named replica, untouched, no parsing, no retry; only where the
/// config serves it, for keys allowed to debug, a few at a time per replica.
async fn debug(
    state: &Arc<GatewayState>,
    role: ListenerRole,
    request: Request<ClientBody>,
    ctx: &mut RequestCtx,
) -> Result<Response<ProxyBody>, GatewayError> {
    ctx.entry = Entry::Debug;
    ctx.strategy = state.connector(Entry::Debug).strategy();
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
    let response = pass_through(state, replica, request, path, ctx).await?;
    Ok(response.map(|body| boxed(HeldBody::new(body, slot))))
}

/// The replica a debug request names, and the path to send it (`None`: its own path).
fn debug_target(
    request: &Request<ClientBody>,
) -> Result<(String, Option<PathAndQuery>), GatewayError> {
    if let Some(path_and_query) = request.uri().path_and_query()
        && let Some((name, path)) = split_debug_path(path_and_query)
    {
        return Ok((name.to_string(), Some(path)));
    }
    let name = request.headers().get(headers::REPLICA).ok_or(GatewayError::MissingReplica)?;
    let name = name.to_str().map_err(|_| GatewayError::BadHeader {
        name: "x-laneway-replica",
        reason: "is not valid text",
    })?;
    Ok((name.to_string(), None))
}

/// Routes the gateway does not interpret (`/v1/embeddings`, opened paths, `/v1/models`
/// before the replicas' lists are known): a picked replica answers, through the short
/// entry's connections.
async fn forward_untouched(
    state: &Arc<GatewayState>,
    request: Request<ClientBody>,
    ctx: &mut RequestCtx,
) -> Result<Response<ProxyBody>, GatewayError> {
    let replica = state.picker.pick(None).ok_or(GatewayError::NoReplica)?;
    pass_through(state, replica, request, None, ctx).await
}

/// Sends a request the gateway does not interpret to `replica` through the connections of
/// the context's entry (to `path` if given) and streams the answer back, counted in flight.
async fn pass_through(
    state: &Arc<GatewayState>,
    replica: Arc<Replica>,
    request: Request<ClientBody>,
    path: Option<PathAndQuery>,
    ctx: &mut RequestCtx,
) -> Result<Response<ProxyBody>, GatewayError> {
    let limits = (state.config.body_limit_bytes, state.config.reliability.timeouts.client_body);
    let (parts, body) = request.into_parts();
    let body = Upload::new(body, declared_length(&parts), limits)?;
    let request = Request::from_parts(parts, boxed(body));
    let guard = InFlightGuard::acquire(replica.clone(), 0);
    let connector = state.connector(ctx.entry);
    state.metrics.record_overhead(OverheadPhase::Request, ctx.received_at);
    let upstream = connector.send(&replica, request, path).await?;
    Ok(respond(state, ctx.hand_over(), Placed::counted(guard), upstream))
}
