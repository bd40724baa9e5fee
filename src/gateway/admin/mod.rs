//! The admin listener: `GET /metrics` (Prometheus text) and `GET /health` for machines, the
//! admin API under `/admin/` (replicas and drain, variant weights, the canary report) and
//! the status page at `/` for operators. Access rules are in [`auth`].

pub mod auth;
mod replicas;
mod variants;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::HeaderMap;
use axum::http::header::CONTENT_TYPE;
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::{get, post, put};

use crate::gateway::state::GatewayState;
use crate::openai::ApiError;
use auth::{Access, authorize};

/// The status page: plain HTML and a little JavaScript, no build step, no external assets.
const STATUS_PAGE: &str = include_str!("status.html");

pub fn router(state: Arc<GatewayState>) -> Router {
    Router::new()
        .route("/", get(status_page))
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/admin/replicas", get(replicas::list))
        .route("/admin/replicas/{name}/drain", post(replicas::drain))
        .route("/admin/replicas/{name}/undrain", post(replicas::undrain))
        .route("/admin/variants", get(variants::list))
        .route("/admin/variants/{entry}", put(variants::set_weights))
        .route("/admin/canary", get(variants::report))
        .with_state(state)
}

/// An [`ApiError`] as an axum response, in the OpenAI error shape.
fn error_response(error: ApiError) -> Response {
    error.into_response::<axum::body::Body>().into_response()
}

/// Checks access: `Some(response)` when refused.
fn refusal(
    state: &GatewayState,
    peer: SocketAddr,
    headers: &HeaderMap,
    access: Access,
) -> Option<Response> {
    authorize(&state.config.admin, peer, headers, access).err().map(error_response)
}

async fn status_page(
    State(state): State<Arc<GatewayState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refusal(&state, peer, &headers, Access::Read) {
        return refused;
    }
    Html(STATUS_PAGE).into_response()
}

async fn metrics(State(state): State<Arc<GatewayState>>) -> impl IntoResponse {
    let text = state.metrics.render(&state.picker);
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// 200 with each replica's in-flight count and scrape age.
async fn health(State(state): State<Arc<GatewayState>>) -> impl IntoResponse {
    let now = std::time::Instant::now();
    let replicas: Vec<_> = state
        .picker
        .snapshot()
        .iter()
        .map(|replica| {
            let age = replica.load.scrape_age(state.picker.epoch, now);
            serde_json::json!({
                "name": replica.name,
                "node": replica.node,
                "in_flight": replica.load.in_flight(),
                "recent_failures": replica.load.failures(),
                "scrape_age_seconds": age.map(|a| a.as_secs_f64()),
                "draining": replica.is_draining(),
            })
        })
        .collect();
    Json(serde_json::json!({
        "status": "ok",
        "policy": state.picker.policy_name(),
        "replicas": replicas,
    }))
}
