//! Phase 4, observe: watches every proxied response as it streams (TTFT, inter-token gaps,
//! TPOT, E2E, tokens) and exports the gateway's Prometheus metrics.

pub mod access_log;
pub mod body;
pub mod json_usage;
pub mod metrics;
pub mod recorder;
pub mod series;
pub mod watchdog;

pub use body::ObservedBody;
pub use metrics::{GatewayMetrics, OverheadPhase, status_class};
pub use recorder::{BodyKind, DEFAULT_VARIANT, Outcome, Recorder};
pub use watchdog::{Expiry, StreamWatchdog};
