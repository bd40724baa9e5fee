//! `GET /admin/replicas` (load, queue and drain state of every replica) and
//! `POST /admin/replicas/{name}/drain|undrain`: a drained replica gets no new requests and
//! finishes those in flight.

use std::time::Instant;

use axum::extract::Path;
use axum::response::{IntoResponse, Json, Response};
use serde_json::{Value, json};

use super::{Authorized, Reader, Writer, error_response};
use crate::gateway::pick::Replica;
use crate::gateway::state::GatewayState;
use crate::openai::{ApiError, ErrorKind};

/// One replica as the admin API shows it.
fn describe(state: &GatewayState, replica: &Replica, now: Instant) -> Value {
    let picker = &state.picker;
    let load = &replica.load;
    let reported = load.fresh_report(picker.epoch, now, picker.fresh_for);
    let pools: Vec<&str> = state
        .config
        .pools
        .iter()
        .filter(|pool| pool.replicas.contains(&replica.name))
        .map(|pool| pool.name.as_str())
        .collect();
    let (addresses, address_lookups) = replica.addresses.kept();
    json!({
        "name": replica.name,
        "url": format!("{}://{}", replica.scheme(), replica.authority),
        // What a host name resolved to, kept between connects (empty for an IP address).
        "addresses": addresses.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "address_lookups": address_lookups,
        "node": replica.node,
        "nodes": replica.nodes().collect::<Vec<_>>(),
        "rack": replica.placement.rack,
        "pools": pools,
        "draining": replica.is_draining(),
        "accepts_new_requests": replica.accepts_new_requests(),
        "in_flight": load.in_flight(),
        "in_flight_prompt_tokens": load.in_flight_prompt_tokens(),
        // Streamed requests it has been sent and not answered (its API backlog).
        "unanswered": load.answer_gate.unanswered(),
        // Reported figures are shown only while fresh, as the picker uses them.
        "reported_waiting": reported.map(|r| r.waiting),
        "reported_running": reported.map(|r| r.running),
        "kv_cache_usage": reported.map(|r| r.kv_cache_usage),
        "scrape_age_seconds": load.scrape_age(picker.epoch, now).map(|age| age.as_secs_f64()),
        "latency_estimate": latency_estimate(replica),
        // Each KV-event source followed: its account's verdict (`known`: placement uses it),
        // blocks held and the next batch expected.
        "kv_events": replica.engine_cache.report(),
        // The unit its engine caches prompts in, learned from its `cached_tokens` reports
        // (null until one reported a hit): a report up to one unit short is no eviction.
        "cache_unit_tokens": Some(replica.cache_granularity.tokens()).filter(|&unit| unit > 0),
    })
}

/// What predicted-latency placement has learned of the replica (seconds), so that an
/// operator can see why it is or is not picked.
fn latency_estimate(replica: &Replica) -> Value {
    let view = replica.latency.view(Instant::now());
    json!({
        "ttft_seconds_per_token": view.ttft_seconds_per_token,
        "ttft_seconds_per_token_through_origin": view.ttft_seconds_per_token_through_origin,
        "ttft_slope_source": view.ttft_slope_source.as_str(),
        "engine_prefill_concurrency": view.engine_prefill_concurrency,
        "engine_tokens_per_counted_token": view.engine_tokens_per_counted,
        "ttft_intercept_by_others_in_flight": view.ttft_intercepts,
        "ttft_spread_by_others_in_flight": view.ttft_spreads,
        "decode_intercept": view.decode.0,
        "decode_seconds_per_stream": view.decode.1,
        "pending_prefill_tokens": view.pending_prefill_tokens,
        "engine_prefill_tokens": view.engine_prefill_tokens,
        "placements": view.placements,
        "waiting_streams": view.waiting_streams,
        "late_factor": view.late_factor,
        "remeasure_after_seconds": view.remeasure_after.as_secs_f64(),
        "prefill_samples": view.samples.0,
        "decode_samples": view.samples.1,
    })
}

pub(super) async fn list(Authorized(state): Reader) -> Response {
    let now = Instant::now();
    let replicas: Vec<Value> =
        state.picker.snapshot().iter().map(|replica| describe(&state, replica, now)).collect();
    Json(json!({ "policy": state.picker.policy_name(), "replicas": replicas })).into_response()
}

pub(super) async fn drain(Authorized(state): Writer, Path(name): Path<String>) -> Response {
    set_draining(&state, &name, true)
}

pub(super) async fn undrain(Authorized(state): Writer, Path(name): Path<String>) -> Response {
    set_draining(&state, &name, false)
}

fn set_draining(state: &GatewayState, name: &str, draining: bool) -> Response {
    let Some(replica) = state.picker.by_name(name) else {
        return error_response(ApiError::new(
            ErrorKind::NotFound,
            format!("unknown replica `{name}`"),
        ));
    };
    replica.set_draining(draining);
    tracing::info!(replica = name, draining, "replica drain state changed by the admin API");
    Json(describe(state, &replica, Instant::now())).into_response()
}
