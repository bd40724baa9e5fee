//! How fast admitted requests finish, for a `Retry-After` that means something: a client
//! refused behind N waiters should come back when about N places have been freed, not after
//! a fixed guess.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Places freed are counted on every release (one atomic add); the rate is re-estimated
/// only when a refusal asks for it, over at least [`MIN_WINDOW`].
#[derive(Debug)]
pub struct DrainRate {
    freed: AtomicU64,
    estimate: Mutex<Estimate>,
}

#[derive(Debug)]
struct Estimate {
    since: Instant,
    freed_then: u64,
    per_second: Option<f64>,
}

const MIN_WINDOW: Duration = Duration::from_secs(1);
/// A `Retry-After` never beyond this, however slow the drain looks.
const MAX_RETRY_AFTER_SECS: u64 = 60;

impl Default for DrainRate {
    fn default() -> Self {
        let estimate = Estimate { since: Instant::now(), freed_then: 0, per_second: None };
        Self { freed: AtomicU64::new(0), estimate: Mutex::new(estimate) }
    }
}

impl DrainRate {
    pub fn record(&self) {
        self.freed.fetch_add(1, Ordering::Relaxed);
    }

    /// Whole seconds until `ahead` places should have been freed, at least 1 and at most
    /// a minute; `fallback` (the queue timeout) until a rate has been measured.
    pub fn retry_after(&self, ahead: u64, fallback: Duration) -> u64 {
        self.retry_after_at(ahead, fallback, Instant::now())
    }

    fn retry_after_at(&self, ahead: u64, fallback: Duration, now: Instant) -> u64 {
        let mut estimate = self.estimate.lock();
        let window = now.saturating_duration_since(estimate.since);
        if window >= MIN_WINDOW {
            let freed = self.freed.load(Ordering::Relaxed);
            let rate = (freed - estimate.freed_then) as f64 / window.as_secs_f64();
            // A window with nothing freed says the drain is slower than one per window.
            estimate.per_second = Some(rate.max(1.0 / window.as_secs_f64()));
            estimate.since = now;
            estimate.freed_then = freed;
        }
        let seconds = match estimate.per_second {
            Some(rate) => ahead as f64 / rate,
            None => fallback.as_secs_f64(),
        };
        (seconds.ceil() as u64).clamp(1, MAX_RETRY_AFTER_SECS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_follows_the_measured_drain() {
        let rate = DrainRate::default();
        let start = rate.estimate.lock().since;
        assert_eq!(rate.retry_after_at(10, Duration::from_secs(5), start), 5, "no rate yet");
        for _ in 0..40 {
            rate.record();
        }
        // 40 freed in 2 s: 20/s, so 100 ahead need 5 s and 3 ahead 1 s.
        let later = start + Duration::from_secs(2);
        assert_eq!(rate.retry_after_at(100, Duration::from_secs(5), later), 5);
        assert_eq!(rate.retry_after_at(3, Duration::from_secs(5), later), 1);
        // Nothing freed for 10 s: at most one per 10 s, capped at a minute.
        let stalled = later + Duration::from_secs(10);
        assert_eq!(rate.retry_after_at(3, Duration::from_secs(5), stalled), 30);
        assert_eq!(rate.retry_after_at(100, Duration::from_secs(5), stalled), 60);
    }
}
