//! `GET /admin/variants` and `PUT /admin/variants/{entry}` (weights, applied to the next
//! request without a restart), and `GET /admin/canary`, the comparison report (JSON, or the
//! text table with `?format=text` or `Accept: text/plain`).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query};
use axum::http::HeaderMap;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::response::{IntoResponse, Json, Response};
use serde_json::{Value, json};

use super::{Authorized, Reader, Writer, error_response};
use crate::canary::render_text;
use crate::gateway::config::Entry;
use crate::gateway::state::GatewayState;
use crate::gateway::state::variants::EntryVariants;
use crate::openai::{ApiError, ErrorKind};

/// The body of `PUT /admin/variants/{entry}`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WeightsUpdate {
    weights: HashMap<String, u64>,
}

fn describe(state: &GatewayState, entry: &EntryVariants) -> Value {
    let weights = entry.weights();
    let total: u64 = weights.iter().map(|w| u64::from(w.weight)).sum();
    let variants: Vec<Value> = entry
        .variants
        .iter()
        .zip(&weights)
        .map(|(variant, weight)| {
            let fallbacks = state
                .metrics
                .canary_fallbacks
                .with_label_values(&[entry.entry.as_str(), &variant.name])
                .get();
            json!({
                "name": &*variant.name,
                "strategy": variant.strategy.as_str(),
                "policy": variant.policy_name().unwrap_or(state.picker.policy_name()),
                "pool": variant.pool,
                "weight": weight.weight,
                "share": if total == 0 { 0.0 } else { f64::from(weight.weight) / total as f64 },
                "fallbacks": fallbacks,
            })
        })
        .collect();
    json!({
        "entry": entry.entry.as_str(),
        "baseline": entry.variants.first().map(|v| v.name.to_string()),
        "variants": variants,
    })
}

pub(super) async fn list(Authorized(state): Reader) -> Response {
    let entries: Vec<Value> = state.variants.compared().map(|e| describe(&state, e)).collect();
    let sticky = state.config.canary.sticky_header.as_ref().map(|h| h.as_str().to_string());
    Json(json!({ "sticky_header": sticky, "entries": entries })).into_response()
}

pub(super) async fn set_weights(
    Authorized(state): Writer,
    Path(entry): Path<String>,
    body: Bytes,
) -> Response {
    let bad = |message: String| error_response(ApiError::new(ErrorKind::BadRequest, message));
    let entry = match entry.parse::<Entry>() {
        Ok(Entry::Debug) => return bad("the debug entry has no variants".into()),
        Ok(entry) => entry,
        Err(error) => {
            return error_response(ApiError::new(ErrorKind::NotFound, error.to_string()));
        }
    };
    let update: WeightsUpdate = match serde_json::from_slice(&body) {
        Ok(update) => update,
        Err(error) => {
            return bad(format!("expected {{\"weights\": {{\"VARIANT\": WEIGHT}}}}: {error}"));
        }
    };
    let variants = state.variants.of(entry);
    if let Err(error) = variants.set_weights(&update.weights) {
        return bad(error.to_string());
    }
    tracing::info!(entry = entry.as_str(), weights = ?update.weights, "variant weights changed");
    Json(describe(&state, variants)).into_response()
}

pub(super) async fn report(
    Authorized(state): Reader,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let Some(report) = state.shared.canary.report().await else {
        return error_response(ApiError::new(ErrorKind::Internal, "canary recorder stopped"));
    };
    let wants_text = query.get("format").is_some_and(|format| format == "text")
        || headers
            .get(ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|accept| accept.starts_with("text/plain"));
    if wants_text {
        ([(CONTENT_TYPE, "text/plain; charset=utf-8")], render_text(&report)).into_response()
    } else {
        Json(report).into_response()
    }
}
