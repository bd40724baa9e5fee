//! One replica's health, in atomics: the request path reads it on every pick, the health
//! checker and the passive ejector write it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::gateway::clock::now_micros;

/// Whether a replica is in rotation, and why not.
#[derive(Debug, Default)]
pub struct ReplicaHealth {
    /// Observed failures in a row (connect errors, resets, 5xx, timeouts).
    pub(crate) consecutive_failures: AtomicU32,
    /// Ejected until this instant ([`now_micros`] scale); 0 when never ejected.
    pub(crate) ejected_until: AtomicU64,
    /// Ejections so far, which lengthen the next one; decays while the replica is healthy.
    pub(crate) ejections: AtomicU32,
    /// The active checks found it down.
    pub(crate) check_down: AtomicBool,
    /// Active checks passed in a row.
    pub(crate) check_streak: AtomicU32,
    /// Active checks failed in a row.
    pub(crate) check_failures: AtomicU32,
    /// What the last health report said, so changes are logged once.
    pub(crate) reported_out: AtomicBool,
}

impl ReplicaHealth {
    /// Passive ejection still running.
    pub fn is_ejected(&self) -> bool {
        now_micros() < self.ejected_until.load(Ordering::Acquire)
    }

    /// The active checks currently find the replica down.
    pub fn is_check_down(&self) -> bool {
        self.check_down.load(Ordering::Acquire)
    }

    /// Neither ejected nor failing its checks.
    pub fn in_rotation(&self) -> bool {
        !self.is_check_down() && !self.is_ejected()
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures.load(Ordering::Relaxed)
    }

    pub fn ejections(&self) -> u32 {
        self.ejections.load(Ordering::Relaxed)
    }
}
