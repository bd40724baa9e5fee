//! The admin listener: `GET /metrics` (Prometheus text) and `GET /health`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Json};
use axum::routing::get;

use crate::gateway::state::GatewayState;

pub fn router(state: Arc<GatewayState>) -> Router {
    Router::new().route("/metrics", get(metrics)).route("/health", get(health)).with_state(state)
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
