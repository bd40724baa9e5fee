//! The admin listener: `GET /metrics` (Prometheus text) and `GET /health` for machines, the
//! admin API under `/admin/` (replicas and drain, variant weights, the canary report, the
//! N-1 capacity what-if) and
//! the status page at `/` for operators. Access rules are in [`auth`].

pub mod auth;
mod replicas;
mod variants;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::{get, post, put};
use http::StatusCode;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::gateway::capacity::CapacityReport;
use crate::gateway::config::reliability::NO_REPLICA_LIMIT;
use crate::gateway::health::headroom;
use crate::gateway::state::GatewayState;
use crate::gateway::state::reload::LiveState;
use crate::openai::ApiError;
use auth::{Access, authorize};

/// The status page: plain HTML and a little JavaScript, no build step, no external assets.
const STATUS_PAGE: &str = include_str!("status.html");

pub fn router(live: Arc<LiveState>) -> Router {
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
        .route("/admin/capacity", get(capacity))
        .with_state(live)
        // Outermost last: every admin request is traced (at debug), bounded in time, and
        // its body bounded in size before any handler reads it.
        .layer(RequestBodyLimitLayer::new(ADMIN_BODY_LIMIT_BYTES))
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, ADMIN_TIMEOUT))
        .layer(TraceLayer::new_for_http())
}

/// The admin API's bodies are small JSON documents (variant weights).
pub const ADMIN_BODY_LIMIT_BYTES: usize = 64 << 10;
/// No admin request needs longer: the canary report is computed by its own task.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// An [`ApiError`] as an axum response, in the OpenAI error shape.
fn error_response(error: ApiError) -> Response {
    error.into_response::<axum::body::Body>().into_response()
}

/// The live state, handed to a handler only when its caller may read (`WRITE = false`) or
/// change (`WRITE = true`) it; a refused caller gets the OpenAI-shape error instead.
pub(super) struct Authorized<const WRITE: bool>(pub Arc<GatewayState>);

/// A caller allowed to read the admin API.
pub(super) type Reader = Authorized<false>;
/// A caller allowed to change what the admin API changes.
pub(super) type Writer = Authorized<true>;

impl<const WRITE: bool> FromRequestParts<Arc<LiveState>> for Authorized<WRITE> {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        live: &Arc<LiveState>,
    ) -> Result<Self, Response> {
        let ConnectInfo(peer) = ConnectInfo::<SocketAddr>::from_request_parts(parts, live)
            .await
            .map_err(IntoResponse::into_response)?;
        let state = live.load_full();
        let access = if WRITE { Access::Write } else { Access::Read };
        authorize(&state.config.admin, peer, &parts.headers, access).map_err(error_response)?;
        Ok(Self(state))
    }
}

async fn status_page(_: Reader) -> Response {
    Html(STATUS_PAGE).into_response()
}

async fn metrics(State(live): State<Arc<LiveState>>) -> impl IntoResponse {
    let text = render_metrics(&live.load());
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// The exposition, with the N-1 headroom computed from the current replica set and each
/// replica's rotation state as of now (a passive ejection ends by time alone; the health
/// round that logs its end may come up to an interval later).
pub fn render_metrics(state: &GatewayState) -> String {
    let capacity = state.shared.admission.limits().max_in_flight_per_replica;
    let replicas = state.picker.snapshot();
    let figures = headroom::n_minus_one(&replicas, capacity);
    let reliability = &state.shared.reliability_metrics;
    for replica in replicas.iter() {
        let healthy = reliability.replica_healthy.with_label_values(&[&replica.name]);
        healthy.set(i64::from(replica.accepts_new_requests()));
    }
    // A replica's capacity is only known when its in-flight limit is configured.
    let known = capacity != NO_REPLICA_LIMIT;
    reliability.n_minus_one_headroom.set(if known { figures.n_minus_one } else { 0 });
    reliability.largest_fault_domain_replicas.set(figures.largest_fault_domain_replicas as i64);
    state.metrics.render(&state.picker)
}

/// The N-1 what-if table: each fault unit, the replicas it takes down, and the headroom at
/// SLO left (as of the last capacity window).
async fn capacity(Authorized(state): Reader) -> Response {
    Json(CapacityReport::clone(&state.shared.capacity.report.load())).into_response()
}

/// 200 with each replica's in-flight count and scrape age.
async fn health(State(live): State<Arc<LiveState>>) -> impl IntoResponse {
    let state = live.load_full();
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
                "nodes": replica.nodes().collect::<Vec<_>>(),
                "in_flight": replica.load.in_flight(),
                "in_rotation": replica.accepts_new_requests(),
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
