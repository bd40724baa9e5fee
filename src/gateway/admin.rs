//! The admin listener: `GET /metrics` (Prometheus text) and `GET /health`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Json};
use axum::routing::get;

use crate::gateway::health::headroom;
use crate::gateway::reload::LiveState;
use crate::gateway::state::GatewayState;

pub fn router(live: Arc<LiveState>) -> Router {
    Router::new().route("/metrics", get(metrics)).route("/health", get(health)).with_state(live)
}

async fn metrics(State(live): State<Arc<LiveState>>) -> impl IntoResponse {
    let text = render_metrics(&live.load());
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// The exposition, with the N-1 headroom computed from the current replica set.
pub fn render_metrics(state: &GatewayState) -> String {
    let capacity = state.shared.admission.limits().max_in_flight_per_replica;
    let figures = headroom::n_minus_one(&state.picker.snapshot(), capacity);
    let reliability = &state.shared.reliability_metrics;
    reliability.n_minus_one_headroom.set(figures.n_minus_one);
    reliability.largest_fault_domain_replicas.set(figures.largest_fault_domain_replicas as i64);
    state.metrics.render(&state.picker)
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
                "in_flight": replica.load.in_flight(),
                "in_rotation": replica.accepts_new_requests(),
                "scrape_age_seconds": age.map(|a| a.as_secs_f64()),
            })
        })
        .collect();
    Json(serde_json::json!({
        "status": "ok",
        "policy": state.picker.policy_name(),
        "replicas": replicas,
    }))
}
