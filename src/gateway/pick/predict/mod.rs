//! Predicted-latency placement: per-replica latency estimates learned from the gateway's
//! own streams ([`estimate`], over the line fit in [`fit`]) and the policy that places each
//! request where its predicted TTFT and TPOT leave the most room under its SLO
//! ([`headroom`]).

pub mod estimate;
pub mod fit;
pub mod headroom;
#[cfg(test)]
mod tests;

pub use estimate::{LatencyEstimate, LatencyProbe, Predicted};
pub use headroom::PredictedLatency;
