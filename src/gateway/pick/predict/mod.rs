//! Predicted-latency placement: per-replica latency estimates learned from the gateway's
//! own streams ([`estimate`], over the line fit in [`fit`] and the TTFT-by-concurrency
//! curve in [`concurrency`], whose slope per prompt token is the engine's own count
//! ([`engine_speed`], read per counted token at [`token_scale`]) or [`envelope`]'s) and the
//! policy that places each request on the least loaded replica predicted to meet its SLO
//! ([`headroom`]); its predictions are scaled up while a replica's waiting streams are late
//! ([`overdue`]), and a replica no pick chooses is measured again at growing intervals
//! ([`remeasure`]).

pub mod concurrency;
pub mod engine_speed;
pub mod envelope;
pub mod estimate;
pub mod fit;
pub mod headroom;
pub mod overdue;
pub mod remeasure;
#[cfg(test)]
mod tests;
pub mod token_scale;

pub use engine_speed::{EngineReading, EngineWork};
pub use estimate::{
    EngineEntry, EstimateView, LatencyEstimate, LatencyProbe, Predicted, SlopeSource,
};
pub use headroom::PredictedLatency;
