//! Replica health: whether a replica takes new requests. Two sources feed it: active
//! `GET /health` checks ([`active`]) and passive ejection on observed failures
//! ([`eject`]); [`headroom`] says what is left if the largest fault domain fails, and
//! [`metrics`] exports all of it. None of it touches the load counters.

pub mod active;
pub mod eject;
pub mod headroom;
pub mod metrics;

pub use eject::{FailureReason, HealthTracker};
pub use metrics::ReliabilityMetrics;
