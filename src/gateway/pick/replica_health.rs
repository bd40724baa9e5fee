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
    /// Passive ejection still running. Read on every pick: a replica never ejected, or
    /// whose ejection was seen over, costs no clock read.
    pub fn is_ejected(&self) -> bool {
        let until = self.ejected_until.load(Ordering::Acquire);
        if until == 0 {
            return false;
        }
        if now_micros() < until {
            return true;
        }
        // Over: forget it, unless a new ejection was set meanwhile.
        let _ = self.ejected_until.compare_exchange(until, 0, Ordering::AcqRel, Ordering::Relaxed);
        false
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ejection_holds_until_its_end_and_is_then_forgotten() {
        let health = ReplicaHealth::default();
        assert!(!health.is_ejected() && health.in_rotation());
        health.ejected_until.store(u64::MAX, Ordering::Release);
        assert!(health.is_ejected() && !health.in_rotation());
        // An end already passed (1 is the clock's first microsecond): over, and cleared.
        health.ejected_until.store(1, Ordering::Release);
        assert!(!health.is_ejected());
        assert_eq!(health.ejected_until.load(Ordering::Acquire), 0);
        assert!(health.in_rotation());
    }
}
