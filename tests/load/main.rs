//! Tests that compare latencies measured on the wall clock (a replica under a fault against
//! the unloaded baseline, keep-alive against fresh connections): a binary of their own,
//! which cargo runs after `tests/it`, so the functional tests never share the machine with
//! them; inside it they run one at a time.

// Shared with `tests/it`; this binary uses only part of it.
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

mod canary_pools;
mod canary_traffic;
mod canary_twins;
mod gateway_reliability;
mod routing_fault;
mod sim_pinning;
mod streaming_load;

/// Taken by every test here: each measures latencies, so none may load another.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
