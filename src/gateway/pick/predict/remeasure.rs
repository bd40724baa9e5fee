//! How long a replica that no pick chooses waits before a request is sent to measure it
//! again (`prefix_latency`'s measure-again rule): a second at first, twice as long after
//! each such request in a row, up to [`LONGEST_US`]; a second again once a pick chooses
//! the replica on its estimate, or a first token comes far sooner than its model
//! predicted ([`FAR_SOONER`]).
//!
//! A replica is left unpicked for one of two reasons: its model is wrong (it learned high
//! intercepts while busy and has since recovered), or it is right (the replica is slower).
//! Measuring it again tells which. A first token far sooner than predicted says wrong, and
//! the interval starts over; measurements that leave it unpicked let it grow, so a replica
//! that is simply slower is not handed a short prompt every second. On a real fleet whose
//! second replica prefilled eight times slower, 26 of the 28 short prompts it took in one
//! round of mixed traffic were sent by that rule, once a second.

use std::sync::atomic::{AtomicU64, Ordering};

/// The interval at first, and again after a first token far sooner than predicted.
pub const FIRST_US: u64 = 1_000_000;
/// The longest interval: a replica that turns fast again is measured within this.
pub const LONGEST_US: u64 = 32_000_000;
/// A first token in less than this share of its prediction says the model is wrong.
const FAR_SOONER: f64 = 0.5;

/// One replica's measure-again interval.
#[derive(Debug)]
pub struct Remeasure {
    interval_us: AtomicU64,
}

impl Default for Remeasure {
    fn default() -> Self {
        Self { interval_us: AtomicU64::new(FIRST_US) }
    }
}

impl Remeasure {
    /// How long the replica must have had no request of a size before one of that size is
    /// sent to measure it again (microseconds).
    pub fn interval_us(&self) -> u64 {
        self.interval_us.load(Ordering::Relaxed)
    }

    /// A request was sent to measure the replica again: the next waits twice as long.
    pub fn measured_again(&self) {
        let _ = self.interval_us.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |us| {
            Some(us.saturating_mul(2).min(LONGEST_US))
        });
    }

    /// A pick chose the replica on its estimate: it takes traffic again, and the interval
    /// starts over.
    pub fn chosen(&self) {
        self.start_over();
    }

    /// A first token came `measured` seconds after placement, against `predicted`: far
    /// sooner, and the interval starts over.
    pub fn first_token(&self, predicted: f64, measured: f64) {
        if measured < FAR_SOONER * predicted {
            self.start_over();
        }
    }

    /// Back to [`FIRST_US`], writing only if it is not there already: every pick that
    /// chooses a replica comes here, and one that takes traffic keeps its line unwritten.
    fn start_over(&self) {
        if self.interval_us() != FIRST_US {
            self.interval_us.store(FIRST_US, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_doubles_with_each_measurement_that_confirms_the_model_and_starts_over_on_one_that_does_not_or_a_pick()
     {
        let remeasure = Remeasure::default();
        assert_eq!(remeasure.interval_us(), FIRST_US);
        remeasure.measured_again();
        remeasure.first_token(0.25, 0.3);
        remeasure.measured_again();
        remeasure.first_token(0.25, 0.2);
        assert_eq!(remeasure.interval_us(), 4 * FIRST_US);
        for _ in 0..10 {
            remeasure.measured_again();
        }
        assert_eq!(remeasure.interval_us(), LONGEST_US);
        // A first token at 0.1 s where 0.25 s was predicted: the model is wrong.
        remeasure.first_token(0.25, 0.1);
        assert_eq!(remeasure.interval_us(), FIRST_US);
        // Chosen on its estimate: it takes traffic again.
        remeasure.measured_again();
        remeasure.chosen();
        assert_eq!(remeasure.interval_us(), FIRST_US);
    }
}
