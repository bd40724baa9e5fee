//! Whether the shared store answers: an outage is logged once when it starts and once when
//! it ends, and counted; while it lasts, one call a second probes the store and the rest go
//! straight to local counters, so a dead store costs requests no timeouts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::TenantMetrics;

/// How often a store that stopped answering is tried again.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

pub struct StoreHealth {
    down: AtomicBool,
    /// Milliseconds since `epoch` from which the next probe may go.
    next_probe_ms: AtomicU64,
    epoch: Instant,
    metrics: Arc<TenantMetrics>,
}

impl StoreHealth {
    pub fn new(metrics: Arc<TenantMetrics>, now: Instant) -> Self {
        metrics.store_up.set(1);
        Self { down: AtomicBool::new(false), next_probe_ms: AtomicU64::new(0), epoch: now, metrics }
    }

    fn millis(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_millis() as u64
    }

    /// Whether a call should go to the store now: always while it answers; during an outage
    /// only the first call of each probe interval.
    pub fn may_call(&self, now: Instant) -> bool {
        if !self.down.load(Ordering::Relaxed) {
            return true;
        }
        let now_ms = self.millis(now);
        let due = self.next_probe_ms.load(Ordering::Relaxed);
        let next = now_ms + PROBE_INTERVAL.as_millis() as u64;
        now_ms >= due
            && self
                .next_probe_ms
                .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// The store answered.
    pub fn answered(&self) {
        if self.down.swap(false, Ordering::Relaxed) {
            self.metrics.store_up.set(1);
            tracing::info!("shared quota store answers again: tenants' limits are shared again");
        }
    }

    /// The store did not answer (an error or past the timeout).
    pub fn failed(&self, now: Instant, error: &dyn std::fmt::Display) {
        let next = self.millis(now) + PROBE_INTERVAL.as_millis() as u64;
        self.next_probe_ms.fetch_max(next, Ordering::Relaxed);
        if !self.down.swap(true, Ordering::Relaxed) {
            self.metrics.store_up.set(0);
            self.metrics.store_outages.inc();
            tracing::warn!(
                %error,
                "shared quota store does not answer: serving with this gateway's local limits"
            );
        }
    }

    /// A tenant request was decided on local counters.
    pub fn fell_back(&self) {
        self.metrics.store_fallbacks.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_counted_once_and_probed_once_a_second() {
        let metrics = Arc::new(TenantMetrics::new(&prometheus::Registry::new()));
        let start = Instant::now();
        let health = StoreHealth::new(metrics.clone(), start);
        assert!(health.may_call(start) && health.may_call(start));
        health.failed(start, &"refused");
        health.failed(start, &"refused");
        assert_eq!((metrics.store_outages.get(), metrics.store_up.get()), (1, 0));
        assert!(!health.may_call(start + Duration::from_millis(999)));
        let later = start + Duration::from_millis(1000);
        assert!(health.may_call(later));
        assert!(!health.may_call(later), "one probe per interval");
        health.answered();
        assert!(health.may_call(later) && health.may_call(later));
        assert_eq!(metrics.store_up.get(), 1);
        health.failed(later, &"timeout");
        assert_eq!(metrics.store_outages.get(), 2);
    }
}
