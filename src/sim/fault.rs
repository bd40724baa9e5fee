//! Fault switches: ways to break a replica at runtime (and heal it) for reliability tests.

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// The fault a replica is currently playing; `Healthy` is normal service.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Fault {
    #[default]
    Healthy,
    /// 503 to everything, `/health` included (the `/sim/` admin endpoints keep working).
    Unavailable,
    /// Accept connections and requests, never answer them.
    Hang,
    /// Streams reset the connection after sending N chunks; non-streaming bodies unaffected.
    CutAfterChunks { chunks: u64 },
    /// Every engine step takes `factor` times longer.
    Slow { factor: f64 },
    /// Stop the listener and drop all connections, as a crash. `laneway sim` exits; an
    /// in-process replica listens again on the same address when switched to another mode.
    Exit,
}

impl Fault {
    /// Why this fault cannot be applied, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        match self {
            Fault::Slow { factor } if !factor.is_finite() || *factor <= 0.0 => {
                Err(format!("slow factor must be a finite number > 0, got {factor}"))
            }
            _ => Ok(()),
        }
    }

    /// The factor engine steps are stretched by.
    pub fn step_factor(&self) -> f64 {
        match self {
            Fault::Slow { factor } if factor.is_finite() && *factor > 0.0 => *factor,
            _ => 1.0,
        }
    }
}

/// The current fault, readable without blocking and watchable for changes.
#[derive(Debug)]
pub struct FaultSwitch {
    current: watch::Sender<Fault>,
}

impl Default for FaultSwitch {
    fn default() -> Self {
        Self { current: watch::Sender::new(Fault::Healthy) }
    }
}

impl FaultSwitch {
    pub fn get(&self) -> Fault {
        self.current.borrow().clone()
    }

    /// Switches to `fault`; an invalid one (e.g. a non-positive slow factor) is ignored.
    pub fn set(&self, fault: Fault) {
        if let Err(reason) = fault.check() {
            tracing::warn!(%reason, "ignoring invalid fault");
            return;
        }
        tracing::info!(?fault, "fault switched");
        self.current.send_replace(fault);
    }

    pub fn subscribe(&self) -> watch::Receiver<Fault> {
        self.current.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_shape_is_tagged_by_mode() {
        let fault: Fault =
            serde_json::from_str(r#"{"mode":"cut_after_chunks","chunks":5}"#).unwrap();
        assert_eq!(fault, Fault::CutAfterChunks { chunks: 5 });
        assert_eq!(
            serde_json::to_string(&Fault::Unavailable).unwrap(),
            r#"{"mode":"unavailable"}"#
        );
        assert_eq!(Fault::Slow { factor: 3.0 }.step_factor(), 3.0);
        assert!(Fault::Slow { factor: 0.0 }.check().is_err());
    }
}
