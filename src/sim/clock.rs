//! Simulated time: a virtual clock that runs `speed` times faster than the wall clock.
//!
//! Every figure the simulator reports is computed from its model in simulated time
//! (step ends, API-worker busy times), not read back from the wall clock after a sleep, so
//! a noisy machine delays the wall-clock delivery of events but not the reported figures.

use std::time::Duration;

use tokio::time::Instant;

/// A point in simulated time: nanoseconds since the simulator started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct SimTime(pub u64);

impl SimTime {
    /// `self + micros` of simulated time.
    pub fn plus_us(self, micros: f64) -> SimTime {
        SimTime(self.0 + (micros * 1000.0).round().max(0.0) as u64)
    }

    /// Seconds from `earlier` to `self` (0 if `earlier` is later).
    pub fn seconds_since(self, earlier: SimTime) -> f64 {
        self.0.saturating_sub(earlier.0) as f64 / 1e9
    }
}

/// Maps between simulated time and the wall clock.
#[derive(Debug, Clone)]
pub struct SimClock {
    origin: Instant,
    speed: f64,
}

impl SimClock {
    pub fn new(speed: f64) -> Self {
        Self { origin: Instant::now(), speed }
    }

    /// The wall-clock seconds that `simulated` seconds take at this clock's speed.
    pub fn wall_seconds(&self, simulated: f64) -> f64 {
        simulated / self.speed
    }

    /// The current simulated time.
    pub fn now(&self) -> SimTime {
        SimTime((self.origin.elapsed().as_nanos() as f64 * self.speed) as u64)
    }

    /// The wall-clock instant at which `at` happens.
    pub fn wall_instant(&self, at: SimTime) -> Instant {
        self.origin + Duration::from_nanos((at.0 as f64 / self.speed) as u64)
    }

    /// Sleeps until simulated time `at` (returns at once if it has passed), never earlier:
    /// what a stream sends is decided by what the engine produced by then. A wait shorter
    /// than [`SLEEP_FLOOR`] yields until the instant passes instead of sleeping: tokio's
    /// timer rounds every sleep up to its next 1 ms tick, which would turn a microsecond
    /// step into a millisecond one.
    pub async fn sleep_until(&self, at: SimTime) {
        let wall = self.wall_instant(at);
        let wait = wall.saturating_duration_since(Instant::now());
        if wait >= SLEEP_FLOOR {
            tokio::time::sleep_until(wall).await;
            return;
        }
        // Bounded: the instant is less than SLEEP_FLOOR away.
        while Instant::now() < wall {
            tokio::task::yield_now().await;
        }
    }
}

/// Waits shorter than this are yielded through, not slept (see [`SimClock::sleep_until`]).
pub const SLEEP_FLOOR: Duration = Duration::from_micros(50);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_time_scales_with_speed() {
        let clock = SimClock::new(10.0);
        let at = SimTime(1_000_000_000);
        assert_eq!(clock.wall_instant(at) - clock.origin, Duration::from_millis(100));
        assert_eq!(SimTime(0).plus_us(1.5), SimTime(1500));
        assert_eq!(SimTime(3_000_000_000).seconds_since(SimTime(1_000_000_000)), 2.0);
        assert_eq!(SimTime(0).seconds_since(SimTime(5)), 0.0);
    }
}
