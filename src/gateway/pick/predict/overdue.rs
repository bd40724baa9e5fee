//! Evidence of a slowdown before any first token shows it: the streamed requests on a
//! replica still waiting for their first token, set against what its model predicted for
//! them when they were placed. A replica that turns slow teaches its model only when its
//! slow first tokens arrive (twenty times a prediction later, if it slowed twenty-fold), and
//! until then it looks as fast as it was; a replica holding a prefix its traffic shares kept
//! drawing that traffic all that time. The waiting requests say it first: once the mean of
//! them has waited more than [`ALLOWANCE`] times its mean prediction, every prediction for
//! the replica is scaled by how much later than that they are.
//!
//! Only streamed requests count: an unstreamed one's first token comes with its whole
//! completion, which is no evidence about its prefill.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use crate::gateway::clock;

/// Requests waiting this many times their prediction are as late as a healthy replica's
/// spread allows (its busy spells); past it, predictions are scaled by the excess.
pub const ALLOWANCE: f64 = 2.0;
/// Predictions under a millisecond are taken as one: a scheduling hiccup on a prediction of
/// a few hundred microseconds is no slowdown.
const MIN_PREDICTED_US: f64 = 1_000.0;

/// One replica's waiting streamed requests.
#[derive(Debug, Default)]
pub struct Overdue {
    /// How many are waiting, readable without the lock: an idle replica's picks take none.
    waiting: AtomicU64,
    /// Their sums, under one lock so that a pick never reads one request's placement with
    /// another's prediction.
    sums: Mutex<Sums>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Sums {
    waiting: u64,
    placed_us: u64,
    predicted_us: u64,
}

/// One waiting request's share of its replica's [`Overdue`], given back at its first token
/// (or when it ends without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    placed_us: u64,
    predicted_us: u64,
}

impl Overdue {
    /// A streamed request placed at `placed` with `predicted_ttft` seconds predicted.
    pub fn enter(&self, placed: Instant, predicted_ttft: f64) -> Waiting {
        let waiting = Waiting {
            placed_us: clock::micros_at(placed),
            predicted_us: (predicted_ttft.max(0.0) * 1e6) as u64,
        };
        let mut sums = self.sums.lock();
        sums.waiting += 1;
        sums.placed_us = sums.placed_us.saturating_add(waiting.placed_us);
        sums.predicted_us = sums.predicted_us.saturating_add(waiting.predicted_us);
        self.waiting.store(sums.waiting, Ordering::Relaxed);
        waiting
    }

    /// `waiting` had its first token, or ended without one.
    pub fn leave(&self, waiting: Waiting) {
        let mut sums = self.sums.lock();
        sums.waiting = sums.waiting.saturating_sub(1);
        sums.placed_us = sums.placed_us.saturating_sub(waiting.placed_us);
        sums.predicted_us = sums.predicted_us.saturating_sub(waiting.predicted_us);
        if sums.waiting == 0 {
            *sums = Sums::default();
        }
        self.waiting.store(sums.waiting, Ordering::Relaxed);
    }

    /// How many times the replica's predictions should be taken at `now`: 1 while its
    /// waiting requests are on time (or within [`ALLOWANCE`] of it), else the mean wait
    /// over the mean prediction, less the allowance's excess (continuous at the threshold).
    pub fn factor(&self, now: Instant) -> f64 {
        if self.waiting.load(Ordering::Relaxed) == 0 {
            return 1.0;
        }
        let sums = *self.sums.lock();
        if sums.waiting == 0 {
            return 1.0;
        }
        let count = sums.waiting as f64;
        let placed_mean = sums.placed_us as f64 / count;
        let predicted_mean = (sums.predicted_us as f64 / count).max(MIN_PREDICTED_US);
        let waited_mean = (clock::micros_at(now) as f64 - placed_mean).max(0.0);
        (waited_mean / predicted_mean - (ALLOWANCE - 1.0)).max(1.0)
    }

    /// Streamed requests waiting for their first token.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn requests_on_time_or_within_the_allowance_leave_predictions_alone() {
        let overdue = Overdue::default();
        let start = Instant::now();
        assert_eq!(overdue.factor(start), 1.0, "nothing waiting");
        let first = overdue.enter(start, 0.100);
        assert_eq!(overdue.factor(start + 50 * MS), 1.0, "half its prediction");
        assert_eq!(overdue.factor(start + 200 * MS), 1.0, "twice its prediction: the allowance");
        overdue.leave(first);
        assert_eq!(overdue.waiting(), 0);
        assert_eq!(overdue.factor(start + 10_000 * MS), 1.0, "it left: no evidence");
    }

    #[test]
    fn a_late_mean_scales_predictions_by_its_excess_and_new_requests_dilute_it() {
        let overdue = Overdue::default();
        let start = Instant::now();
        let old = overdue.enter(start, 0.010);
        // Waited 100 ms on a 10 ms prediction: ten times, nine past the allowance.
        let factor = overdue.factor(start + 100 * MS);
        assert!((factor - 9.0).abs() < 0.01, "{factor}");
        // A request placed now, on a 10 ms prediction too: the mean wait halves.
        let new = overdue.enter(start + 100 * MS, 0.010);
        let factor = overdue.factor(start + 100 * MS);
        assert!((factor - 4.0).abs() < 0.01, "{factor}");
        overdue.leave(old);
        let factor = overdue.factor(start + 110 * MS);
        assert!((factor - 1.0).abs() < 1e-9, "{factor}");
        overdue.leave(new);
        assert_eq!(overdue.waiting(), 0);
    }

    #[test]
    fn a_tiny_prediction_counts_as_a_millisecond() {
        let overdue = Overdue::default();
        let start = Instant::now();
        let _waiting = overdue.enter(start, 0.0002);
        // 2.5 ms on a 0.2 ms prediction is 2.5 milliseconds' worth: half past the allowance.
        let factor = overdue.factor(start + Duration::from_micros(2_500));
        assert!((factor - 1.5).abs() < 0.01, "{factor}");
    }
}
