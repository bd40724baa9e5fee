//! Request routing for one replica: the fault gate, then vLLM's endpoints, then the
//! simulator's own `/sim/` admin endpoints. Every response is tagged with the replica and
//! the API worker that served it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::json;

use super::body::{self, SimBody};
use super::fault::Fault;
use super::state::SimState;
use super::{admin, inference};
use crate::openai::request::Endpoint;
use crate::openai::{ApiError, ErrorKind};

/// Largest request body accepted (a 65k-token prompt is well under 1 MiB).
const MAX_BODY_BYTES: usize = 32 << 20;

/// Paths served, for telling 405 from 404.
const KNOWN_PATHS: &[&str] = &[
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/models",
    "/health",
    "/version",
    "/load",
    "/get_load",
    "/metrics",
    "/kv_event_sources",
    "/sim/stats",
    "/sim/fault",
];

/// Serves one request that arrived on a connection of API worker `worker`.
pub async fn handle(
    state: Arc<SimState>,
    worker: usize,
    request: Request<Incoming>,
) -> Response<SimBody> {
    let mut response = route(&state, worker, request).await;
    let headers = response.headers_mut();
    if let Ok(id) = HeaderValue::from_str(&state.config.id) {
        headers.insert("x-sim-replica", id);
    }
    headers.insert("x-sim-api-worker", HeaderValue::from(worker));
    response
}

async fn route(
    state: &Arc<SimState>,
    worker: usize,
    request: Request<Incoming>,
) -> Response<SimBody> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    let endpoint = Endpoint::from_path(&path);
    if endpoint.is_some() && method == Method::POST {
        state.counters.requests_total.fetch_add(1, Ordering::Relaxed);
        state.workers.count_request(worker);
    }
    if !path.starts_with("/sim/") {
        match state.faults.get() {
            Fault::Unavailable => {
                return body::error_response(ApiError::new(
                    ErrorKind::Unavailable,
                    "The replica is unavailable (simulated fault).",
                ));
            }
            // Held until the connection is dropped (by the client, a crash or shutdown).
            Fault::Hang => std::future::pending::<()>().await,
            _ => {}
        }
    }
    match (method, path.as_str()) {
        (Method::POST, _) if endpoint.is_some() => {
            let endpoint = endpoint.expect("checked");
            match read_body(request).await {
                Ok(bytes) => inference::serve(state.clone(), worker, endpoint, bytes).await,
                Err(error) => body::error_response(error),
            }
        }
        (Method::GET, "/v1/models") => models(state),
        (Method::GET, "/health") => Response::new(body::full(Bytes::new())),
        (Method::GET, "/version") => {
            body::json_response(json!({"version": env!("CARGO_PKG_VERSION")}).to_string())
        }
        (Method::GET, "/load") => {
            let load = state.counters.in_flight.load(Ordering::Relaxed);
            body::json_response(json!({"server_load": load}).to_string())
        }
        (Method::GET, "/get_load") => {
            let load = &state.engine_load;
            let tokens = load.kv_reserved_tokens.load(Ordering::Relaxed)
                + load.waiting_prompt_tokens.load(Ordering::Relaxed);
            body::json_response(json!([{"num_tokens": tokens}]).to_string())
        }
        (Method::GET, "/metrics") => {
            let mut response = Response::new(body::full(state.metrics.render()));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        // vLLM's: each rank's publisher; `{}` when events are off, as vLLM's render-only
        // servers answer.
        (Method::GET, "/kv_event_sources") => {
            let sources = state.kv_events.map_or_else(|| json!({}), |ports| ports.sources());
            body::json_response(sources.to_string())
        }
        (Method::GET, "/sim/stats") => {
            body::json_response(serde_json::to_string(&state.stats()).unwrap_or_default())
        }
        (Method::POST, "/sim/fault") => match read_body(request).await {
            Ok(bytes) => admin::set_fault(state, &bytes),
            Err(error) => body::error_response(error),
        },
        (_, path) if KNOWN_PATHS.contains(&path) => {
            body::error_response(ApiError::new(ErrorKind::MethodNotAllowed, "Method Not Allowed"))
        }
        _ => body::error_response(ApiError::new(ErrorKind::NotFound, "Not Found")),
    }
}

async fn read_body(request: Request<Incoming>) -> Result<Bytes, ApiError> {
    match Limited::new(request.into_body(), MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(ApiError::new(
            ErrorKind::PayloadTooLarge,
            format!("request body is over {MAX_BODY_BYTES} bytes"),
        )),
        Err(error) => Err(ApiError::new(
            ErrorKind::BadRequest,
            format!("cannot read the request body: {error}"),
        )),
    }
}

fn models(state: &SimState) -> Response<SimBody> {
    let profile = &state.config.profile;
    let model = &profile.served_model_name;
    let card = |id: &str, root: &str, parent: Option<&str>| {
        json!({
            "id": id,
            "object": "model",
            "created": state.created_unix,
            "owned_by": "vllm",
            "root": root,
            "parent": parent,
            "max_model_len": profile.max_model_len,
            "permission": [],
        })
    };
    let mut data = vec![card(model, model, None)];
    for adapter in &profile.lora_modules {
        data.push(card(adapter, adapter, Some(model)));
    }
    body::json_response(json!({"object": "list", "data": data}).to_string())
}
